"""The clients a kernel makes, found as it makes them, recorded or not.

The panel knew a notebook's cluster only once a cell was recorded: after
``client = Client(LocalCluster())`` it kept showing an older cluster. With
``%load_ext dask_observe`` (and ``observe.discover``, on by default), the end
of each cell looks for clients made since the extension loaded; each new one
gets the recorder its first recorded cell would have started (the capture
plugins, the cluster and its dashboard in the store), from a thread of its
own so that the cell's end does not wait for the cluster. The recorder copies
what the cluster says while the client is connected, so that the panel shows
its workers, lines and dashboard between cells; when the client closes, the
store is told at once (the panel greys the cluster within its next poll).

Only the kernel's own clients are watched: the Jupyter server never connects
to anything by itself.
"""

from __future__ import annotations

import logging
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any

from dask_observe.config import default_store_path, get
from dask_observe.store import BaseStore

if TYPE_CHECKING:
    from distributed import Client

logger = logging.getLogger(__name__)

#: How often a watch looks whether its client closed.
CLOSED_POLL_S = 0.5


class Discovery:
    """``post_run_cell``: watch each client made since it was created."""

    def __init__(self) -> None:
        #: Clients seen: those that existed as the extension loaded (a
        #: test's, a library's: not made in a cell) and those watched since.
        self._seen: weakref.WeakSet[Client] = weakref.WeakSet(_clients())
        #: The watches' threads (joined by tests; daemons otherwise).
        self.threads: list[threading.Thread] = []

    def __call__(self, result: object = None) -> None:
        # Every cell's end: a few attribute reads while nothing is new.
        if "distributed" not in sys.modules:
            return
        if get("discover") is False:
            return
        for client in _clients():
            if client in self._seen:
                continue
            self._seen.add(client)
            if client.asynchronous or client.status != "running":
                continue  # a coroutine's client: its loop is not ours to use
            thread = threading.Thread(
                target=watch,
                args=(weakref.ref(client),),
                name="dask-observe-discover",
                daemon=True,
            )
            self.threads = [t for t in self.threads if t.is_alive()] + [thread]
            thread.start()


def _clients() -> list[Client]:
    """Every client of this process (distributed keeps a weak set of them)."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return []
    return list(getattr(distributed.Client, "_instances", ()))


def watch(ref: weakref.ref[Any]) -> None:
    """Hold the client's recorder (into the default store) until the client
    closes. A cluster that refuses the capture is said once, by the recorder;
    any other failure only costs the panel this cluster."""
    from dask_observe.recording.recorder import Recorder

    client = ref()
    if client is None:
        return
    try:
        with BaseStore(default_store_path()) as store:
            recorder = Recorder.acquire(client, store)
    except Exception as e:
        logger.debug("dask-observe: cannot watch the new client: %s", e)
        return
    del client  # looked up again each time: the watch holds none
    try:
        while not recorder.gone.wait(CLOSED_POLL_S):
            client = ref()
            if client is None or client.status in ("closing", "closed"):
                break
            del client
    finally:
        recorder.release()

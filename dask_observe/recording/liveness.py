"""Whether a recorded cluster is watched and its scheduler answers, as the
store tells the panel (``clusters.last_seen`` and ``silent_since``).

The recorder's thread reports each periodic pull's outcome. But while a pull
waits on a scheduler that froze (its process stopped, its event loop held),
that thread waits with it, up to ``observe.recorder.answer-timeout`` (30 s):
it could neither say so nor keep the cluster marked live, so the panel showed
the cluster gone after 15 s and silent only after 30. A watchdog thread
(:meth:`Liveness.watch`) does both once a call has waited
``observe.recorder.silent-after`` (5 s), while the call waits on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from dask_observe.config import get
from dask_observe.store.clusters import ClientOf
from dask_observe.units import parse_seconds

if TYPE_CHECKING:
    from dask_observe.store import BaseStore

logger = logging.getLogger(__name__)

#: How often the store is told that a cluster is still watched.
TOUCH_INTERVAL_S = 3.0


def silent_after() -> float:
    """Seconds a call to the scheduler waits before its scheduler is said to be
    silent (``observe.recorder.silent-after``); the call itself waits on, up to
    ``answer-timeout``."""
    return parse_seconds(get("recorder.silent-after") or 5)


def this_process() -> ClientOf:
    """This process as a watcher of clusters: where it was made is its
    notebook's path where Jupyter started its kernel (``JPY_SESSION_NAME``,
    which jupyter_server sets for a session's kernel), else its program.
    (Read each time, not cached: a forked child is another process.)"""
    made_in = os.environ.get("JPY_SESSION_NAME") or _program()
    return ClientOf(socket.gethostname(), os.getpid(), made_in)


def _program() -> str:
    first = sys.argv[0] if sys.argv else ""
    if "ipykernel" in first:
        return "a Jupyter kernel"  # one started outside a session (nbclient)
    name = os.path.basename(first)
    return name if name and name != "-c" else "python"


class Liveness:
    """What the store says of one cluster's liveness, told from two threads:
    the recorder's (:meth:`answered`, :meth:`unanswered`, :meth:`watched`)
    and the watchdog (:meth:`watch`)."""

    def __init__(self, store: BaseStore, cluster: str) -> None:
        self.store = store
        self.cluster = cluster
        #: When the scheduler last answered (epoch seconds), once a call to it
        #: waited past ``silent-after`` or out ``answer-timeout`` on a
        #: connection that held; None while it answers.
        self.silent_since: float | None = None
        self._told_silent_since: float | None = None
        self._answered = time.time()
        #: Since when (monotonic) a call to the scheduler has waited, or None.
        self._asking_since: float | None = None
        self._touched = time.monotonic()  # registering the cluster touched it
        self._lock = threading.Lock()
        self.silent_after_s = silent_after()

    @contextlib.contextmanager
    def asking(self) -> Iterator[None]:
        """Around a call that only the scheduler answers (no worker's wait in
        it): the watchdog measures the scheduler's silence by it."""
        self._asking_since = time.monotonic()
        try:
            yield
        finally:
            self._asking_since = None

    def answered(self) -> None:
        """A periodic pull was answered: the scheduler answers again."""
        with self._lock:
            self._answered, self.silent_since = time.time(), None
            self._touch()

    def unanswered(self) -> None:
        """A periodic pull waited out ``answer-timeout``, its connection held:
        still watched, silent since its last answer."""
        with self._lock:
            self._silent()

    def watched(self) -> None:
        """Nothing asked (a recorder lingering between runs) while the client
        that recorded the cluster is connected: still watched."""
        with self._lock:
            self._touch()

    def watch(self, stop: threading.Event) -> None:
        """The watchdog's loop, until ``stop``: a call waiting past
        ``silent-after`` makes the scheduler silent since its last answer,
        and the cluster is kept marked live meanwhile."""
        every = min(1.0, max(0.05, self.silent_after_s / 2))
        while not stop.wait(every):
            asking = self._asking_since
            if asking is None or time.monotonic() - asking < self.silent_after_s:
                continue
            with self._lock:
                if self._asking_since is not None:  # not answered meanwhile
                    self._silent()

    def _silent(self) -> None:
        """(Under the lock.) The scheduler is silent since its last answer, if
        it was not already; the cluster is still watched."""
        if self.silent_since is None:
            self.silent_since = self._answered
        self._touch()

    def _touch(self) -> None:
        """Tell the store (under the lock) every TOUCH_INTERVAL_S, and at once
        when the silence changed."""
        told = self.silent_since == self._told_silent_since
        if told and time.monotonic() - self._touched <= TOUCH_INTERVAL_S:
            return
        try:
            self.store.telemetry.touch_cluster(
                self.cluster, self.silent_since, client=this_process()
            )
        except Exception as e:  # a busy store: next time
            logger.debug("dask-observe: cannot mark the cluster live: %s", e)
            return
        self._told_silent_since = self.silent_since
        self._touched = time.monotonic()

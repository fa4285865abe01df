"""``dask_observe.record()``: a block recorded as one run, and what a block
gets when its store cannot be used (it runs, unrecorded, and says why)."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dask_observe.api import Run, Store
from dask_observe.config import default_store_path
from dask_observe.recording.lifecycle import Recording
from dask_observe.recording.span import resolve_client
from dask_observe.store import StoreError

if TYPE_CHECKING:
    from distributed import Client

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def record(
    name: str = "run",
    client: Client | None = None,
    store: Store | str | os.PathLike[str] | None = None,
    *,
    native: bool | None = None,
) -> Iterator[Run]:
    """Record the block as one run; the same as ``%%dask_record`` in a notebook.

    Parameters
    ----------
    name
        The run's name, shown in listings.
    client
        The Dask client whose cluster to record; default: the current client.
    store
        A :class:`Store`, a path, or None for the configured default store.
    native
        Also profile compiled code: py-spy samples each worker process while
        the run lasts (``observe.profile.native-rate`` a second, 10 by
        default; each sample pauses the process), and the run's profile
        descends into the native frames beneath Python's. None: as
        ``observe.profile.native`` says (off by default). Needs py-spy on
        the workers (``pip install 'dask-observe[native]'``) and the right
        to trace their processes; where they lack it, one line says why.

    Yields
    ------
    Run
        The run. Its end (every worker's last records, its final status and
        counts, its flags) is written after the block returns, by a thread of
        its own: reading the run in this process waits for it, and so do the
        next run of the store and the client's close. Another process sees
        it running until then (a few milliseconds).

    Raises
    ------
    NoClientError
        When no client was given and none exists.

    A store that cannot be opened or written never stops the block: it runs,
    one warning says why, and a :class:`NotRecorded` is yielded instead.
    """
    the_client = resolve_client(client)
    unrecorded: NotRecorded | None
    try:
        recording = begin(name, the_client, store, native=native)
    except STORE_ERRORS as e:
        unrecorded = NotRecorded(name, str(e))
        logger.warning("dask-observe: %s", unrecorded.why_line())
    else:
        unrecorded = None
    if unrecorded is not None:  # outside the except: the block's errors are its own
        yield unrecorded  # type: ignore[misc]  # a Run that says why it is not one
        return
    assert recording.run is not None
    status = "failed"
    try:
        yield recording.run
        status = "finished"
    finally:
        end(recording, status)


#: What a store that cannot be used raises: it never stops the user's block.
STORE_ERRORS = (StoreError, sqlite3.Error)


def begin(
    name: str,
    client: Client,
    store: Store | str | os.PathLike[str] | None,
    **options: Any,
) -> Recording:
    """A started recording into ``store`` (a Store, a path, or None for the
    default), for ``record()`` and ``%%dask_record``. A store opened here
    stays open: the yielded Run reads through it afterwards.

    Raises
    ------
    StoreError, sqlite3.Error
        When the store cannot be opened or written (see :data:`STORE_ERRORS`).
    """
    opened = None
    if not isinstance(store, Store):
        store = opened = Store(default_store_path() if store is None else store)
    recording = Recording(name, client, store, **options)
    try:
        recording.start()
    except BaseException:
        if opened is not None:
            opened.close()
        raise
    return recording


def end(recording: Recording, status: str) -> Run | None:
    """Stop ``recording`` as ``status``; a store that fails now is one
    warning, never an error in the user's block (which may be raising its
    own). The run, or None when its end could not be stored."""
    try:
        return recording.stop(status)
    except STORE_ERRORS as e:
        logger.warning(
            "dask-observe: the end of run %r could not be stored (%s); the "
            "block ran, and what was stored before is kept",
            recording.name,
            e,
        )
        return None


class NotRecorded:
    """What ``record()`` yields when the store could not be used: the block
    ran, and nothing of it was kept. Anything asked of it says why."""

    id = None
    status = "not recorded"

    def __init__(self, name: str, why: str) -> None:
        self.name = name
        self.why = why

    def why_line(self) -> str:
        """One line for a warning: which run, and why."""
        return f"run {self.name!r} was not recorded (the block ran): {self.why}"

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise StoreError(self.why_line())

    def __repr__(self) -> str:
        return f"<dask_observe.NotRecorded {self.name!r}: {self.why}>"

"""The ends of runs this process is still writing, and who waits for them.

A run's *end* is written after its block returned, by a thread of its own
(the *finisher*, ``recording.finish``), in stages:

1. ``WRITING``: its last records are on their way (every worker flushed);
2. ``RECORDS_STORED``: they are stored and the run's row closed. The next run
   in this process (:func:`wait_records_stored`), and its own client's
   close (:func:`wait_stored`), wait for this stage: nothing may come
   between a run and its last records;
3. ``JUDGED``: its settings, environment and judged flags are stored.
   Readers of a run whose report follows (a recorded cell) wait for this
   stage, and take the flags judged rather than judge again;
4. ``DONE``: what only later readers need (its history figures, the live
   export's end, retention). Every other reader of the run waits for this
   (:meth:`PendingEnd.wait`).

Where a report follows, the finisher waits (bounded) after ``JUDGED`` until
the report was shown (:meth:`PendingEnd.shown`), not to hold that cell up.
"""

from __future__ import annotations

import enum
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dask_observe.diagnose import Flag
    from dask_observe.store import BaseStore


class Stage(enum.IntEnum):
    """How far a run's end is written (see the module)."""

    WRITING = 0
    RECORDS_STORED = 1
    JUDGED = 2
    DONE = 3


class PendingEnd:
    """The end of one run being written in this process (see the module)."""

    def __init__(self, key: tuple[str, int]) -> None:
        #: (the store's path, the run's id)
        self.key = key
        #: The finisher's thread (waits in it return at once).
        self.thread: threading.Thread | None = None
        #: The run's flags, once judged.
        self.flags: list[Flag] | None = None
        #: A reader here shows the run's report as soon as it is judged.
        self.report_follows = False
        self._stage = Stage.WRITING
        self._shown = False
        self._changed = threading.Condition()

    @property
    def stage(self) -> Stage:
        return self._stage

    def reach(self, stage: Stage) -> None:
        """The finisher reached ``stage`` (it never goes back)."""
        with self._changed:
            self._stage = max(self._stage, stage)
            self._changed.notify_all()
        if stage is Stage.DONE:
            with _lock:
                _pending.pop(self.key, None)

    def shown(self) -> None:
        """The reader that ``report_follows`` named showed the report."""
        with self._changed:
            self._shown = True
            self._changed.notify_all()

    def wait(self) -> bool:
        """Wait until the end is done (until it is judged, where a report that
        follows is not shown yet); False, at once, in the finisher's thread."""
        if self.thread is threading.current_thread():
            return False
        with self._changed:
            judged_is_enough = self.report_follows and not self._shown
            until = Stage.JUDGED if judged_is_enough else Stage.DONE
            self._changed.wait_for(lambda: self._stage >= until)
        return True

    def wait_records_stored(self, timeout: float | None = None) -> None:
        """Wait until the run's records are stored and its row closed (not in
        the finisher's thread)."""
        if self.thread is threading.current_thread():
            return
        with self._changed:
            self._changed.wait_for(lambda: self._stage >= Stage.RECORDS_STORED, timeout)

    def wait_shown(self, timeout: float) -> None:
        """Where a report follows, wait (up to ``timeout``) until it was shown."""
        if self.report_follows:
            with self._changed:
                self._changed.wait_for(lambda: self._shown, timeout)


_pending: dict[tuple[str, int], PendingEnd] = {}
_lock = threading.Lock()


def begin_end(source: BaseStore, run_id: int) -> PendingEnd:
    """Register the end of ``run_id`` as being written here."""
    end = PendingEnd((str(source.path), run_id))
    with _lock:
        _pending[end.key] = end
    return end


def pending_end(source: BaseStore, run_id: int) -> PendingEnd | None:
    """The end of that run if this process is still writing it."""
    with _lock:
        return _pending.get((str(source.path), run_id))


def _of(source: BaseStore | None) -> list[PendingEnd]:
    with _lock:
        return [
            e
            for e in _pending.values()
            if source is None or e.key[0] == str(source.path)
        ]


def wait_records_stored(source: BaseStore | None, timeout: float | None = None) -> None:
    """Wait (up to ``timeout`` in all) until the runs of ``source`` (None: of
    any store) whose end is being written here have their records stored: a
    run starting after another must not come between a run and its last
    records."""
    wait_stored(_of(source), timeout)


def wait_stored(ends: Iterable[PendingEnd], timeout: float | None = None) -> None:
    """Wait (up to ``timeout`` in all) until each of ``ends`` has its records
    stored."""
    until = None if timeout is None else time.monotonic() + timeout
    for end in ends:
        left = None if until is None else max(until - time.monotonic(), 0.0)
        end.wait_records_stored(left)


def wait_ends(source: BaseStore) -> None:
    """Wait for every run end of this store being written here (a listing
    shows every run's flag count)."""
    pending = _of(source)
    if any(e.thread is threading.current_thread() for e in pending):
        return  # one end never waits for another: two that prune would hang
    for end in pending:
        end.wait()

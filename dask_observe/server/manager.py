"""The extension's one way to its store: read-only, bounded, shared fairly.

Every handler gets the one :class:`StoreManager` through its route kwargs. It
reads on a thread pool of its own (not the event loop's default executor, which
the Jupyter server shares with everything else), through one read-only
connection per read, each read under a deadline. What may run at once
is capped per kind of work, so that a client that floods the server with
pattern queries or subscriptions is refused (429) instead of queueing ahead of
everyone. Server-wide, not per user name: a Jupyter server is one user's, and
token-authenticated requests without a cookie each get a new anonymous name.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from dask_observe.server.watch import StoreWatch
from dask_observe.store import BaseStore, StoreError
from dask_observe.store.connection import NARROW_IT

T = TypeVar("T")

#: Threads reading the store: a few slow reads cannot take them all (see caps).
THREADS = 6
#: Processes for reads that run Python for long: a pattern tried row by row,
#: a report, flags. In the server's process they would hold its GIL, and every
#: other request waits its turn for it (seen: /runs took 5 s beside two pattern
#: queries). Shared by the managers of a process, started at the first such read.
PROCESSES = 2
#: Seconds a read may take before it is stopped and answered with a 400.
DEADLINE_S = 5.0
#: Seconds a page built from a whole run (its report, a comparison) may take:
#: work that grows with the run, not with what a request asked for, so
#: nothing to narrow. A report took 5.9 s on a host at a load of 12 on
#: its 2 cores, and was refused with the advice to narrow a query.
PAGE_DEADLINE_S = 120.0
#: What a page past its deadline says.
PAGE_ADVICE = (
    "the host may be too busy: try again, or build it in a terminal "
    "(dask-observe report, dask-observe compare)"
)
#: Threads for work that is not the store's (the team's archive, on storage
#: that others write and that may hang), and how long it may take before the
#: request is answered without it.
OTHER_THREADS = 2
OTHER_DEADLINE_S = 20.0
#: What may be in flight at once, by kind of work.
CAPS = {"pattern": 2, "stream": 32}

_processes: ProcessPoolExecutor | None = None


def _call(
    path: Path,
    deadline: tuple[float, str],
    reader: Callable[..., T],
    args: tuple[Any, ...],
) -> T:
    """``reader(store, *args)`` under the deadline (seconds, and what to
    advise past them), in a pool thread or process,
    on a read-only connection of its own (0.5 ms to open). Not one kept per
    thread: when the last writer closes, SQLite deletes the WAL and its index,
    and a connection kept open meanwhile reads the old index for ever (seen: a
    stream received nothing once the recorder had closed and opened again)."""
    with (
        BaseStore(path, create=False, readonly=True) as store,
        store.deadline(*deadline),
    ):
        return reader(store, *args)


def _process_pool() -> ProcessPoolExecutor:
    global _processes
    if _processes is None:
        # spawn: forking a server that runs threads copies their locks.
        context = multiprocessing.get_context("spawn")
        _processes = ProcessPoolExecutor(PROCESSES, mp_context=context)
    return _processes


@dataclass
class _Shared:
    """A read in flight, and how many callers wait for it."""

    task: asyncio.Future[Any]
    waiting: int = 0


class TooBusy(Exception):
    """A user has as much of some work running as the server allows."""


class StoreManager:
    """Reads of the store at ``path`` for every handler of the extension."""

    def __init__(
        self, path: Path, threads: int = THREADS, deadline_s: float = DEADLINE_S
    ) -> None:
        self.path = path
        self.deadline_s = deadline_s
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="dask-observe")
        self._other = ThreadPoolExecutor(
            OTHER_THREADS, thread_name_prefix="dask-observe-archive"
        )
        self._busy: dict[str, int] = {}
        #: What wakes the stream's subscriptions when the store changed.
        self.watch = StoreWatch(path)
        #: Reads in flight by what they read: one read serves every caller
        #: that asks for the same at the same time (see :meth:`read_shared`).
        self._shared: dict[Hashable, _Shared] = {}

    async def read(
        self,
        reader: Callable[..., T],
        *args: Any,
        isolated: bool = False,
        page: bool = False,
    ) -> T:
        """``reader(store, *args)`` under the deadline (``page``: a page's,
        PAGE_DEADLINE_S): on the manager's threads, or, ``isolated``, in a
        process of its own (a module-level ``reader``)."""
        global _processes
        loop = asyncio.get_running_loop()
        path = self.path
        deadline = (
            (PAGE_DEADLINE_S, PAGE_ADVICE) if page else (self.deadline_s, NARROW_IT)
        )
        if not isolated:
            return await loop.run_in_executor(
                self._pool, _call, path, deadline, reader, args
            )
        try:
            return await loop.run_in_executor(
                _process_pool(), _call, path, deadline, reader, args
            )
        except BrokenProcessPool:  # a reader died (killed, out of memory)
            _processes = None
            raise StoreError("the process reading the store died; try again") from None

    async def read_shared(
        self,
        key: Hashable,
        reader: Callable[..., T],
        *args: Any,
        isolated: bool = False,
    ) -> T:
        """``read(reader, *args)``, made once for every caller asking with
        the same ``key`` (what the result depends on) while it is in flight:
        twenty panels following one cluster wake at the same commit and ask
        for the same rows after the same cursor."""
        entry = self._shared.get(key)
        if entry is None:
            task = asyncio.ensure_future(self.read(reader, *args, isolated=isolated))
            entry = self._shared[key] = _Shared(task)
            task.add_done_callback(lambda _: self._forget(key, task))
        entry.waiting += 1
        try:
            # shield: one caller cancelled (its socket closed) must not cancel
            # the read the others wait for...
            return await asyncio.shield(entry.task)
        finally:
            entry.waiting -= 1
            # ... but the last one does (a read left pending as the server
            # stops would be "destroyed but pending").
            if not entry.waiting and not entry.task.done():
                entry.task.cancel()
                self._forget(key, entry.task)  # no later caller gets it

    def _forget(self, key: Hashable, task: asyncio.Future[Any]) -> None:
        entry = self._shared.get(key)
        if entry is not None and entry.task is task:
            del self._shared[key]

    async def call(
        self, function: Callable[..., T], *args: Any, isolated: bool = False
    ) -> T:
        """``function(*args)`` for work that is not the store's (the team's
        archive), within ``OTHER_DEADLINE_S``: on threads of its own (a
        storage that hangs cannot take the store's), or, ``isolated``, the
        manager's processes. TimeoutError past the deadline (a thread goes
        on until its read returns: at most ``OTHER_THREADS`` at once)."""
        global _processes
        loop = asyncio.get_running_loop()
        if not isolated:
            work = loop.run_in_executor(self._other, function, *args)
            return await asyncio.wait_for(work, OTHER_DEADLINE_S)
        try:
            return await asyncio.wait_for(
                loop.run_in_executor(_process_pool(), function, *args),
                OTHER_DEADLINE_S,
            )
        except BrokenProcessPool:
            _processes = None
            raise StoreError(
                "the process reading the archive died; try again"
            ) from None

    # Slots are taken and given back on the event loop only: no lock.
    def acquire(self, kind: str) -> None:
        """Take one of the CAPS[kind] slots, or raise TooBusy."""
        if self._busy.get(kind, 0) >= CAPS[kind]:
            raise TooBusy(
                f"at most {CAPS[kind]} {kind} requests run at once; "
                "wait for one to finish"
            )
        self._busy[kind] = self._busy.get(kind, 0) + 1

    def release(self, kind: str) -> None:
        self._busy[kind] -= 1

    def busy(self, kind: str) -> int:
        """How many of the CAPS[kind] slots are taken now."""
        return self._busy.get(kind, 0)

    @contextmanager
    def slot(self, kind: str) -> Iterator[None]:
        """Hold one of the CAPS[kind] slots for the block."""
        self.acquire(kind)
        try:
            yield
        finally:
            self.release(kind)

    def close(self) -> None:
        """Stop the threads (at the server's shutdown) without waiting for a
        read in progress; the reading processes end with the server."""
        self.watch.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._other.shutdown(wait=False, cancel_futures=True)

"""Knowing that the store changed without reading it: what wakes the stream.

A writer is another process (the recorder in a kernel), so nothing can call
the server when it commits. What every commit does change is the store's
files: in WAL mode a commit appends to ``<store>-wal`` (its size and mtime), a
checkpoint writes the store itself. One :class:`StoreWatch` per store looks
at both every WATCH_INTERVAL_S, while someone waits, and wakes every waiter
at once: a subscription reads when there is something to read, within some
20 ms of the commit, instead of each polling the store five times a second.

Waiters also wake after their own timeout: a filesystem whose mtimes are
coarse, and a WAL rewritten from its start to the same size within one tick,
could hide a commit; the timeout bounds how late that is seen.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

#: Seconds between two looks at the store's files while someone waits.
WATCH_INTERVAL_S = 0.02
#: The least time between two wake-ups: everyone wakes at once, at most so
#: many times a second however often the writer commits, and reads the same
#: rows from the same cursor (one shared read, ``StoreManager.read_shared``).
WAKE_SPACING_S = 0.05

_Signature = tuple[tuple[int, int] | None, ...]


class StoreWatch:
    """Counts the changes seen to the store at ``path``; :meth:`wait` returns
    once the count passed what its caller saw (or its timeout passed)."""

    def __init__(self, path: Path) -> None:
        self._files = (path, path.with_name(path.name + "-wal"))
        #: Changes seen so far: a caller notes it before a read, and waits
        #: for a newer one after (so a commit during the read is not missed).
        self.version = 0
        self._signature = self._look()
        self._waiters: set[asyncio.Future[None]] = set()
        self._task: asyncio.Task[None] | None = None

    def _look(self) -> _Signature:
        seen: list[tuple[int, int] | None] = []
        for file in self._files:
            try:
                stat = os.stat(file)
            except OSError:  # no WAL (yet, or any more)
                seen.append(None)
            else:
                seen.append((stat.st_mtime_ns, stat.st_size))
        return tuple(seen)

    async def wait(self, seen: int, timeout: float) -> None:
        """Until the store changed after ``seen`` (a :attr:`version`), or
        ``timeout`` seconds passed."""
        if self.version != seen:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        if self._task is None:
            self._task = asyncio.ensure_future(self._watch())
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            pass
        finally:
            self._waiters.discard(waiter)
            # The last one gone (its socket closed): stop now, not at the next
            # tick, which a server shutting down would never run (its loop
            # closed on a pending task: "Task was destroyed but it is pending").
            if not self._waiters and self._task is not None:
                self._task.cancel()

    async def _watch(self) -> None:
        """Look while anyone waits; then stop (a server at rest does nothing)."""
        loop = asyncio.get_running_loop()
        try:
            while self._waiters:
                signature = self._look()
                if signature != self._signature:
                    self._signature = signature
                    self.version += 1
                    woke = loop.time()
                    for waiter in self._waiters:
                        if not waiter.done():
                            waiter.set_result(None)
                    await asyncio.sleep(max(0.0, woke + WAKE_SPACING_S - loop.time()))
                    continue
                await asyncio.sleep(WATCH_INTERVAL_S)
        finally:
            self._task = None

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

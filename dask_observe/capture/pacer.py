"""One periodic callback per event loop for the capture plugins that share it.

A process with many workers (``processes=False``) or nannies (a LocalCluster
keeps every nanny in the client's process) ran a ticker and a shipper of its
own per plugin, each every 100 ms: 200 in-process workers made 4,000 callbacks
a second on one event loop, each taking the GIL from the task threads, to
measure the one process's memory 2,000 times a second. Plugins of one loop and
interval now take their turn in one callback, which reads the time (and the
process's memory, ``process_rss``) once for all of them.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from typing import ClassVar

from tornado.ioloop import IOLoop, PeriodicCallback

logger = logging.getLogger(__name__)

Member = Callable[[float], None]


class Pacer:
    """The members of one event loop that want calling every ``interval_ms``,
    called in turn with the same wall-clock time. A member must not block:
    one that has I/O to do starts a task for it."""

    _pacers: ClassVar[weakref.WeakKeyDictionary[IOLoop, dict[float, Pacer]]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, loop: IOLoop, interval_ms: float) -> None:
        self.loop = loop
        self.interval_ms = interval_ms
        self.members: list[Member] = []
        #: Members whose failure was logged (once each: this runs 10 times a second).
        self._failed: set[int] = set()
        self._callback = PeriodicCallback(self._tick, interval_ms)

    @classmethod
    def join(cls, interval_ms: float, member: Member) -> Callable[[], None]:
        """Call ``member(now)`` every ``interval_ms`` on the current event loop
        (a plugin's setup runs on it); returns the function that stops that."""
        loop = IOLoop.current()
        pacers = cls._pacers.setdefault(loop, {})
        pacer = pacers.get(interval_ms)
        if pacer is None:
            pacer = pacers[interval_ms] = cls(loop, interval_ms)
        pacer.members.append(member)
        if len(pacer.members) == 1:
            pacer._callback.start()

        def leave() -> None:
            pacer._leave(member)

        return leave

    def _leave(self, member: Member) -> None:
        if member in self.members:
            self.members.remove(member)
        if not self.members:
            self._callback.stop()
            pacers = self._pacers.get(self.loop, {})
            if pacers.get(self.interval_ms) is self:
                del pacers[self.interval_ms]

    def _tick(self) -> None:
        now = time.time()
        for member in list(self.members):
            try:
                member(now)
            except Exception:  # one plugin's trouble is not the others'
                if id(member) not in self._failed:
                    self._failed.add(id(member))
                    logger.exception("dask-observe: a periodic capture call failed")


class _ProcessMemory:
    def __init__(self) -> None:
        import psutil

        self.process = psutil.Process()
        self.read_at = -1.0
        self.rss = 0

    def __call__(self, now: float) -> int:
        if now != self.read_at:
            self.rss, self.read_at = self.process.memory_info().rss, now
        return self.rss


_memory: _ProcessMemory | None = None


def process_rss(now: float) -> int:
    """This process's resident memory, read once for every member of a tick
    (``now``: the tick's time): the workers of one process share it."""
    global _memory
    if _memory is None:
        _memory = _ProcessMemory()
    return _memory(now)

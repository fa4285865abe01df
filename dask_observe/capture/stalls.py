"""Stalls of a process's event loop, seen from a light ticker on it."""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

#: A tick this much later than due is an event-loop stall worth an event:
#: below the flag's threshold (1 s by default), so that a lower one finds them.
STALL_S = 0.5
#: Top-level packages of the modules imported during a stall named at most.
NAMED_PACKAGES = 5


class FullCollections:
    """The seconds this process has spent in full (generation 2) garbage
    collections, finalizers included: a full collection walks every object
    the process holds with the GIL held, so every thread waits for it, the
    event loop's too. One ``gc`` callback per process, installed by the first
    watch and never removed: it returns at once for the young generations,
    collected hundreds of times a second (as distributed's own GC diagnosis
    does). A collection runs with the GIL held and is not re-entered, so a
    start and its stop are never interleaved with another's."""

    total = 0.0
    _started = 0.0
    _installed = False

    @classmethod
    def install(cls) -> None:
        if not cls._installed:
            cls._installed = True
            gc.callbacks.append(cls._on_collection)

    @classmethod
    def _on_collection(cls, phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            cls._started = time.perf_counter()
        else:
            cls.total += time.perf_counter() - cls._started


class StallWatch:
    """Stalls of the event loop it ticks on: a tick that comes ``STALL_S`` or
    more after it was due means the loop (or the GIL) was held meanwhile.
    distributed's own measure is an average over each heartbeat (four 2 s stalls
    read 0.07 s) and its warning starts at 3 s; this sees a single 1 s stall."""

    def __init__(
        self, interval_s: float, spilling: Callable[[], float] | None = None
    ) -> None:
        self.interval_s = interval_s
        self.last = time.monotonic()
        self.cpu = time.process_time()
        # The CPU time of the loop's own thread at the last tick. A watch is
        # made on its loop (a plugin's setup), and ticks there: a stall right
        # after it (a run's first task) has a reading too.
        self._thread = threading.get_ident()
        self.loop_cpu = time.thread_time()
        self.modules = len(sys.modules)
        self._spilling = spilling
        self.spilled = spilling() if spilling else 0.0
        FullCollections.install()
        self.collected = FullCollections.total

    def tick(self, now: float) -> dict[str, Any] | None:
        """``{"seconds", "since", "cpu"}`` of the stall that ended now, or None.
        ``cpu``: the seconds of CPU the process had meanwhile (all its threads).
        A loop held by the process's own work (a task holding the GIL) had
        about as much CPU as the stall lasted; one held by a host too busy to
        run the process, far less. ``imported`` and ``packages``: the modules
        imported meanwhile and their top-level packages, where any were (a
        worker unpickles a task on its event loop, importing the module of its
        function on first use: a heavy one stalls the loop). ``spilled``: the
        seconds the worker spent meanwhile moving data to or from disk
        (``spilling``'s running total), where it spent any: a worker writes a
        result that does not fit under its target, and its memory monitor
        evicts, on its event loop. ``gc``: the seconds of full garbage
        collections meanwhile, where there were any (a collection walks all
        the process's objects, a threads-only cluster's client's among them,
        with the GIL held). ``loop_cpu``: the seconds of CPU the loop's own
        thread had meanwhile: about the stall's length where the loop itself
        worked (importing, say), next to nothing where it waited for another
        thread's GIL or for a core."""
        mono, cpu = time.monotonic(), time.process_time()
        # Another thread's CPU time says nothing of the loop's.
        same = threading.get_ident() == self._thread
        loop_cpu, last_loop_cpu = time.thread_time(), self.loop_cpu
        self._thread, self.loop_cpu = threading.get_ident(), loop_cpu
        spilled = self._spilling() if self._spilling else 0.0
        # A count a tick (O(1)); the names only for a stall: sys.modules keeps
        # insertion order, so the newest imports are its last entries.
        modules = len(sys.modules)
        late = mono - self.last - self.interval_s
        used = cpu - self.cpu
        added = modules - self.modules
        moved = spilled - self.spilled
        collected = FullCollections.total - self.collected
        self.last, self.cpu, self.modules = mono, cpu, modules
        self.spilled, self.collected = spilled, FullCollections.total
        if late < STALL_S:
            return None
        stall: dict[str, Any] = {
            "seconds": round(late, 3),
            "since": now - late,
            "cpu": round(used, 3),
        }
        if same:
            stall["loop_cpu"] = round(loop_cpu - last_loop_cpu, 3)
        if added > 0:
            try:
                names = list(sys.modules)[-added:]
            except RuntimeError:  # another thread importing as we read
                names = []
            packages = list(dict.fromkeys(n.split(".", 1)[0] for n in names))
            stall.update(imported=added, packages=packages[:NAMED_PACKAGES])
        if moved > 0:
            stall["spilled"] = round(moved, 3)
        if collected > 0:
            stall["gc"] = round(collected, 3)
        return stall


def spill_seconds(data: object) -> Callable[[], float] | None:
    """The seconds a worker's storage has spent so far on spilling and
    unspilling (serialising, compressing, writing, and back), from the running
    totals distributed's SpillBuffer keeps; None for storage without them (a
    plain dict, a GPU's)."""
    totals = getattr(data, "cumulative_metrics", None)
    if not isinstance(totals, dict):
        return None

    def seconds() -> float:
        # A handful of (activity, unit) keys; copied first, as the worker's
        # threads may add one while we sum.
        return sum(
            float(v)
            for k, v in list(totals.items())
            if isinstance(k, tuple) and k[-1] == "seconds"
        )

    return seconds

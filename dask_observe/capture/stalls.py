"""Stalls of a process's event loop, seen from a light ticker on it, and
what held it, seen from a watchdog thread beside it while it was held."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .stacks import is_library, shipped, thread_frames, where

#: A tick this much later than due is an event-loop stall worth an event:
#: below the flag's threshold (1 s by default), so that a lower one finds them.
STALL_S = 0.5
#: Top-level packages of the modules imported during a stall named at most.
NAMED_PACKAGES = 5
#: How often the watchdog wakes to look at its loop and at its own lateness.
WATCH_S = 0.2
#: How long a stall's end waits for a look of the watchdog under way: it
#: began while the loop was held, and is the stall's best witness (its
#: thread's native frames are read after it). Looks take milliseconds.
LOOK_WAIT_S = 0.5
#: The innermost frames of a stack kept for a stall.
HELD_FRAMES = 12
#: A task thread that ran this share of its process's CPU during a stall,
#: and at least this many seconds of it, held the GIL through it.
HELD_SHARE = 0.5
HELD_CPU_S = 0.1


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


class RunQueueWait:
    """The seconds one thread has spent runnable but waiting for a core
    (the kernel's ``run_delay``, /proc/<pid>/task/<tid>/schedstat), read
    through a file kept open on the thread that made it: a read is a pread
    (about a microsecond), every tick of its loop. None where the kernel
    does not say (not Linux, or scheduler statistics compiled out)."""

    _PATH = "/proc/thread-self/schedstat"

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.open(self._PATH, os.O_RDONLY)
        except OSError:
            self._fd = None

    def seconds(self) -> float | None:
        if self._fd is None:
            return None
        try:
            return int(os.pread(self._fd, 64, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return None

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)


class StallWatch:
    """Stalls of the event loop it ticks on: a tick that comes ``STALL_S`` or
    more after it was due means the loop (or the GIL) was held meanwhile.
    distributed's own measure is an average over each heartbeat (four 2 s stalls
    read 0.07 s) and its warning starts at 3 s; this sees a single 1 s stall."""

    def __init__(
        self,
        interval_s: float,
        spilling: Callable[[], float] | None = None,
        tasks: Callable[[], Mapping[int, Any]] | None = None,
        held_by_task: Callable[[int, str], None] | None = None,
    ) -> None:
        self.interval_s = interval_s
        #: Told (thread ident, task key) where the watchdog sees a task's
        #: thread hold the loop, as it does (native frames read then).
        self.held_by_task = held_by_task
        self.last = time.monotonic()
        self.cpu = time.process_time()
        # The CPU time of the loop's own thread at the last tick. A watch is
        # made on its loop (a plugin's setup), and ticks there: a stall right
        # after it (a run's first task) has a reading too.
        self._thread = threading.get_ident()
        self.loop_cpu = time.thread_time()
        self._queue = RunQueueWait()
        self._queue_thread = self._thread
        self.loop_queued = self._queue.seconds()
        self.modules = len(sys.modules)
        self._spilling = spilling
        self.spilled = spilling() if spilling else 0.0
        FullCollections.install()
        self.collected = FullCollections.total
        #: Which thread runs which task (a worker's ``active_threads``).
        self.tasks = tasks
        self.watchdog = LoopWatchdog(self)
        # From after the watchdog's first look: a stall that begins before the
        # first tick (a fresh worker's first task) is measured from that look.
        self.last = time.monotonic()

    def stop(self) -> None:
        """Stop the watchdog (the capture leaves the process)."""
        self.watchdog.stop()
        self._queue.close()

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
        thread's GIL or for a core. ``loop_queued``: the seconds the loop's
        thread meanwhile was ready to run but waited for a core, as the
        kernel counts them: most of the stall where a host too busy to run
        it held it up, next to nothing where it waited for a lock, the GIL
        or a blocking call, however busy the host was."""
        mono, cpu = time.monotonic(), time.process_time()
        # Another thread's CPU time says nothing of the loop's.
        same = threading.get_ident() == self._thread
        loop_cpu, last_loop_cpu = time.thread_time(), self.loop_cpu
        self._thread, self.loop_cpu = threading.get_ident(), loop_cpu
        # The file is the thread's that made the watch (its loop's), read
        # wherever the tick runs: counted only for ticks on that thread.
        queued, last_queued = self._queue.seconds(), self.loop_queued
        self.loop_queued = queued
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
            measured = self._thread == self._queue_thread
            if measured and queued is not None and last_queued is not None:
                stall["loop_queued"] = round(queued - last_queued, 3)
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
        held = self.watchdog.held(now - late - WATCH_S)
        if held is None:
            # The loop may have had the GIL back before the watchdog looked:
            # the thread that held it is told from here, against the
            # watchdog's last look before the stall.
            try:
                held = self.watchdog.holder_since(mono - late - self.interval_s, used)
            except Exception:  # a thread ended as we read it: the stall stands
                held = None
        if held is not None:
            stall["held"] = held
        return stall


class LoopWatchdog:
    """A thread beside an event loop that looks at it while it is held: the
    ticker knows of a stall only once it ended, when what held the loop has
    moved on.

    It wakes every ``WATCH_S``. Where the loop's tick is overdue by
    ``STALL_S`` or more, or its own wake came that late (another thread held
    the GIL: no Python thread ran meanwhile, this one neither), it tells what
    held it: the thread that ran most of the process's CPU since the look
    before (per-thread CPU clocks; a task holding the GIL in a regular
    expression or a C extension), with its task and where it is now if it
    still runs one, else where it was at the look before (a task can finish
    before this thread has the GIL back), else its thread alone; with no such
    thread, the loop's own thread where it stood still since the look before
    (its own work, or a call that blocked it). While the loop ticks on time
    a wake reads every thread's CPU clock and where the loop and each running
    task are (code objects' names, no source read): tens of microseconds
    (benchmarks/watchdog.py)."""

    def __init__(self, watch: StallWatch) -> None:
        # Weakly: a capture dropped without stop() (a worker closed in a way
        # that skipped its teardown) must not be kept alive, with its worker,
        # by a thread that watches nothing; that thread then ends.
        self._watch = weakref.ref(watch)
        self._loop = threading.get_ident()  # made on its loop, as its watch
        #: (when, what held the loop) of the recent samples.
        self._samples: deque[tuple[float, dict[str, Any]]] = deque(maxlen=8)
        #: At the last look: each task thread's task and stack (file, line,
        #: function; outermost first), and every thread's CPU seconds (a
        #: task may start, and hold the GIL, between two looks).
        self._before: dict[int, tuple[Any, list[tuple[str, int, str]]]] = {}
        self._cpu: dict[int, float] = {}
        #: (when, monotonic; every thread's CPU seconds) of the recent looks.
        self._readings: deque[tuple[float, dict[int, float]]] = deque(maxlen=16)
        #: Where the loop's thread was at the last look.
        self._loop_where: list[tuple[str, int, str]] | None = None
        #: Held from a wake's judging whether the loop is held to its sample
        #: kept: a stall that ends meanwhile waits for it (``held``).
        self._looking = threading.Lock()
        self._stopped = threading.Event()
        # The first look, here: what the next ones measure CPU from. A fresh
        # worker's first task may start, and hold the GIL, before the thread
        # below has looked once (a stall that then said nothing of it).
        self._look(starved=False, stalled=False, walk=False)
        self._thread = threading.Thread(
            target=self._run, name="dask-observe-loop-watchdog", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def holder_since(self, began: float, used: float) -> dict[str, Any] | None:
        """The thread (not the loop's, not this one) that ran most of the
        process's CPU (``used`` seconds) since ``began`` (monotonic: a stall's
        start), measured from the last look before it; its task and where it
        is if it runs one now (else its thread: a run's task rows tell which
        task ran there). On the loop's thread, as a stall's tick finds it."""
        # A copy: this thread appends to it meanwhile.
        readings = list(self._readings)
        base = next((c for t, c in reversed(readings) if t <= began), None)
        if base is None:
            return None
        with thread_frames() as frames:
            cpu = threads_cpu(
                i for i in frames if i not in (self._loop, self._thread.ident)
            )
            ran = {i: seconds - base.get(i, 0.0) for i, seconds in cpu.items()}
            busiest = max(ran, key=ran.__getitem__, default=None)
            if busiest is None or ran[busiest] < max(HELD_SHARE * used, HELD_CPU_S):
                return None
            watch = self._watch()
            tasks = dict(watch.tasks()) if watch is not None and watch.tasks else {}
            key = tasks.get(busiest)
            stack = where(frames[busiest], HELD_FRAMES) if key is not None else []
        return {
            "thread": "task",
            "ident": busiest,
            "key": None if key is None else str(key),
            "cpu": round(ran[busiest], 3),
            # On the loop's thread: lines already read, no file read here.
            "frames": shipped(stack),
        }

    def held(self, since: float) -> dict[str, Any] | None:
        """What held the loop in the newest sample taken since ``since``
        (epoch seconds), or None; after the look under way, if one is. (Read
        while that look was kept, it was missed: the stall told what held it
        from its tick instead, while the look read its native frames.)"""
        if self._looking.acquire(timeout=LOOK_WAIT_S):
            self._looking.release()
        found = [sample for when, sample in list(self._samples) if when >= since]
        return found[-1] if found else None

    def _run(self) -> None:
        # Where the libraries live, read here (sysconfig: 1-2 ms to import),
        # not on the loop's thread in the middle of a stall. Not counted as
        # the loop's imports: a fresh worker's first task holding the GIL
        # made this thread import them as the stall ended, and the stall was
        # told as "while it imported modules (_sysconfigdata...)".
        before = len(sys.modules)
        is_library("")
        watch = self._watch()
        if watch is not None:
            watch.modules += len(sys.modules) - before
        del watch
        while True:
            began = time.monotonic()
            if self._stopped.wait(WATCH_S):
                return
            with self._looking:
                now = time.monotonic()
                watch = self._watch()
                if watch is None:
                    return
                starved = now - began - WATCH_S >= STALL_S
                overdue = now - watch.last - watch.interval_s
                del watch
                try:
                    sample = self._look(
                        starved, overdue >= STALL_S or starved, overdue >= WATCH_S
                    )
                except Exception:  # a thread ended as we read it: no sample
                    continue
                if sample is not None:
                    self._samples.append((time.time(), sample))
            if sample is not None:
                self._tell(sample)

    def _tell(self, sample: dict[str, Any]) -> None:
        """Tell the watch's ``held_by_task`` of a task that holds the loop,
        from this thread, now: it holds the GIL only until the task takes
        it back."""
        watch = self._watch()
        told = watch.held_by_task if watch is not None else None
        if told is not None and sample.get("thread") == "task" and sample.get("key"):
            # Extra evidence: never the watchdog's end.
            with contextlib.suppress(Exception):
                told(int(sample["ident"]), str(sample["key"]))

    def _look(
        self, starved: bool, stalled: bool = True, walk: bool = True
    ) -> dict[str, Any] | None:
        """Read the threads' CPU and, with ``walk``, where the loop's and the
        task threads' stacks are (kept for the next look); while ``stalled``,
        what held the loop.

        The stacks are walked only where the loop is held (its tick a look's
        period overdue, or this thread starved), not at every look: walking
        another thread's frames (``f_back``) while that thread runs on can
        crash CPython 3.11 (python/cpython#111363; the same crash as
        sentry-python's sampler, getsentry/sentry-python#2386), and a free
        loop runs on through every walk of its coroutines' frames. Seen once
        in this suite: a segmentation fault in ``where`` reading the loop's
        frames on 3.11.7. A held loop is not running its frames; a stall of
        0.5 s is still walked twice before it counts (at 0.2 s and 0.4 s
        overdue), as the comparison of two looks needs."""
        watch = self._watch()
        found = watch.tasks if watch is not None and walk else None
        tasks = dict(found()) if found is not None else {}
        # The threads' frames are let go at once, before anything else: a
        # frame held here keeps its locals alive, and a task that returned
        # meanwhile kept its memory (a worker then spilled its result).
        with thread_frames() as frames:
            now = {
                ident: (key, where(frames[ident], HELD_FRAMES))
                for ident, key in tasks.items()
                if ident in frames
            }
            here = frames.get(self._loop)
            ended = here is None
            loop = where(here, HELD_FRAMES) if walk and here is not None else None
            del here
            idents = list(frames)
        if ended:  # its loop's thread ended
            self.stop()
            return None
        cpu = threads_cpu(idents)
        self._readings.append((time.monotonic(), cpu))
        before, earlier, stuck = self._before, self._cpu, self._loop_where
        self._before, self._cpu, self._loop_where = now, cpu, loop
        if not stalled or not earlier:
            # (The first look has no CPU to measure from: a thread's whole
            # CPU would count, the loop's since the process began.)
            return None
        # The CPU each thread ran since the last look (a thread started since,
        # all of its own: a fresh worker's first task runs on an executor
        # thread made for it), and the thread that ran the most (not the
        # loop's, not this one).
        ran = {i: cpu[i] - earlier.get(i, 0.0) for i in cpu}
        others = [i for i in ran if i not in (self._loop, self._thread.ident)]
        busiest = max(others, key=ran.__getitem__, default=None)
        most = ran[busiest] if busiest is not None else 0.0
        total = sum(ran.values())
        # Enough CPU to have held a stall, however busy the host: a look just
        # after another one (the loop's tick after this thread's) judges a
        # few milliseconds, in which any thread may have run the most.
        if busiest is not None and most >= max(HELD_SHARE * total, HELD_CPU_S):
            # It ran most of the process's CPU meanwhile: it held the GIL (all
            # of it, or in turns with the loop's thread). Its share, not its
            # seconds: a busy host gives the process less CPU than the stall
            # lasted, whoever held the GIL. Its task and where it is (or was
            # at the last look); a task that began and ended between two looks
            # is known by its thread (the run's task rows say which).
            key, stack = now.get(busiest) or before.get(busiest) or (None, [])
            return {
                "thread": "task",
                "ident": busiest,
                "key": None if key is None else str(key),
                "cpu": round(most, 3),
                # Seen while the stall lasted (its native frames read then).
                "during": True,
                # This thread's, not the loop's: the lines are read now.
                "frames": shipped(stack, read=True),
            }
        if starved or loop is None or loop != stuck:
            # Held elsewhere by no task it can tell; or the loop's thread
            # moved since the last look (it had the GIL back, and runs its
            # callbacks): not where it is now.
            return None
        return {"thread": "loop", "frames": shipped(loop, read=True)}


#: A thread's CPU clock as Linux numbers it from the thread's id
#: (CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED), as glibc's own
#: pthread_getcpuclockid makes it.
_THREAD_CLOCK = 6


def threads_cpu(idents: Iterable[int]) -> dict[int, float]:
    """Each thread's CPU seconds, by its ``threading`` ident; 0 where it
    cannot be read (a thread that ended, or not Linux).

    Read through the kernel's thread id (``native_id``), never through the
    pthread handle the ident is: that handle points into the thread's own
    stack, and a thread may end between the frames that named it and this
    read; glibc then may have unmapped that stack, and
    ``pthread_getcpuclockid`` reads it and kills the process (a worker's
    executor threads end as it closes; seen as a segfault of a test process
    in this watchdog). A thread id that ended is an error from the kernel;
    it is not taken by a new thread within a look (Linux hands ids out in
    turn)."""
    native = {t.ident: t.native_id for t in threading.enumerate()}
    return {ident: _tid_cpu(native.get(ident)) for ident in idents}


def _tid_cpu(tid: int | None) -> float:
    if tid is None or not sys.platform.startswith("linux"):
        return 0.0
    try:
        return time.clock_gettime(((~tid) << 3) | _THREAD_CLOCK)
    except (OSError, OverflowError):
        return 0.0


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

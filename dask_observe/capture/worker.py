"""The worker side of capture: its log records, shipped as they are written."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import WorkerPlugin

from .clock import CLOCK_HANDLER, reads_same_clock
from .hostload import INTERVAL_S, TAIL_S, workers_host_pressure
from .nativeprofile import NativeProfiles
from .output import PARTIAL_AFTER_S
from .pacer import Pacer, process_rss
from .pyspy import NativeStacks
from .router import LogRouter
from .settings import CaptureSettings
from .shipper import CLOCK_S, LogShipper
from .stacks import StackSampler
from .stalls import StallWatch, spill_seconds
from .wire import (
    FLUSH_HANDLER,
    RUNNING_HANDLER,
    STACKS_HANDLER,
    MemorySample,
    PushedEvent,
)

if TYPE_CHECKING:
    from distributed import Worker

logger = logging.getLogger(__name__)


def _fine_pending(worker: Worker) -> bool:
    """Whether the worker holds fine performance metrics its next heartbeat
    would bring: digests named by a tuple (a task's execution phases,
    transfers, data served, spilling). Its scalar digests (tick duration,
    latency) grow every tick, and no run reads them."""
    pending = getattr(worker, "digests_total_since_heartbeat", None)
    if pending is None:  # another distributed: heartbeat, as before
        return True
    # list(): one step under the GIL, as a task thread may add to it.
    return any(isinstance(name, tuple) for name in list(pending))


#: Longest a run's end waits for a heartbeat in flight to be answered.
HEARTBEAT_WAIT_S = 10.0


class ClockOffset:
    """How far the worker's clock is behind the scheduler's: distributed's
    estimate (``scheduler_delay``, renewed by each heartbeat) is off by up
    to half its heartbeat's round trip, and one that spanned a stalled or
    stopped process read seconds (its lines then fell outside their run).
    Kept here: the estimate of the quickest of the last OBSERVED heartbeats
    (as NTP keeps its least-delayed sample), distributed's own before any;
    none once the scheduler said it reads the worker's clock (``same``: see
    ``capture.clock``)."""

    OBSERVED = 8

    def __init__(self, current: Callable[[], float]) -> None:
        self._current = current
        #: (round trip, estimate) of the last heartbeats.
        self._seen: list[tuple[float, float]] = []
        #: Whether the scheduler reads this process's clock; None until it said.
        self.same: bool | None = None

    def observe(self, round_trip: float, estimate: float) -> None:
        self._seen = [*self._seen[1 - self.OBSERVED :], (round_trip, estimate)]

    def __call__(self) -> float:
        if self.same:
            return 0.0
        if not self._seen:
            return float(self._current())
        return min(self._seen)[1]


class Heartbeats:
    """The worker's heartbeats in flight. A heartbeat takes the worker's fine
    performance metrics as it starts; until the scheduler answers, they are
    neither pending on the worker nor in the scheduler's spans. A run's end
    that flushed then read its span without them (a run of 40 tasks on two
    workers read half its waiting time). ``worker.heartbeat``, and the
    periodic callback that calls it, go through here."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker
        self._flying: set[asyncio.Future[None]] = set()
        #: The worker's clock against the scheduler's, as the heartbeats
        #: measure it.
        self.clock = ClockOffset(lambda: worker.scheduler_delay)
        self._measuring: asyncio.Task[None] | None = None
        self._original = worker.heartbeat
        worker.heartbeat = self._tracked  # type: ignore[method-assign]
        periodic = getattr(worker, "periodic_callbacks", {}).get("heartbeat")
        if periodic is not None and periodic.callback == self._original:
            periodic.callback = self._tracked

    async def _tracked(self) -> None:
        landed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._flying.add(landed)
        started = time.monotonic()
        try:
            await self._original()
            self.clock.observe(time.monotonic() - started, self._worker.scheduler_delay)
            if self.clock.same:
                # distributed moves its tasks' and transfers' times by this
                # estimate: on the scheduler's own clock, by nothing.
                self._worker.scheduler_delay = 0.0
        finally:
            self._flying.discard(landed)
            landed.set_result(None)

    def measure(self) -> None:
        """Ask the scheduler which clock it reads, and a heartbeat now (on
        the worker's loop), measuring the clock."""
        if getattr(self._worker, "status", None) is None:
            return
        with contextlib.suppress(RuntimeError):  # no loop running here
            task = asyncio.get_running_loop().create_task(self._quietly())
            self._measuring = task  # (a task only weakly held may vanish)

    async def _quietly(self) -> None:
        try:
            asked = time.time()
            theirs = await getattr(self._worker.scheduler, CLOCK_HANDLER)()
            self.clock.same = reads_same_clock(asked, theirs, time.time())
        except Exception as e:  # a capture that cannot say: estimated
            logger.debug("dask-observe: the scheduler's clock is unknown: %s", e)
        try:
            await self._tracked()
        except Exception as e:  # the periodic ones measure it next
            logger.debug("dask-observe: a heartbeat failed: %s", e)

    async def landed(self) -> None:
        """Once the heartbeats in flight now were answered (or after
        ``HEARTBEAT_WAIT_S``: a scheduler that does not answer)."""
        if self._flying:
            await asyncio.wait(list(self._flying), timeout=HEARTBEAT_WAIT_S)

    def restore(self) -> None:
        """The worker's own heartbeat again (the plugin leaves)."""
        if self._worker.heartbeat == self._tracked:
            del self._worker.heartbeat
        periodic = getattr(self._worker, "periodic_callbacks", {}).get("heartbeat")
        if periodic is not None and periodic.callback == self._tracked:
            periodic.callback = self._original


#: How long a task runs before the worker says which it is and since when.
LONG_TASK_S = 1.0


class LongTasks:
    """The tasks executing on the worker and since when (from the transition
    hook). One running a second or more is told once ("task-running", with its
    start): if it kills its worker, the store knows what ran and since when,
    which the scheduler never learns."""

    def __init__(self) -> None:
        self.running: dict[str, float] = {}
        self.reported: set[str] = set()

    def started(self, key: str) -> None:
        self.running[key] = time.time()

    def ended(self, key: str) -> None:
        self.running.pop(key, None)
        self.reported.discard(key)

    def report(self, now: float, worker: str, shipper: LogShipper) -> None:
        for key, since in list(self.running.items()):
            if now - since >= LONG_TASK_S and key not in self.reported:
                self.reported.add(key)
                data = {"key": key, "since": since}
                shipper.events.append(PushedEvent(now, "task-running", worker, data))


#: Seconds of incoming transfers summed into one "transfer" event per peer and type.
TRANSFER_BUCKET_S = 1.0


class Transfers:
    """What the worker fetched from its peers, from its own ``transfer_incoming_log``
    (the log performance_report's bandwidth panels read), summed per second by
    sending worker and type of data: one "transfer" event per (peer, type) a
    second however many keys moved, with ``bytes``, ``seconds`` (time spent in
    transfers), ``count`` (transfers) and ``keys``.
    """

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        #: Entries before the plugin began are not its to report (the log's
        #: times are worker wall-clock times).
        self.began = time.time()
        #: The newest entry collected: a collect takes what was logged after
        #: it, whatever time that says (an entry's ``stop`` carries the
        #: worker's scheduler delay as it was then, so a later entry may say
        #: an earlier time: read by time, "4 keys moved" was recorded as 3).
        self.newest: dict[str, Any] | None = None
        self.pending: dict[tuple[str, str], dict[str, Any]] = {}
        self.since = time.monotonic()
        #: The type of each key fetched since the last collect, noted as it
        #: arrived: by the next collect the key may be released already.
        self.arrived: dict[Any, str] = {}
        #: Log entries whose keys had not all arrived at the last collect.
        self.waiting: list[dict[str, Any]] = []

    def fetched(self, key: Any) -> None:
        # From the transition hook (flight -> memory): one dict read and write.
        ts = self.worker.state.tasks.get(key)
        kind = getattr(ts, "type", None)
        self.arrived[key] = getattr(kind, "__name__", None) or "unknown"

    def collect(self, defer: bool = True) -> None:
        log = self.worker.transfer_incoming_log
        fresh = []
        # Newest first, back to the newest already taken. (Were it dropped
        # from the bounded log, all before it went too: all there is new.)
        for entry in reversed(log):
            if entry is self.newest or entry["stop"] <= self.began:
                break
            fresh.append(entry)
        if fresh:
            self.newest = fresh[0]
        # The log can hold a transfer before its keys' transition to memory
        # (which notes their type) has run: such an entry waits one collect.
        waiting, self.waiting = self.waiting, []
        arrived, self.arrived = self.arrived, {}
        for entry in fresh:
            if defer and any(key not in arrived for key in entry.get("keys") or {}):
                self.waiting.append(entry)
                self.arrived.update(
                    (k, arrived[k]) for k in entry.get("keys") or {} if k in arrived
                )
            else:
                waiting.append(entry)
        for entry in waiting:
            keys = entry.get("keys") or {}
            names = {arrived.get(key, "unknown") for key in keys}
            kind = names.pop() if len(names) == 1 else "mixed"
            bucket = self.pending.setdefault(
                (str(entry["who"]), kind),
                {"bytes": 0, "seconds": 0.0, "count": 0, "keys": 0, "stop": 0.0},
            )
            bucket["bytes"] += int(entry.get("total") or 0)
            bucket["seconds"] += float(entry.get("duration") or 0.0)
            bucket["count"] += 1
            bucket["keys"] += len(keys)
            bucket["stop"] = max(bucket["stop"], float(entry["stop"]))

    def report(self, shipper: LogShipper, force: bool = False) -> None:
        """Ship the sums, once a second (``force``: now, as a run ends)."""
        self.collect(defer=not force)
        if not self.pending or not (
            force or time.monotonic() - self.since >= TRANSFER_BUCKET_S
        ):
            return
        for (peer, kind), bucket in self.pending.items():
            stop = bucket.pop("stop")
            data = {"from": peer, "type": kind, **bucket}
            shipper.events.append(
                PushedEvent(stop, "transfer", self.worker.address, data)
            )
        self.pending = {}
        self.since = time.monotonic()


class MemorySampler:
    """The worker's process memory (RSS), read on its event loop every
    ``memory-interval``: the heartbeat's once a second misses the climb that
    gets a worker killed (seen: 1.4 s from 73 MiB to the 500 MiB limit).

    A sample is kept when it moved by 2% of the memory limit (of the last kept
    value, without a limit), or a heartbeat's interval after the last (a
    second at least): an idle worker costs a row a second on a small cluster
    and one a heartbeat on a large one (distributed spaces those to ~200 a
    second in all), a climbing one every step of it.
    """

    def __init__(self, worker: Worker, shipper: LogShipper) -> None:
        self.worker = worker
        self.shipper = shipper
        self.kept_at = -float("inf")
        self.kept = 0

    def _every(self) -> float:
        """Seconds between samples of an unchanged memory: the heartbeat's."""
        heartbeat = getattr(self.worker, "periodic_callbacks", {}).get("heartbeat")
        interval = getattr(heartbeat, "callback_time", 0) / 1000
        return max(1.0, interval)

    def sample(self, now: float) -> None:
        try:
            rss = process_rss(now)
        except Exception:  # the process is going away
            return
        limit = getattr(self.worker.memory_manager, "memory_limit", None) or self.kept
        if abs(rss - self.kept) < 0.02 * limit and now - self.kept_at < self._every():
            return
        self.kept, self.kept_at = rss, now
        self.shipper.samples.append(MemorySample(now, self.worker.address, float(rss)))


#: How long a flush waits for a native dump under way (py-spy reads in a
#: tenth of a second; its answer is read once the GIL is free).
NATIVE_FLUSH_WAIT_S = 5.0
#: A worker's states of a task whose function runs.
_RUNNING = ("executing", "long-running")
#: Where a transition out of "executing" leaves a task still running.
_STILL_RUNS = ("released", "long-running")


class ObserveWorkerPlugin(WorkerPlugin):
    """Forwards the worker's log records to the scheduler plugin.

    Task timings and metrics need nothing here: the scheduler already receives them.
    """

    name = "dask-observe-worker"
    idempotent = True

    def __init__(self, settings: CaptureSettings) -> None:
        self.settings = settings
        self.shipper: LogShipper | None = None
        self._worker: Worker | None = None
        self._leave_pacer: Callable[[], None] | None = None
        self._memory: MemorySampler | None = None
        self._transfers: Transfers | None = None
        self._stalls: StallWatch | None = None
        self.long_tasks = LongTasks()
        #: Native frames of hung tasks' threads and of tasks that held the
        #: loop (py-spy, where installed), each task read once.
        self._native = NativeStacks()
        self._stacks = StackSampler(settings.hung_task_after_s)
        self._heartbeats: Heartbeats | None = None

    def setup(self, worker: Worker) -> None:
        self._worker = worker
        self.shipper = LogShipper("worker", self.settings)
        self.shipper.start(
            worker.scheduler.dask_observe_push,
            worker=lambda: worker.address,
            # A worker that joined after the recording started (adaptive
            # scaling, a restart) logged its first lines before this setup.
            backlog=getattr(getattr(worker, "_deque_handler", None), "deque", ()),
            running=lambda: list(self.long_tasks.running),
            # Its lines, samples and events on the scheduler's clock, as
            # distributed puts its tasks' times (a worker's clock may be off).
            clock=self.clock_offset,
        )
        self._memory = MemorySampler(worker, self.shipper)
        self._transfers = Transfers(worker)
        self._stalls = StallWatch(
            self.settings.memory_interval_ms / 1000,
            spill_seconds(worker.data),
            # Which thread runs which task: what held the loop, if one did.
            tasks=lambda: getattr(worker, "active_threads", {}),
            held_by_task=self._native_of_holder,
        )
        self._leave_pacer = Pacer.join(self.settings.memory_interval_ms, self._tick)
        # The scheduler's end of a run asks every worker for this at once
        # (``dask_observe_end``): a message, where ``Client.run`` would ship
        # a pickled function to each.
        worker.handlers[FLUSH_HANDLER] = self.flush
        self._heartbeats = Heartbeats(worker)
        worker.handlers[STACKS_HANDLER] = self.sample_stacks
        worker.handlers[RUNNING_HANDLER] = self.running
        # Its clock measured now, not at its next heartbeat: distributed's
        # last estimate may be one that spanned a stall (a worker stopped
        # until this setup could run), and a run may end before then.
        self._heartbeats.measure()

    def clock_offset(self) -> float:
        """Seconds the worker's clock is behind the scheduler's (see
        ``ClockOffset``; 0 before setup)."""
        return self._heartbeats.clock() if self._heartbeats is not None else 0.0

    def _tick(self, now: float) -> None:
        """Every ``memory-interval``: the worker's memory, its long tasks,
        (summed a second) its transfers, whether this tick came late, and
        (a second apart) whether its host had more to run than cores."""
        assert self._memory is not None and self.shipper is not None
        assert self._transfers is not None
        self._tell_stall(now)
        self.long_tasks.report(now, self._memory.worker.address, self.shipper)
        self._tell_host(now)
        self._sample_stacks(now)
        self._memory.sample(now)
        LogRouter.flush_output(PARTIAL_AFTER_S)
        self._transfers.report(self.shipper)

    def _tell_host(self, now: float, at_least: float = INTERVAL_S) -> None:
        """Ship the host's sample due by ``now`` if it shows pressure."""
        if self._memory is None or self.shipper is None:
            return
        host = workers_host_pressure(at_least)
        if host is not None:
            address = self._memory.worker.address
            self.shipper.events.append(PushedEvent(now, "host-load", address, host))

    def _tell_stall(self, now: float) -> None:
        """Ship a stall of the loop that ended by ``now`` (see ``StallWatch``)."""
        if self._stalls is None or self._memory is None or self.shipper is None:
            return
        stall = self._stalls.tick(now)
        if stall is not None:
            address = self._memory.worker.address
            self.shipper.events.append(
                PushedEvent(now, "event-loop-stall", address, stall)
            )

    def _sample_stacks(self, now: float, every: bool = False) -> None:
        worker, shipper = self._worker, self.shipper
        if worker is None or shipper is None:
            return

        def ship(data: dict[str, Any]) -> None:
            shipper.events.append(PushedEvent(now, "task-stack", worker.address, data))

        def ship_native(data: dict[str, Any]) -> None:
            # From the dump's thread, when it is done: its own time.
            at = time.time()
            shipper.events.append(PushedEvent(at, "task-native", worker.address, data))

        def native(tasks: dict[int, str]) -> None:
            self._native.request(tasks, ship_native, again=every)

        threads = getattr(worker, "active_threads", {})
        self._stacks.sample(
            now, self.long_tasks.running, threads, ship, every=every, native=native
        )

    def _native_of_holder(self, thread: int, key: str) -> None:
        """A task's thread holds the loop (the watchdog saw it, as it
        happens): read the native frames beneath its Python ones, where
        py-spy is, once a task (a regular expression holding the GIL in C
        shows its frames in the C library, not just the Python line)."""
        worker, shipper = self._worker, self.shipper
        if worker is None or shipper is None:
            return

        def ship(data: dict[str, Any]) -> None:
            at = time.time()
            shipper.events.append(PushedEvent(at, "task-native", worker.address, data))

        self._native.request({thread: key}, ship, at_once=True)

    def running(self) -> dict[str, float]:
        """The tasks running (those the scheduler let go of included: their
        functions have not returned), and for how long (seconds, on this
        worker's own clock)."""
        now = time.time()
        return {
            key: round(now - since, 3)
            for key, since in list(self.long_tasks.running.items())
        }

    def sample_stacks(self) -> dict[str, float]:
        """The stack of every running task, shipped with the next flush: a run
        that stops while they run keeps where each one was. Answers the tasks
        running, as ``running`` does."""
        self._sample_stacks(time.time(), every=True)
        return self.running()

    def native_profile_start(self, token: str, rate: int) -> dict[str, Any]:
        """Record this process with py-spy for run ``token`` (see
        ``nativeprofile``): whether it started, or why not."""
        return NativeProfiles.start(token, rate)

    def native_profile_stop(self, token: str) -> dict[str, Any]:
        """What the native profile of run ``token`` recorded, on the
        scheduler's clock, if this process holds it."""
        return NativeProfiles.stop(token, self.clock_offset())

    async def flush(self, heartbeat: bool = False) -> None:
        """Ship the buffered records now; with ``heartbeat``, then send one if
        the worker measured fine performance metrics since its last: the
        heartbeat carries them, so that the scheduler's spans hold all of a
        run's when it ends. A worker that ran nothing meanwhile is not made to
        (at 200 workers, their heartbeats were most of a run's end); a
        heartbeat in flight, which took the metrics, is waited for."""
        if self.shipper is not None:
            # A stall that just ended is told with these records, not at the
            # next tick: a run's end flushes as its last task returns, and a
            # stall that task caused was told after the run had ended.
            now = time.time()
            self._tell_stall(now)
            # The run's last seconds on a busy host, told before it is judged.
            self._tell_host(now, TAIL_S)
            if self._native.busy():  # its frames belong to the run ending
                await asyncio.to_thread(self._native.wait, NATIVE_FLUSH_WAIT_S)
            if self._transfers is not None:
                self._transfers.report(self.shipper, force=True)
            LogRouter.flush_output()  # a line a task wrote without its newline
            self._say_clock()
            await self.shipper.flush()
        if heartbeat and self._heartbeats is not None:
            await self._heartbeats.landed()
        if heartbeat and self._worker is not None and _fine_pending(self._worker):
            # The metrics are extra: a failed heartbeat must not fail the flush,
            # whose caller then reads the run's last lines.
            try:
                await self._worker.heartbeat()
            except Exception as e:
                logger.debug("dask-observe: heartbeat failed: %s", e)

    def _say_clock(self) -> None:
        """With a run's last lines (a run's end flushes): how far this
        worker's times were moved onto the scheduler's clock, where they were
        (a ``clock-offset`` event: the run keeps it in its environment, and
        the flag of that name reads it)."""
        offset = self.clock_offset()
        if abs(offset) >= CLOCK_S and self.shipper is not None and self._worker:
            data = {"seconds": round(offset, 3)}
            event = PushedEvent(time.time(), "clock-offset", self._worker.address, data)
            self.shipper.events.append(event)

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        # The worker's hot path: a dict write or pop, and as a task starts a
        # look that the output hooks are still ours (three attribute reads).
        if finish == "executing":
            self.long_tasks.started(str(key))
            LogRouter.task_starting()  # its prints and warnings caught
        elif start == "executing" or start == "long-running" or start == "cancelled":
            # A task runs its function until it returns: seceded from the
            # worker's threads ("long-running"), or let go of by the scheduler
            # (a client's timeout: "cancelled"), it is still running, with
            # its own output, stack and time.
            if (start != "executing" or finish in _STILL_RUNS) and self._runs(key):
                return
            name = str(key)
            if start != "executing" and name not in self.long_tasks.running:
                return
            # Its output first (its last partial line, what its pipes hold),
            # while it still counts as running: then told as its own.
            LogRouter.task_ended(key)
            self.long_tasks.ended(name)
            self._stacks.ended(name)
        elif start == "flight" and finish == "memory" and self._transfers:
            self._transfers.fetched(key)

    def _runs(self, key: Any) -> bool:
        """Whether the worker's task of ``key`` still runs its function."""
        ts = self._worker.state.tasks.get(key) if self._worker else None
        state = getattr(ts, "state", None)
        return state in _RUNNING or (
            state == "cancelled" and getattr(ts, "previous", None) in _RUNNING
        )

    async def teardown(self, worker: Worker) -> None:
        if self._heartbeats is not None:
            self._heartbeats.restore()
        if self._leave_pacer is not None:
            self._leave_pacer()
        if self._stalls is not None:
            self._stalls.stop()
        if self.shipper is not None:
            await self.shipper.stop()

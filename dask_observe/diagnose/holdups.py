"""What held a process up, as the capture saw it: its event loop's stalls
(and what it imported meanwhile, and whether its host was busy), threads
taking turns at the GIL. The evidence of the runtime family's rules
(:mod:`.runtime`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from dask_observe.capture.events import Held, LoopStall
from dask_observe.diagnose.base import Context, Facts
from dask_observe.diagnose.host import Busy, BusyHosts
from dask_observe.diagnose.lives import WorkerLives
from dask_observe.units import format_seconds

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


T = TypeVar("T")


class Stall(NamedTuple):
    """A stall of a process's event loop, as a flag tells it."""

    time: float
    #: None: the scheduler's.
    worker: str | None
    seconds: float
    text: str


class Stalls(NamedTuple):
    """A run's event-loop stalls over their thresholds, by what caused them."""

    #: Held by the process's own work: event-loop-blocked's.
    code: list[Stall]
    #: A worker's while gil-contention flags it (on a quiet host or a busy
    #: one): that flag's. Threads taking turns at the GIL starve the loop's
    #: thread too (0.5-0.8 s a tick with four spinning threads on a quiet
    #: machine, up to 1.9 s on a busy one).
    contended: list[Stall]
    #: While the process's host was oversubscribed, with its busiest second
    #: (and the loop's waits for a core, where they decided it): the host's
    #: (2.6-5.3 s with two other processes busy on its two cores).
    host: list[tuple[Stall, Crowded]]
    #: While the process imported modules (how many, and their top-level
    #: packages): a worker unpickles a task on its event loop, importing the
    #: module of its function on first use (a test module importing pandas
    #: and dask.dataframe held a worker's loop 1.7-2.3 s).
    imports: list[tuple[Stall, Imported]]
    #: A worker's that spent at least half of it moving data to or from disk,
    #: with those seconds: spilling's. A worker writes a result that does not
    #: fit under its target, and its memory monitor evicts, on its event loop
    #: (a worker keeping 1.2 GB under a 1.5 GiB limit stalled 0.6 s, three
    #: times, each with as many seconds of spilling; on CI, over the tick).
    spilled: list[tuple[Stall, float]]
    #: A process's that spent at least half of it in full garbage
    #: collections, with those seconds: a collection walks every object the
    #: process holds with the GIL held (in a threads-only cluster, the
    #: client's objects too).
    collected: list[tuple[Stall, float]]
    #: A worker's spent so in collections while it was paused for memory,
    #: or as it paused: memory-pressure's. A worker's memory monitor, above
    #: the pause threshold, runs a full collection on the event loop to free
    #: memory, then pauses (a worker eating memory under its nanny stalled
    #: 1.65 s so on a loaded CI machine, its collection 1.74 s: the first of
    #: a process forked from one that had imported pandas).
    paused: list[tuple[Stall, float]]
    #: The process hardly ran meanwhile (less than WAITED_SHARE of the stall
    #: in CPU, all its threads together), on a host not seen busy: not busy
    #: work but a wait (a blocking call on the loop, a task's call that waits
    #: holding the GIL, a process the host or its memory did not run). Filed
    #: with its CPU seconds. (Told as busy code, "release the GIL in
    #: long-running tasks", to a process that had 0.04 s of CPU in 1.72 s.)
    waited: list[tuple[Stall, float]]


#: A stall whose process had less CPU than this share of it waited: its own
#: work (a task, the GIL) would have kept a core busy.
WAITED_SHARE = 0.25

#: A stall is the host's only where the loop's thread spent this share of it
#: ready to run but waiting for a core (where the capture read it). Beside
#: twelve busy processes on two cores, a stall of a worker's loop running
#: tiny tasks had its thread queued 1.44 s of 1.68; a task waiting in C with
#: the GIL held, 0.09 s of 2.49, and a sleep on the loop, 0.001 s of 1.49:
#: both were told "a busy host, not the tasks' code, held it up".
HOST_QUEUED_SHARE = 0.5

#: A stall during which the worker spent this share of it spilling is spilling's;
#: one the process spent this share of in full garbage collections, the
#: collector's.
HELD_SHARE = 0.5
#: A pause said up to this long after a stall is the pause that stall's
#: collection came before: the worker logs "Pausing worker" once its
#: collection returned, before its loop ticks again, and the scheduler logs
#: the status change when the worker's message reaches it.
PAUSE_SLACK_S = 1.0
#: Modules imported during a stall are not its cause where the loop's own
#: thread (which imports them) had less CPU than this share of the stall while
#: the process's other threads had more: another thread held the GIL. A task
#: that held it for 4 s, its module (two of them) unpickled on the loop first,
#: left the loop's thread 5 ms of CPU and the process 4 s. An import that
#: waits on a slow disk has little CPU on either side, and stays the imports'.
#: Not half: on a busy host a thread gets a core part of the time.
LOOP_WORK_SHARE = 0.25


class Crowded(NamedTuple):
    """What made a stall the host's."""

    #: Its busiest second.
    busy: Busy
    #: The seconds the loop's thread waited for a core where they, not the
    #: process's CPU time, made it the host's: the stall less them would not
    #: have counted. None where the process had less CPU than a stall takes.
    queued: float | None = None


class Imported(NamedTuple):
    """Modules a process imported during a stall of its event loop."""

    modules: int
    packages: list[str]


class Holdups(Facts):
    """A run's event-loop stalls and GIL contention, each told apart by cause
    once for every rule that reads them."""

    @cached_property
    def _stalls(self) -> tuple[Stalls, dict[tuple[float, str | None], Held]]:
        return _filed(self.ctx)

    @property
    def stalls(self) -> Stalls:
        """Each stall over its threshold, by what caused it: from the ticker
        the capture runs on each event loop, and from distributed's own "Event
        loop was unresponsive" lines (its tick limit, 3 s by default) for
        processes without one (a partial run). A line about a stall the
        ticker saw too is kept as evidence of it."""
        return self._stalls[0]

    def held(self, among: list[Stall]) -> list[Held]:
        """What held the loop in each stall of ``among`` where its watchdog
        saw it."""
        found = self._stalls[1]
        return [h for t, w, _, _ in among if (h := found.get((t, w))) is not None]

    @cached_property
    def _contention(self) -> tuple[pd.DataFrame, tuple[pd.DataFrame, list[Busy]]]:
        return _contended(self.ctx)

    @property
    def contended(self) -> pd.DataFrame:
        """The high GIL contention samples (time, worker, value) of the
        workers gil-contention flags for them (see :func:`_contended`)."""
        return self._contention[0]

    @property
    def contended_at_host(self) -> tuple[pd.DataFrame, list[Busy]]:
        """The high GIL contention samples taken while their host was
        oversubscribed, with its busy second each."""
        return self._contention[1]

    @cached_property
    def contention(self) -> dict[str, list[float]]:
        """Times of :attr:`contended`'s samples, by worker."""
        return by_worker(self.contended)


def _filed(ctx: Context) -> tuple[Stalls, dict[tuple[float, str | None], Held]]:
    """Each stall over its threshold filed by cause (:attr:`Holdups.stalls`),
    and what the watchdog saw hold each, by (time, worker)."""
    tick = ctx.seconds("event-loop-blocked.tick")
    scheduler_tick = ctx.seconds("event-loop-blocked.scheduler-tick")
    split = Stalls([], [], [], [], [], [], [], [])
    events = ctx.events("event-loop-stall")
    unresponsive = ctx.logs("Event loop was unresponsive")
    if not events and not unresponsive:
        # Most runs: what would tell stalls apart (GIL contention, the host's
        # load) is not read.
        return split, {}
    holdups = Holdups.of(ctx)
    contended = holdups.contention
    contended_at_host = by_worker(holdups.contended_at_host[0])
    hosts = BusyHosts.of(ctx)

    def file(
        stall: Stall, since: float, read: LoopStall | None = None
    ) -> Callable[[Stall], None]:
        """File ``stall`` by its cause (``read``: what the capture measured
        meanwhile, if it saw it); return how to file another record of the
        same stall with it."""
        t, worker = stall.time, stall.worker
        cpu = read.cpu if read else None
        spilled, collected = (read.spilled, read.gc) if read else (0.0, 0.0)
        imported = (
            Imported(read.imported, read.packages) if read and read.imported else None
        )
        busy = hosts.during(worker, since, t)
        # A process that had as much CPU meanwhile as a stall takes to count
        # would have stalled on a quiet host too: its own work held it.
        counts = tick if worker else scheduler_tick
        starved = cpu is None or cpu < counts
        # And a loop whose thread hardly waited for a core was not held up by
        # the host, however busy it was: it waited for something else (the
        # GIL, a lock, a blocking call). Unknown (a capture before the
        # reading, not Linux): the host's where it was busy, as before.
        queued = read.loop_queued if read else None
        by_queue: float | None = None
        if queued is not None and queued < HOST_QUEUED_SHARE * stall.seconds:
            starved = False
        elif queued is not None and not starved and stall.seconds - queued < counts:
            # The process had a stall's worth of CPU, but its loop's thread
            # spent most of the stall waiting for a core, and the rest (its
            # own work, the GIL, a blocking call) would not have counted: a
            # spinning task's process had 1.24 s of CPU in a stall of 1.94 s,
            # whose loop's thread ran 0.61 s and was queued 1.32 s; told as
            # "the task held it, holding the GIL", it had waited for no GIL.
            starved, by_queue = True, queued
        # Threads taking turns at the GIL starve the loop's thread too: the
        # stall is gil-contention's (whichever cause that flag names).
        turns = worker is not None and (
            during(contended.get(worker), since, t)
            or during(contended_at_host.get(worker), since, t)
        )
        add: Callable[[Stall], None]
        if turns:
            add = split.contended.append
        elif worker and spilled > 0 and spilled >= HELD_SHARE * stall.seconds:
            # Before the host: a busy host slows the writes, but the worker
            # would not have stalled without them.
            add = _paired(split.spilled, spilled)
        elif collected > 0 and collected >= HELD_SHARE * stall.seconds:
            # Before the host too: a busy host stretches a collection, but
            # the loop waited for the collector, not for a core.
            in_pause = worker is not None and paused_during(
                WorkerLives.of(ctx).paused_spans.get(worker), since, t
            )
            add = _paired(split.paused if in_pause else split.collected, collected)
        elif imported is not None and read and read.held and read.held.importing:
            # Seen inside the import machinery, on the loop's own thread: an
            # import held it, however busy the host (one waiting on I/O or a
            # lock takes no CPU, and read as the host's starving it).
            add = _paired(split.imports, imported)
        elif busy is not None and starved:
            add = _paired(split.host, Crowded(busy, by_queue))
        elif imported is not None and not held_elsewhere(
            stall.seconds, cpu, read.loop_cpu if read else None
        ):
            add = _paired(split.imports, imported)
        elif (
            cpu is not None and stall.seconds > 0 and cpu < WAITED_SHARE * stall.seconds
        ):
            add = _paired(split.waited, cpu)
        else:
            add = split.code.append
        add(stall)
        return add

    # Each ticker stall's filing, by (worker, second): distributed's line
    # about the same stall goes with it.
    filed: dict[tuple[str | None, int], Callable[[Stall], None]] = {}
    held_by: dict[tuple[float, str | None], Held] = {}
    for t, _, worker, data in events:
        read = LoopStall.from_data(data, float(t))
        named = worker if isinstance(worker, str) and worker else None
        if read.held is not None:
            held_by[(float(t), named)] = read.held
        if read.seconds >= (tick if named else scheduler_tick):
            who = named or "the scheduler"
            text = f"event loop of {who} stalled for {format_seconds(read.seconds)}"
            stall = Stall(float(t), named, read.seconds, text)
            filed[(named, round(t))] = file(stall, read.since, read)
    for t, worker, message in unresponsive:
        took = re.search(r"for ([0-9.]+)s", message)
        seconds = float(took[1]) if took else 0.0
        near = next(
            (filed[k] for d in range(-5, 6) if (k := (worker, round(t) + d)) in filed),
            None,
        )
        if near is not None:
            # Evidence of a stall the ticker saw, filed with it: on its own
            # (no CPU reading) a busy host would take it, and the flag said
            # the same stall "came while the host was oversubscribed" too.
            near(Stall(t, worker, 0.0, message))
        else:
            file(Stall(t, worker, seconds, message), t - seconds)
    split.code.sort()
    split.contended.sort()
    split.host.sort(key=lambda pair: pair[0])
    split.imports.sort(key=lambda pair: pair[0])
    split.spilled.sort(key=lambda pair: pair[0])
    split.collected.sort(key=lambda pair: pair[0])
    split.paused.sort(key=lambda pair: pair[0])
    split.waited.sort(key=lambda pair: pair[0])
    return split, held_by


def paused_during(
    spans: list[tuple[float, float]] | None, since: float, until: float
) -> bool:
    """Whether a worker paused for memory (``spans``: ``WorkerLives.paused_spans``)
    at some time of a stall from ``since`` to ``until``, or as it ended."""
    return any(
        began <= until + PAUSE_SLACK_S and ended >= since
        for began, ended in spans or ()
    )


def held_elsewhere(seconds: float, cpu: float | None, loop_cpu: float | None) -> bool:
    """Whether, during a stall of ``seconds``, the loop's thread barely ran
    while the process's other threads worked (``LOOP_WORK_SHARE``): the GIL
    was held elsewhere. Unknown (a capture without the readings): False."""
    if cpu is None or loop_cpu is None:
        return False
    least = LOOP_WORK_SHARE * seconds
    return loop_cpu < least <= cpu - loop_cpu


def _paired(into: list[tuple[Stall, T]], found: T) -> Callable[[Stall], None]:
    """Files a stall into ``into`` with what was ``found`` of its cause."""
    return lambda stall: into.append((stall, found))


def _contended(ctx: Context) -> tuple[pd.DataFrame, tuple[pd.DataFrame, list[Busy]]]:
    """The high GIL contention samples (time, worker, value) taken while two
    or more of the worker's task threads were computing on a quiet host, of
    the workers gil-contention flags for them (most of that time, min-time at
    least).

    distributed measures the contention of a worker's whole process: in a
    threads-only cluster that is also the client's and the scheduler's, whose
    own work (building a graph, sending 90 MB of it) read 0.9 while the tasks
    had computed for 60 ms. Only task threads at work can fight over the GIL.
    """
    import numpy as np

    share = ctx.number("gil-contention.share")
    min_time = ctx.seconds("gil-contention.min-time")
    values = ctx.metric("gil_contention")
    if not (values["value"] > share).any():  # most runs: nothing to split
        none = values.iloc[:0]
        return none, (none, [])
    values = values.sort_values("time", kind="stable")
    # The seconds a sample speaks for: since the worker's sample before (at
    # least one, a heartbeat's interval). A loop starved by the threads it
    # measures sends its next heartbeat late, its value the average of the
    # whole wait: one sample after 5 s of spinning (seen under load on CI).
    gaps = values.groupby("worker")["time"].diff().fillna(1.0).clip(lower=1.0)
    values = values.assign(covers=gaps)
    threads = ctx.metric("nthreads").groupby("worker")["value"].max()
    values = values[values["worker"].isin(set(threads[threads > 1].index))]
    done = ctx.finished
    times = values["time"].to_numpy(dtype=float)
    covers = values["covers"].to_numpy(dtype=float)
    busy = np.zeros(len(values), dtype=bool)
    for worker, rows in values.groupby("worker").indices.items():
        mine = done[done["worker"] == worker]
        # Less a millisecond: back-to-back tasks of two threads busy all along
        # add up to 1.999998 s a second (epoch times round at microseconds).
        running = busy_threads(mine, times[rows], covers[rows])
        busy[rows] = running >= 2.0 - 1e-3
    computing = values[busy]
    # A thread holding the GIL that the host does not run holds the others up
    # too: samples taken while the host was oversubscribed are the host's.
    hosts = BusyHosts.of(ctx)
    at_host = hosts.overlapping(
        computing["worker"].to_numpy(),
        (computing["time"] - computing["covers"]).to_numpy(dtype=float),
        computing["time"].to_numpy(dtype=float),
    )
    is_high = (computing["value"] > share).to_numpy()
    high = computing[is_high & at_host]
    # Its busiest second each (overlapping found one: never None).
    seconds = [
        hosts.during(str(w), t - c, t)
        for t, w, c in zip(high["time"], high["worker"], high["covers"], strict=True)
    ]
    at_busy_host = two_seconds(high, [b for b in seconds if b is not None])
    # The code's: threads that fight read high nearly all along, for as long
    # as they compute; pandas on four threads reads 0.3-0.98 from second to
    # second, and at the lowest versions claimed three seconds of three above
    # the share now and then (one pass in ten of dask-examples' dataframe
    # notebook). So a worker's high samples on a quiet host count where they
    # are most-of-the-time (half or more) of its time with threads computing
    # there, weighted by the seconds each covers, and add up to min-time: a
    # few seconds of it, a sample a second, cannot be told from such a spell.
    # (Against all its computing time, busy seconds included, threads that
    # fought for ten seconds on a host busy for a few of them were nobody's.)
    quiet = computing[~at_host]
    own = computing[is_high & ~at_host]
    own_s = own.groupby("worker")["covers"].sum()
    quiet_s = quiet.groupby("worker")["covers"].sum().reindex(own_s.index)
    most = ctx.number("gil-contention.most-of-the-time")
    steady = own_s[(own_s >= most * quiet_s) & (own_s >= min_time)].index
    return own[own["worker"].isin(steady)].drop(columns="covers"), at_busy_host


def two_seconds(
    high: pd.DataFrame, busy: list[Busy]
) -> tuple[pd.DataFrame, list[Busy]]:
    """The samples of the workers with two seconds of them or more (and the
    busy seconds of their hosts, one per sample, when given)."""
    seconds = high.groupby("worker")["covers"].sum()
    kept = high["worker"].isin(seconds[seconds >= 2.0].index).to_numpy()
    return (
        high[kept].drop(columns="covers"),
        [b for b, keep in zip(busy, kept, strict=False) if keep],
    )


def busy_threads(
    tasks: pd.DataFrame, times: np.ndarray, window: float | np.ndarray = 1.0
) -> np.ndarray:
    """Threads computing tasks, on average, in the ``window`` seconds (one for
    all, or one each) before each of ``times`` (a heartbeat's sample describes
    the time since the one before).

    The thread-seconds computed up to ``x`` are the sum over tasks of
    ``clip(x - start, 0, stop - start)``: ``x - start`` over the tasks started
    before ``x`` less ``x - stop`` over those stopped before it. Sorted starts
    and stops with their running sums give that for every sample at once (a
    million tasks and thousands of samples: milliseconds, where a pass over the
    tasks per sample took minutes)."""
    import numpy as np

    start = tasks["start"].to_numpy(dtype=float)
    stop = tasks["stop"].to_numpy(dtype=float)
    computed = stop > start  # NaN compares false: tasks without both times
    if not computed.any():
        return np.zeros(len(times))
    # Seconds after the first start: running sums of epoch times lose precision.
    origin = start[computed].min()
    starts = np.sort(start[computed] - origin)
    stops = np.sort(stop[computed] - origin)

    def computed_until(x: np.ndarray) -> np.ndarray:
        total = np.zeros(len(x))
        for edges, sign in ((starts, 1.0), (stops, -1.0)):
            before = np.searchsorted(edges, x, side="right")
            sums = np.concatenate(([0.0], np.cumsum(edges)))
            total += sign * (before * x - sums[before])
        return total

    x = np.asarray(times, dtype=float) - origin
    busy: np.ndarray = (computed_until(x) - computed_until(x - window)) / window
    return busy


def by_worker(high: pd.DataFrame) -> dict[str, list[float]]:
    return {
        str(w): [float(t) for t in group["time"]] for w, group in high.groupby("worker")
    }


def during(samples: list[float] | None, since: float, until: float) -> bool:
    # A sample (a heartbeat's, about a second apart) measures the time before it.
    return any(since - 2.0 <= t <= until + 2.0 for t in samples or ())


def busiest(seconds: list[Busy]) -> str:
    """How oversubscribed the busiest of ``seconds`` found its host."""
    top = max(seconds, key=lambda b: (b.waiting or 0.0, b.runnable or 0))
    return top.describe()

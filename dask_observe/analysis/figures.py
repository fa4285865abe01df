"""Figures from a run's telemetry that more than one reader shows (the report,
the flags, a comparison): memory beyond the heartbeats, what a killed task did,
the tasks with their phases and the headline figures, and the transfers
between workers (profiles: :mod:`.trees`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dask_observe.analysis import few
from dask_observe.analysis.few import DISK_COLUMNS as DISK_COLUMNS
from dask_observe.analysis.few import PHASE_COLUMNS as PHASE_COLUMNS
from dask_observe.analysis.series import held, stacked
from dask_observe.capture.events import (
    ClockOffset,
    HostSample,
    MemoryRestart,
    PictureTask,
    RunPicture,
    TaskRunning,
)
from dask_observe.units import format_bytes, format_seconds

if TYPE_CHECKING:
    import pandas as pd

    from dask_observe.store import RunData


def fast_memory(run: RunData) -> pd.DataFrame:
    """Process memory beyond the heartbeats: each worker's own fast samples
    (``memory_rss``) and the RSS its nanny measured when it restarted it for
    memory (the ``worker-restart-memory`` event): time (epoch seconds),
    worker, rss; by time."""
    import pandas as pd

    samples = run.metric_rows("memory_rss")
    restarts = run.event_rows("worker-restart-memory")
    if len(samples) <= few.FEW_ROWS:
        rows = few.fast_memory(
            ((t, w, v) for t, w, _, v in samples),
            (
                (t, w, float(MemoryRestart.from_data(d).rss or 0))
                for t, _, w, d in restarts
            ),
        )
        return few.frame(
            {
                "time": [t for t, _, _ in rows],
                "worker": [w for _, w, _ in rows],
                "rss": [rss for _, _, rss in rows],
            },
            ("time", "worker", "rss"),
        )
    rss = run.metric_frame(samples, epoch=True)
    frames = [rss.rename(columns={"value": "rss"})[["time", "worker", "rss"]]]
    if restarts:
        frames.append(
            pd.DataFrame(
                {
                    "time": [t for t, _, _, _ in restarts],
                    "worker": [w for _, _, w, _ in restarts],
                    "rss": [
                        float(MemoryRestart.from_data(d).rss or 0) for *_, d in restarts
                    ],
                }
            )
        )
    found = stacked(frames).dropna(subset=["worker"])
    return found[found["rss"] > 0].sort_values("time", ignore_index=True, kind="stable")


def long_tasks(run: RunData) -> dict[str, tuple[float, str]]:
    """Tasks a worker said were running for a second or more (``task-running``):
    key -> (when it started, epoch seconds; the worker)."""
    return {
        said.key: (said.since, str(worker))
        for _, _, worker, data in run.event_rows("task-running")
        if (said := TaskRunning.from_data(data)) is not None
    }


def clock_offsets(run: RunData) -> dict[str, float]:
    """Seconds each worker's times were moved to be on the scheduler's clock
    in the run (negative: its clock ran ahead), by worker, as each said with
    its last lines (its ``clock-offset`` events; none for a clock within
    5 ms). The run keeps them in its environment (``clocks``)."""
    found: dict[str, float] = {}
    for _, _, worker, data in run.event_rows("clock-offset"):
        said = ClockOffset.from_data(data)
        if worker and said is not None:
            found[str(worker)] = said.seconds  # the latest said wins
    return found


def client_clock_offset(run: RunData) -> float | None:
    """Seconds the recording client's times (the run's start and end) were
    moved to be on the scheduler's clock (negative: its clock ran ahead), as
    it measured when it began recording the cluster; None within 5 ms."""
    for _, _, worker, data in run.event_rows("clock-offset"):
        said = ClockOffset.from_data(data)
        if not worker and said is not None and said.of == "client":
            return said.seconds
    return None


def killed_task_story(
    run: RunData, key: str, until: float, memory: pd.DataFrame | None = None
) -> str | None:
    """ "It ran 1.4 s on W, while W's memory rose from 120 MiB to 590 MiB": what
    a task that died with its worker did, or None when no worker said it ran
    (tasks shorter than a second). ``until`` is when it failed (epoch)."""
    found = long_tasks(run).get(key)
    if found is None:
        return None
    since, worker = found
    story = f"It ran {format_seconds(max(until - since, 0.0))} on {worker}"
    memory = fast_memory(run) if memory is None else memory
    mine = memory[(memory["worker"] == worker) & (memory["time"] <= until)]
    before = mine[mine["time"] <= since]
    during = mine[mine["time"] >= since]
    if not during.empty:
        low = float(
            before["rss"].iloc[-1] if not before.empty else during["rss"].iloc[0]
        )
        story += (
            f", while its memory rose from {format_bytes(low)} to "
            f"{format_bytes(float(during['rss'].max()))}"
        )
    return story + "."


# -- a run's tasks and headline figures (the report's and a comparison's) ------

#: distributed's routine lines at WARNING: a P2P shuffle starting and ending
#: as it should (logger, the message's start, a phrase in it). Kept in the
#: store and the logs; not shown among a run's warnings and errors, where they
#: read as its newest problems. (A shuffle *restarted* is not routine.)
ROUTINE_LINES = (
    ("distributed.shuffle._scheduler_plugin", "Shuffle ", " initialized by task "),
    ("distributed.shuffle._scheduler_plugin", "Shuffle ", " deactivated due to "),
)


def is_routine(logger: object, message: object) -> bool:
    """Whether a log line is one of :data:`ROUTINE_LINES`."""
    text = str(message)
    return any(
        logger == name and text.startswith(start) and phrase in text
        for name, start, phrase in ROUTINE_LINES
    )


def task_table(
    run: RunData, start: float, tasks: pd.DataFrame | None = None
) -> pd.DataFrame:
    """``run``'s tasks as a report and the exports draw them: times since
    ``start``, tasks that died with their workers placed where those said they
    ran, disk seconds that touched no disk apart (``stall_s``), and a ``lane``
    a worker thread. ``tasks``: ``run.tasks(epoch=True)`` where read already
    (left as it is)."""
    tasks = run.tasks(epoch=True) if tasks is None else tasks.copy()
    # A task that died with its worker has no start: the scheduler never heard
    # it finish. Its worker said when it started, if it ran a second or more:
    # then it is drawn from there to its failure, on that worker.
    running = long_tasks(run)
    if running:
        keys = tasks["key"].astype(str)
        # float: mapped over no task at all (a run stopped before any task
        # ended), the column would keep the keys' string dtype.
        since = keys.map({key: t for key, (t, _) in running.items()}).astype(float)
        unknown = tasks["start"].isna() & since.notna()
        tasks.loc[unknown, "start"] = since[unknown]
        tasks.loc[unknown, "stop"] = tasks.loc[unknown, "ended"]
        tasks.loc[unknown, "worker"] = keys[unknown].map(
            {key: w for key, (_, w) in running.items()}
        )
        ran = tasks.loc[unknown, "ended"] - since[unknown]
        tasks.loc[unknown, "compute_s"] = tasks.loc[unknown, "duration_s"] = ran
    for column in ("start", "stop", "ended"):
        tasks[column] = tasks[column] - start
    tasks["duration_s"] = tasks["duration_s"].fillna(0.0)
    stalls_apart(run, tasks)
    # A lane per worker thread, as in Dask's task stream; threads numbered from 0
    # within their worker (their ids are long and say nothing).
    worker = tasks["worker"].fillna("?")
    # A task whose thread is not known (it died with its worker) goes in its
    # worker's first lane, not a lane of its own.
    first = tasks.groupby(worker)["thread"].transform("min")
    thread = tasks["thread"].fillna(first).fillna(0).astype("int64")
    number = thread.groupby(worker).rank(method="dense").fillna(1).astype("int64") - 1
    tasks["lane"] = worker + " #" + number.astype(str)
    return tasks


def stalls_apart(run: RunData, tasks: pd.DataFrame) -> None:
    """Move the "disk" seconds of tasks that touched no disk to ``stall_s``
    (once: tasks that have the column already are left as they are; the
    public ``Run.tasks()`` has it).

    distributed times any wait over 5 ms for a task's arguments or for storing
    its result as ``disk-read`` / ``disk-write``, spilled or not (dataframe
    joins showed 7-22 s of such "disk" with nothing written). Bytes say which
    were disk: the workers' meters count them per prefix (fine metrics); a run
    without them (still running, recorded partially) was on disk only if its
    workers ever held spilled data.
    """
    import numpy as np

    if "stall_s" in tasks.columns:
        return
    tasks["stall_s"] = 0.0
    if not any(
        np.nan_to_num(tasks[column].to_numpy(dtype=float)).any()
        for column in DISK_COLUMNS.values()
    ):  # most runs: no disk seconds to tell apart (4 ms a read saved)
        return
    fine = run.fine_rows()
    spilled = bool(run.cluster_metric_rise("memory_spilled"))
    for activity, column in DISK_COLUMNS.items():
        if not fine:
            stalled = tasks["prefix"].notna() & (not spilled)
        else:
            on_disk = {
                p
                for c, p, a, u, v in fine
                if c == "execute" and a == activity and u == "bytes" and v > 0
            }
            stalled = ~tasks["prefix"].isin(on_disk)
        seconds = tasks[column].fillna(0.0)
        tasks["stall_s"] += seconds.where(stalled, 0.0)
        tasks[column] = tasks[column].where(~stalled, 0.0)


def shuffle_disk(run: RunData) -> dict[str, float]:
    """Bytes P2P shuffles wrote to and read from disk (``written``, ``read``):
    where shuffles keep their shards by design, apart from spilling."""
    p2p = [(a, v) for c, _, a, u, v in run.fine_rows() if c == "p2p" and u == "bytes"]
    return {
        "written": float(sum(v for a, v in p2p if a == "disk-write")),
        "read": float(sum(v for a, v in p2p if a in ("disk-read", "p2p-disk-read"))),
    }


def prefix_table(tasks: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    if tasks.empty:
        return pd.DataFrame(
            columns=["prefix", "count", "total_s", "mean_s", "nbytes", "errors"]
        )
    grouped = tasks.assign(errors=tasks["status"] == "erred").groupby("prefix")
    table = pd.DataFrame(
        {
            "count": grouped.size(),
            "total_s": grouped["duration_s"].sum(),
            "mean_s": grouped["duration_s"].mean(),
            "nbytes": grouped["nbytes"].sum(),
            "errors": grouped["errors"].sum(),
        }
    )
    # Stable: prefixes of equal time stay by name (as ``few.prefix_rows``).
    return table.sort_values("total_s", ascending=False, kind="stable").reset_index()


def phase_totals(tasks: pd.DataFrame) -> dict[str, float]:
    """Seconds of task time in each phase of PHASE_COLUMNS."""
    import numpy as np

    # One sum over the columns, not a frame a phase (3.9 -> 0.3 ms a report).
    columns = [column for group in PHASE_COLUMNS.values() for column in group]
    values = tasks[columns].to_numpy(dtype=float)
    sums = dict(zip(columns, np.nansum(values, axis=0).tolist(), strict=True))
    return {
        phase: float(sum(sums[column] for column in group))
        for phase, group in PHASE_COLUMNS.items()
    }


#: The activity of tasks still executing as their run ended: distributed
#: splits a task's time into its activities only once it ends, and until
#: then counts its thread with the idle ones.
RUNNING_AT_END = "still running at the end"
IDLE = "idle or other spans"


def time_split(run: RunData) -> dict[str, float]:
    """Seconds of the run's worker threads by activity, summed over prefixes;
    a thread held by a task still running as the run ended is that task's
    (RUNNING_AT_END), not idle: a hang's report said "threads idle 100 %"."""
    totals: dict[str, float] = {}
    for context, _, activity, unit, value in run.fine_rows():
        if context == "execute" and unit == "seconds":
            totals[activity] = totals.get(activity, 0.0) + float(value)
    held = running_at_end(run)
    if held:
        # What distributed counted idle of it was the task's; what it never
        # counted, too: no heartbeat carried that stretch's metrics (on a
        # loaded host none came within a 4 s hang, and its report said
        # nothing of where the time went). A running task's seconds are in
        # no other activity until it ends.
        idle = totals.get(IDLE, 0.0)
        if idle:
            totals[IDLE] = idle - min(held, idle)
        totals[RUNNING_AT_END] = held
    return dict(sorted(totals.items(), key=lambda pair: pair[1], reverse=True))


def running_at_end(run: RunData) -> float:
    """Thread seconds, within the run, of the tasks still executing when it
    was stopped (its ``run-stopped`` event: each such task's time so far).

    The scheduler knows a task's time only from its worker's last heartbeat
    (up to 0.5 s old, and none at all when heartbeats lag on a loaded host);
    the worker's own ``task-running`` event, sent after its first second,
    says when it started: the longer of the two counts."""
    held = 0.0
    started = long_tasks(run)
    for at, _, _, data in run.event_rows("run-stopped"):
        picture = RunPicture.from_data(data)
        if picture is None:
            continue
        within = max(0.0, at - run.started)
        for worker in picture.workers:
            for task in worker.processing:
                held += min(ran_for(task, at, started) or 0.0, within)
    return held


def ran_for(
    task: PictureTask, at: float, started: dict[str, tuple[float, str]]
) -> float | None:
    """How long a task still running at ``at`` (a ``run-stopped`` event's
    ``processing`` entry) had run: the longer of what the scheduler heard
    from its worker's last heartbeat (``elapsed``) and what the worker said
    of its start (``started``: :func:`long_tasks`); None, told by neither."""
    heard = task.elapsed
    since = started.get(task.key)
    said = max(0.0, at - since[0]) if since is not None else None
    known = [seconds for seconds in (heard, said) if seconds is not None]
    return max(known) if known else None


def process_memory(run: RunData, fast: pd.DataFrame | None = None) -> pd.DataFrame:
    """The memory the workers' processes held together, second by second: per
    second, each worker's highest reading (heartbeats, its own fast samples,
    its nanny's at a memory restart), summed over workers. time (epoch
    seconds, the second's start), rss; by time.

    A worker that climbs to its limit between two heartbeats and is killed
    shows its climb here, where heartbeats alone would miss it. Spilled data
    is on disk, not in this figure. ``fast`` is ``fast_memory(run)`` where the
    caller has it already.
    """
    import pandas as pd

    samples = run.metric_rows("memory_process")
    fast = fast_memory(run) if fast is None else fast
    gone = [(t, w) for t, _, w, _ in run.event_rows("worker-removed") if w]
    if len(samples) + len(fast) <= few.FEW_ROWS:
        few_readings = [(t, w, v) for t, w, _, v in samples if w is not None]
        few_readings += zip(fast["time"], fast["worker"], fast["rss"], strict=True)
        rows = few.process_memory(few_readings, gone)
        return pd.DataFrame(rows, columns=["time", "rss"], dtype=float)
    process = run.metric_frame(samples, epoch=True)
    process = process[process["worker"].notna()]
    readings = stacked(
        [
            process.rename(columns={"value": "rss"})[["time", "worker", "rss"]],
            fast,
        ]
    )
    if readings.empty:
        return pd.DataFrame({"time": [], "rss": []})
    readings["second"] = (readings["time"] // 1).astype("int64")
    per_worker = readings.groupby(["second", "worker"])["rss"].max().reset_index()
    # A worker idle on a large cluster is read every heartbeat (2 s at 200
    # workers): its last reading holds in the seconds between, else those
    # seconds would sum only the workers read in them. A removed worker's
    # holds until it left (within the second it left in).
    gone = [(t // 1 + 0.5, w) for t, w in gone]
    table = held(per_worker.rename(columns={"second": "time", "rss": "value"}), gone)
    total = table.sum(axis=1)
    return pd.DataFrame(
        {"time": total.index.to_numpy(dtype=float), "rss": total.to_numpy()}
    )


def peak_memory(
    run: RunData, fast: pd.DataFrame | None = None, *, kept: bool = True
) -> float | None:
    """The highest second of :func:`process_memory`: the run's peak memory, the
    one figure the headline, the cluster chart and comparisons show. As kept
    in the run's row since its end (``kept``; a comparison read it from the
    metrics each time, 14 ms a run), else worked out."""
    if kept and fast is None and (figures := run.kept_figures()) is not None:
        return figures[1]
    total = process_memory(run, fast)
    return float(total["rss"].max()) if len(total) else None


def transfer_summary(transfers: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """``RunData.transfers()`` summed by ``by`` (e.g. ``["peer", "worker"]`` for
    each pair of workers, ``["type"]``): bytes, seconds, count, keys and
    bandwidth (bytes over the seconds spent transferring); most bytes first."""
    if transfers.empty:  # most runs: grouping nothing cost ~4 ms a call
        return transfers[[*by, "bytes", "seconds", "count", "keys", "bandwidth"]]
    sums = (
        transfers.groupby(by, sort=False)[["bytes", "seconds", "count", "keys"]]
        .sum()
        .reset_index()
    )
    sums["bandwidth"] = sums["bytes"] / sums["seconds"].clip(lower=1e-3)
    return sums.sort_values("bytes", ascending=False, ignore_index=True)


@dataclass(frozen=True)
class HostLoad:
    """How busy a run's busiest host was, from the samples the capture ships
    a second for a host under CPU pressure (a quiet second ships none)."""

    #: The share of the run's wall time during which its runnable threads
    #: waited for a core (Linux's CPU pressure, "some": any thread, any
    #: process): whether the host was busy.
    waiting: float = 0.0
    #: Runnable threads per core, averaged over the run's wall time (1 where
    #: never more than the cores): how much slower a thread could run for the
    #: host alone, each core shared by that many.
    crowding: float = 1.0
    #: The share of the run's task threads' time spent on a CPU (the workers'
    #: meters; None unknown): only that part is slowed by a crowded host (a
    #: task that sleeps 5x longer is not the host's doing).
    cpu_share: float | None = None


def host_load(run: RunData, duration: float | None) -> HostLoad:
    """The run's :class:`HostLoad`, of the process whose samples say its host
    waited longest (each process samples the host it runs on)."""
    split = time_split(run)
    cpu, other = split.get("thread-cpu"), split.get("thread-noncpu")
    share = (
        cpu / (cpu + other)
        if cpu is not None and other is not None and cpu + other
        else None
    )
    if not duration:
        return HostLoad(cpu_share=share)
    waited: dict[str | None, float] = {}
    crowded: dict[str | None, float] = {}
    rows = run.event_rows("host-load")
    # A process that measured the run's whole window (the scheduler's, from
    # its start to its end) is read by that alone: its seconds' samples
    # would count the same time twice.
    samples = [(s, sample) for *_, s, d in rows if (sample := HostSample.from_data(d))]
    whole = {s for s, sample in samples if sample.run}
    for sampler, sample in samples:
        if sampler in whole and not sample.run:
            continue
        over = 0.0
        if sample.runnable is not None:
            over = max(0.0, sample.runnable / sample.cores - 1.0)
        waiting = sample.waiting
        if waiting is None:  # no pressure information
            waiting = over / (1.0 + over)
        waited[sampler] = waited.get(sampler, 0.0) + waiting * sample.seconds
        crowded[sampler] = crowded.get(sampler, 0.0) + over * sample.seconds
    if not waited:
        return HostLoad(cpu_share=share)
    busiest = max(waited, key=lambda sampler: waited[sampler])
    return HostLoad(
        min(1.0, waited[busiest] / duration), 1.0 + crowded[busiest] / duration, share
    )

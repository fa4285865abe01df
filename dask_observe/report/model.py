"""The figures a report shows, computed once from a run's telemetry.

Everything here is aggregated: the size of what a report draws depends on the
number of workers, threads and prefixes, never on the number of tasks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dask_observe.analysis import few, figures
from dask_observe.analysis.native import stored
from dask_observe.analysis.series import last_by
from dask_observe.analysis.trees import profile_table
from dask_observe.capture.events import WorkerRemoved
from dask_observe.diagnose import flag_list
from dask_observe.report import standing, tasks
from dask_observe.report.taskstream import StreamBins
from dask_observe.units import text_or_none

if TYPE_CHECKING:
    import pandas as pd

    from dask_observe.diagnose import Flag
    from dask_observe.store import RunData

#: The memory series of a worker, as the capture names the metrics.
MEMORY_METRICS = (
    "memory_managed",
    "memory_unmanaged",
    "memory_spilled",
    "memory_limit",
)

#: The columns of a worker's memory series (``ReportData.memory``).
MEMORY_COLUMNS = ("time", "managed", "unmanaged", "spilled", "limit")

#: Log lines shown beside each failed task.
FAILURE_LOG_LINES = 8


@dataclass
class Failure:
    """A task that failed, what it raised, and what its worker said last."""

    key: str
    prefix: str
    worker: str | None
    time: float
    exception: str
    traceback: str
    logs: list[tuple[float, str, str, str]]  # time, level, worker, message
    #: For a task that died with its worker: how long it ran, and how far its
    #: worker's memory rose meanwhile (``figures.killed_task_story``).
    story: str | None = None


@dataclass
class ReportData:
    """A run's telemetry, reduced to what a report shows."""

    summary: dict[str, Any]
    start: float
    end: float
    #: The task stream: at most ``stream.EXACT_LIMIT`` tasks' rows (prefix,
    #: lane, start, stop: seconds since ``start``; the phase seconds), else
    #: their seconds by lane, colour and pixel column.
    stream: pd.DataFrame | StreamBins
    #: One row a prefix: count, total_s, mean_s, nbytes, errors; slowest first.
    prefixes: pd.DataFrame
    #: Seconds of task time in each phase of ``figures.PHASE_COLUMNS``.
    phases: dict[str, float]
    #: Thread seconds by activity, as the workers measured them (fine
    #: performance metrics), largest first; empty when none were read.
    time_split: dict[str, float]
    workers: int
    threads: int
    peak_memory: float | None
    #: The most bytes on disk beyond what was there as the run began.
    peak_spilled: float | None
    #: Per worker ("" for the cluster): time (seconds since start), managed,
    #: unmanaged, spilled, limit.
    memory: dict[str, pd.DataFrame]
    #: Per worker: its process memory as the worker sampled it (fast, every
    #: ``memory-interval``) and as its nanny measured it when it restarted the
    #: worker for memory; for "" the cluster's, second by second
    #: (``figures.process_memory``, whose peak is ``peak_memory``): time
    #: (seconds since start), rss.
    process: dict[str, pd.DataFrame]
    #: distributed's statistical profile of the run, a row a function (see
    #: ``Run.profile``); empty for runs too short to be profiled.
    profile: pd.DataFrame
    #: The same profile as trees, by prefix ("" for the whole run; see
    #: ``Run.profile_trees``).
    profile_trees: dict[str, Any]
    #: Data moved between workers, a row a sending and receiving pair (see
    #: ``figures.transfer_summary``), and a row a type of data.
    transfer_pairs: pd.DataFrame
    transfer_types: pd.DataFrame
    #: Workers that left during the run, with the reason the scheduler gave.
    workers_removed: dict[str, str]
    failures: list[Failure]
    flags: list[Flag]
    #: Warning and error lines: time, level, source, worker, logger, message.
    alerts: pd.DataFrame
    n_warnings: int
    n_errors: int
    dropped: int
    notes: list[str] = field(default_factory=list)
    #: Bytes P2P shuffles wrote to disk (``shuffle_disk``): not spilling.
    shuffle_written: float = 0.0
    #: Where the run stood when it was stopped with tasks running (``standing``).
    stopped: standing.Stopped | None = None
    #: What py-spy recorded of a run recorded with ``native=True`` (see
    #: ``Run.native_profile``), else None.
    native: dict[str, Any] | None = None

    @property
    def duration(self) -> float:
        return max(self.end - self.start, 1e-9)


def _memory_series(run: RunData, start: float) -> dict[str, pd.DataFrame]:
    samples = run.metric_rows(MEMORY_METRICS)
    if len(samples) <= few.FEW_ROWS:
        return {
            worker: few.frame(series, MEMORY_COLUMNS)
            for worker, series in few.memory_series(samples, start).items()
        }
    metrics = run.metric_frame(samples, epoch=True)
    if metrics.empty:
        return {}
    metrics["worker"] = metrics["worker"].fillna("")
    metrics["time"] = metrics["time"] - start
    wide = last_by(metrics, ["worker", "time"], "name").reset_index()
    for name in MEMORY_METRICS:
        if name not in wide:
            wide[name] = 0.0
    wide = wide.rename(columns={n: n.removeprefix("memory_") for n in MEMORY_METRICS})
    columns = list(MEMORY_COLUMNS)
    return {
        str(worker): group[columns].fillna(0.0).reset_index(drop=True)
        for worker, group in wide.groupby("worker", sort=True)
    }


def _failures(
    run: RunData, failed: pd.DataFrame, start: float, memory: pd.DataFrame
) -> list[Failure]:
    """The failed tasks (``tasks.TaskFigures.failed``); ``memory`` is
    ``figures.fast_memory(run)``."""
    failures = []
    for row in failed.to_dict("records"):
        ended = start + float(row["ended"])
        worker = text_or_none(row["worker"])
        # What the task itself said (printed, warned, logged); else the
        # worker's own last words; for a task whose worker is not known (it
        # died under it), the cluster's last warnings before the failure.
        logs = run.logs(task=str(row["key"]), until=ended + 1.0, epoch=True)
        if logs.empty:
            logs = run.logs(
                worker=worker,
                until=ended + 1.0,
                level=None if worker else "warning",
                epoch=True,
            )
        logs = logs.tail(FAILURE_LOG_LINES)
        failures.append(
            Failure(
                key=str(row["key"]),
                prefix=str(row["prefix"]),
                worker=worker,
                time=ended - start,
                exception=str(row["exception"] or "unknown error"),
                story=figures.killed_task_story(run, str(row["key"]), ended, memory),
                traceback=str(row["traceback"] or ""),
                logs=[
                    (float(t) - start, str(lv), text_or_none(w) or str(s), str(m))
                    for t, lv, s, w, m in zip(
                        logs["time"],
                        logs["level"],
                        logs["source"],
                        logs["worker"],
                        logs["message"],
                        strict=True,
                    )
                ],
            )
        )
    return failures


def _removed_workers(run: RunData) -> dict[str, str]:
    return {
        worker: WorkerRemoved.from_data(data).stimulus_id
        for _, _, worker, data in run.event_rows("worker-removed")
        if worker
    }


def collect(run: RunData, flags: list[Flag] | None = None) -> ReportData:
    """Everything a report of ``run`` shows, read from the store once;
    ``flags`` where they were judged already."""
    record = run.summary()
    start = run.started
    end = run.window_end()
    ran = tasks.read(run, start, tasks.report_duration(run))
    workers = run.cluster_metric_max("workers")
    threads = run.cluster_metric_max("nthreads")
    alerts = run.logs(level="warning", epoch=True)
    routine = [
        figures.is_routine(logger, message)
        for logger, message in zip(alerts["logger"], alerts["message"], strict=True)
    ]
    alerts = alerts.loc[[not r for r in routine]].copy()  # rows, even none
    alerts["time"] = alerts["time"] - start
    levels = alerts["level"]
    transfers = run.transfers(epoch=True)
    fast = figures.fast_memory(run)  # epoch times: peak, killed tasks, charts
    cluster_rss = figures.process_memory(run, fast)
    trees = run.profile_trees()
    return ReportData(
        summary=record,
        start=start,
        end=end,
        stream=ran.stream,
        prefixes=ran.prefixes,
        # Stalls are shown where there were some; the other phases always.
        phases={p: t for p, t in ran.phases.items() if t or p != "stall"},
        time_split=figures.time_split(run),
        workers=int(workers) if workers else ran.workers,
        threads=int(threads) if threads else ran.threads,
        peak_memory=float(cluster_rss["rss"].max()) if len(cluster_rss) else None,
        peak_spilled=run.cluster_metric_rise("memory_spilled"),
        memory=_memory_series(run, start),
        process={
            "": cluster_rss.assign(time=cluster_rss["time"] - start),
            **{
                str(worker): group[["time", "rss"]].reset_index(drop=True)
                for worker, group in fast.assign(time=fast["time"] - start).groupby(
                    "worker", sort=True
                )
            },
        },
        profile=profile_table(trees),
        profile_trees=trees,
        transfer_pairs=figures.transfer_summary(transfers, ["peer", "worker"]),
        transfer_types=figures.transfer_summary(transfers, ["type"]),
        workers_removed=_removed_workers(run),
        failures=_failures(run, ran.failed, start, fast),
        flags=flag_list(run) if flags is None else flags,
        alerts=alerts,
        n_warnings=int((levels == "WARNING").sum()),
        n_errors=int(levels.isin(["ERROR", "CRITICAL"]).sum()),
        dropped=int(record.get("dropped", 0)),
        shuffle_written=figures.shuffle_disk(run)["written"],
        stopped=standing.stopped_state(run),
        native=stored(run),
    )

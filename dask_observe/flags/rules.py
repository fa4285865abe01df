"""The rules that raise flags, one function a kind.

Each rule reads what it needs through a :class:`Context` (which reads each kind of
telemetry from the store at most once) and returns the flags it raises: a plain
sentence, the evidence it rests on, and one line of advice.
"""

from __future__ import annotations

import math
import re
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from dask_observe import config
from dask_observe.figures import fast_memory, killed_task_story
from dask_observe.units import (
    format_bytes,
    format_seconds,
    parse_seconds,
    text_or_none,
)

if TYPE_CHECKING:
    import pandas as pd

    from dask_observe.store import Run

FLAG_KINDS = (
    "memory-pressure",
    "memory-restart",
    "killed-worker",
    "worker-lost",
    "spilling",
    "unmanaged-memory",
    "event-loop-blocked",
    "gil-contention",
    "tiny-tasks",
    "task-errors",
    "load-imbalance",
    "high-transfer",
)

#: Evidence a flag carries at most; the message counts the rest.
MAX_EVIDENCE = 10


@dataclass
class Flag:
    kind: str
    severity: str  # info | warning | error
    time: float
    worker: str | None
    message: str
    advice: str
    evidence: list[dict[str, Any]] = field(default_factory=list)


def _evidence(time: float, worker: str | None, text: str) -> dict[str, Any]:
    return {"time": time, "worker": text_or_none(worker), "text": text}


def _workers(names: Iterable[object]) -> str | None:
    # Rows without a worker hold None or NaN, depending on the column's dtype.
    unique = sorted({n for n in names if isinstance(n, str) and n})
    return ", ".join(unique) if unique else None


def _setting(name: str, default: float) -> float:
    value = config.get(f"flags.{name}")
    if value is None:
        return default
    if isinstance(value, str):
        return parse_seconds(value)
    return float(value)


class Context:
    """A run's telemetry as the rules read it: times in seconds since the epoch."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.memory = config.memory_fractions()

    @cached_property
    def tasks(self) -> pd.DataFrame:
        return self.run.tasks(epoch=True)

    @cached_property
    def finished(self) -> pd.DataFrame:
        tasks = self.tasks
        return tasks[tasks["status"] == "memory"]

    def logs(self, contains: str) -> list[tuple[float, str | None, str]]:
        """(time, worker, message) of the lines containing ``contains``."""
        frame = self.run.logs(contains=contains, epoch=True)
        return [
            (float(t), w if isinstance(w, str) else None, str(m))
            for t, w, m in zip(
                frame["time"], frame["worker"], frame["message"], strict=True
            )
        ]

    @cached_property
    def fine(self) -> pd.DataFrame:
        return self.run.fine_metrics()

    def fine_totals(self, activities: tuple[str, ...]) -> dict[tuple[str, str], float]:
        """(activity, unit) -> value of the run's fine performance metrics,
        summed over contexts and prefixes."""
        fine = self.fine[self.fine["activity"].isin(activities)]
        totals = fine.groupby(["activity", "unit"], as_index=False)["value"].sum()
        return {
            (str(a), str(u)): float(v)
            for a, u, v in zip(
                totals["activity"], totals["unit"], totals["value"], strict=True
            )
        }

    def metric(self, name: str) -> pd.DataFrame:
        """Per-worker samples of one metric: time, worker, value."""
        frame = self.run.metrics(name, epoch=True)
        return frame[frame["worker"].notna()]

    @cached_property
    def fast_memory(self) -> pd.DataFrame:
        """Each worker's own fast RSS samples and its nanny's at restarts
        (``figures.fast_memory``), read once for every killed task."""
        return fast_memory(self.run)

    @cached_property
    def limits(self) -> dict[str, float]:
        """Each worker's memory limit (the last sample)."""
        frame = self.metric("memory_limit")
        return {
            str(w): float(v)
            for w, v in zip(frame["worker"], frame["value"], strict=True)
        }

    @cached_property
    def removals(self) -> list[tuple[float, str, str]]:
        """(time, worker, stimulus id) of the workers the scheduler removed."""
        events = self.run.events("worker-removed", epoch=True)
        return [
            (float(t), w, str(d.get("stimulus_id", "")))
            for t, worker, d in zip(
                events["time"], events["worker"], events["data"], strict=True
            )
            if (w := text_or_none(worker))
        ]

    @cached_property
    def pauses(self) -> list[tuple[float, str]]:
        """(time, worker) of each change of a worker's status to paused."""
        events = self.run.events(epoch=True)
        return [
            (float(t), str(kind))
            for t, kind, d in zip(
                events["time"], events["kind"], events["data"], strict=True
            )
            if isinstance(d, dict)
            and d.get("action") == "worker-status-change"
            and d.get("status") == "paused"
        ]

    @cached_property
    def memory_restarts(self) -> list[tuple[float, str, dict[str, Any]]]:
        """(time, worker, event) of each nanny memory restart: pid and rss."""
        events = self.run.events("worker-restart-memory", epoch=True)
        return [
            (float(t), str(d.get("worker") or text_or_none(w)), d)
            for t, w, d in zip(
                events["time"], events["worker"], events["data"], strict=True
            )
        ]

    @cached_property
    def deaths(self) -> dict[str, tuple[float, str, str]]:
        """Why each dead worker died: worker -> (time, cause, evidence line).

        The first that applies: its nanny restarted it for memory, the nanny saw
        it killed by a signal or exit with a code, the scheduler stopped hearing
        its heartbeat, or its connection dropped.
        """
        causes: dict[str, tuple[float, str, str]] = {}
        for t, worker, event in self.memory_restarts:
            rss = event.get("rss")
            limit = self.limits.get(worker)
            against = (
                f" (RSS {format_bytes(rss)} of a {format_bytes(limit)} limit)"
                if isinstance(rss, int | float) and limit
                else ""
            )
            causes[worker] = (
                t,
                f"its nanny restarted it for exceeding "
                f"{self.memory['terminate']:.0%} of its memory limit{against}",
                f"worker-restart-memory {worker} rss={rss}",
            )
        for t, named, message in self.logs("Worker process "):
            if not named or named in causes:
                continue
            killed = re.search(r"was killed by signal (\d+)", message)
            exited = re.search(r"exited with status (\d+)", message)
            if killed:
                causes[named] = (t, f"it was killed by {_signal(killed[1])}", message)
            elif exited:
                causes[named] = (
                    t,
                    f"its process exited with code {exited[1]}",
                    message,
                )
        for t, worker, stimulus in self.removals:
            if worker in causes or _planned(stimulus):
                continue
            if stimulus.startswith("check-worker-ttl"):
                cause = "the scheduler stopped receiving its heartbeat"
            else:
                cause = "its connection to the scheduler was lost"
            causes[worker] = (t, cause, f"worker-removed {worker} ({stimulus})")
        return causes

    @cached_property
    def duration(self) -> float:
        return float(self.run.window_end() - self.run.started)


def _signal(number: str) -> str:
    try:
        return f"signal {number} ({signal.Signals(int(number)).name})"
    except ValueError:
        return f"signal {number}"


def _planned(stimulus: str) -> bool:
    return any(word in stimulus for word in ("close", "retire", "restart"))


# -- memory --------------------------------------------------------------------


def memory_pressure(ctx: Context) -> list[Flag]:
    """Workers paused for memory: their "Pausing worker" lines, and the status
    changes the scheduler logged (which survive a worker that dies right after)."""
    seen: dict[str, list[dict[str, Any]]] = {}
    for t, worker, message in ctx.logs("Pausing worker"):
        seen.setdefault(worker or "?", []).append(_evidence(t, worker, message))
    for t, worker in ctx.pauses:
        if worker not in seen:  # the line was lost with its worker
            seen[worker] = [_evidence(t, worker, "status changed to paused")]
    return [
        Flag(
            "memory-pressure",
            "warning",
            evidence[0]["time"],
            worker,
            f"Worker {worker} was paused {len(evidence)} time(s): its memory "
            f"passed {ctx.memory['pause']:.0%} of its limit, so it stopped "
            "starting tasks until memory fell again.",
            "Give workers more memory or fewer threads, or use smaller chunks so "
            "that fewer intermediate results are held at once.",
            evidence[:MAX_EVIDENCE],
        )
        for worker, evidence in seen.items()
    ]


def memory_restart(ctx: Context) -> list[Flag]:
    flags = []
    for t, worker, event in ctx.memory_restarts:
        _, cause, _ = ctx.deaths.get(worker, (t, "restarted for memory", ""))
        lines = [
            _evidence(lt, lw, m)
            for lt, lw, m in ctx.logs("memory budget")
            if lw == worker or worker in m
        ]
        flags.append(
            Flag(
                "memory-restart",
                "error",
                t,
                worker,
                f"Worker {worker} was restarted: {cause}. Its tasks were lost and "
                "rescheduled.",
                "Find the task that grew (the report's memory timeline), give workers "
                "more memory, or split the work into smaller chunks.",
                lines[:MAX_EVIDENCE]
                or [_evidence(t, worker, f"rss={event.get('rss')}")],
            )
        )
    return flags


def killed_worker(ctx: Context) -> list[Flag]:
    tasks = ctx.tasks
    killed = tasks[
        (tasks["status"] == "erred")
        & tasks["exception"].fillna("").str.contains("KilledWorker|workers died")
    ]
    flags = []
    for row in killed.to_dict("records"):
        text = str(row["exception"])
        found = re.search(
            r"The last worker that attempt\w* to run the task was (\S+?)\.?\s", text
        )
        last = found[1] if found else None
        # The worker that ran it last is the one whose death ended it; failing
        # that, any worker that died in the run (they all ran it once).
        died = ctx.deaths.get(last) if last else None
        if died is None and ctx.deaths:
            last, died = next(iter(ctx.deaths.items()))
        when = float(row["ended"])
        if died is not None:
            _, cause, line = died
            message = (
                f"Task {row['key']!r} failed with KilledWorker: every worker that ran "
                f"it died. The last, {last}, died because {cause}."
            )
            story = killed_task_story(ctx.run, str(row["key"]), when, ctx.fast_memory)
            if story:
                message += " " + story
            evidence = [_evidence(died[0], last, line)]
        else:
            message = (
                f"Task {row['key']!r} failed with KilledWorker: the workers that ran "
                "it died, and the recording holds no cause."
            )
            evidence = []
        evidence.append(_evidence(when, None, text.splitlines()[0] if text else ""))
        flags.append(
            Flag(
                "killed-worker",
                "error",
                when,
                last,
                message,
                _killed_advice(died[1] if died else ""),
                evidence,
            )
        )
    return flags


def _killed_advice(cause: str) -> str:
    if "memory" in cause:
        return (
            "The task needs more memory than a worker has: give workers more memory, "
            "or make the task's input smaller (smaller chunks or partitions)."
        )
    if "signal" in cause or "exited" in cause:
        return (
            "Something outside Dask ended the worker process (the kernel's OOM "
            "killer, a job scheduler, a crash in native code): check the system log."
        )
    return "Check the network and the worker's logs around the time it vanished."


def worker_lost(ctx: Context) -> list[Flag]:
    restarted = {w for _, w, _ in ctx.memory_restarts}
    flags = []
    for worker, (t, cause, line) in ctx.deaths.items():
        if worker in restarted:  # memory-restart says it already
            continue
        flags.append(
            Flag(
                "worker-lost",
                "error",
                t,
                worker,
                f"Worker {worker} left the cluster during the run: {cause}.",
                _killed_advice(cause),
                [_evidence(t, worker, line)],
            )
        )
    return flags


def spilling(ctx: Context) -> list[Flag]:
    """From the bytes workers report spilled and, exactly, the bytes they wrote
    to disk (fine performance metrics: the run's tasks', and the memory
    monitor's while the run lasted). Not from the tasks'
    "disk-read" / "disk-write" times: distributed records any stall over 5 ms
    around a task's arguments or result under those names, spilled or not (a
    task without dependencies got 139 ms of "disk-read" on a busy machine)."""
    spilled = ctx.metric("memory_spilled")
    spilled = spilled[spilled["value"] > 0]
    disk = ctx.fine_totals(("disk-write", "disk-read"))
    written = disk.get(("disk-write", "bytes"), 0.0)
    if spilled.empty and not written:
        return []
    peaks = spilled.groupby("worker")["value"].max().sort_values(ascending=False)
    first = float(spilled["time"].min()) if len(spilled) else ctx.run.started
    parts = []
    if len(peaks):
        parts.append(
            "peak on disk: "
            + ", ".join(f"{w} {format_bytes(v)}" for w, v in peaks.items())
        )
    if written:
        parts.append(
            f"workers wrote {format_bytes(written)} in "
            f"{format_seconds(disk.get(('disk-write', 'seconds'), 0.0))} and read "
            f"{format_bytes(disk.get(('disk-read', 'bytes'), 0.0))} back in "
            f"{format_seconds(disk.get(('disk-read', 'seconds'), 0.0))}"
        )
    evidence = [
        _evidence(first, str(w), f"spilled {format_bytes(v)} at peak")
        for w, v in list(peaks.items())[:MAX_EVIDENCE]
    ] or [_evidence(first, None, parts[-1])]
    return [
        Flag(
            "spilling",
            "warning",
            first,
            _workers(peaks.index),
            f"Workers spilled data to disk ({'; '.join(parts)}).",
            f"Memory passed {ctx.memory['spill']:.0%} of the limit: give workers more "
            "memory, persist less at once, or use smaller chunks.",
            evidence,
        )
    ]


def unmanaged_memory(ctx: Context) -> list[Flag]:
    """Workers whose unmanaged memory (what the process holds beyond the data
    Dask manages: leaks, libraries' buffers, memory not given back to the OS)
    stayed above the spill threshold, where spilling cannot help. Sampled for
    ``min-time`` at least; a worker restarted for memory is memory-restart's."""
    min_time = _setting("unmanaged-memory.min-time", 2.0)
    fraction = ctx.memory["spill"]
    restarted = {w for _, w, _ in ctx.memory_restarts}
    frame = ctx.metric("memory_unmanaged")
    # distributed's own warning (logged at most every 5 minutes per worker).
    warnings: dict[str, list[dict[str, Any]]] = {}
    for t, w, message in ctx.logs("Unmanaged memory use is high"):
        warnings.setdefault(w or "?", []).append(_evidence(t, w, message))
    flags = []
    for worker, samples in frame.groupby("worker", sort=True):
        limit = ctx.limits.get(str(worker))
        if not limit or worker in restarted:
            continue
        # The longest stretch of consecutive samples above the line: two brief
        # peaks far apart are not memory that stayed.
        samples = samples.sort_values("time")
        above = samples["value"] > fraction * limit
        stretch = (~above).cumsum()[above]
        if stretch.empty:
            continue
        spans = samples[above].groupby(stretch)["time"].agg(["min", "max"])
        longest = (spans["max"] - spans["min"]).idxmax()
        high = samples[above][stretch == longest]
        if high["time"].max() - high["time"].min() < min_time:
            continue
        peak = float(high["value"].max())
        first = float(high["time"].min())
        samples_evidence = [
            _evidence(float(t), str(worker), f"unmanaged {format_bytes(v)}")
            for t, v in zip(high["time"], high["value"], strict=True)
        ]
        flags.append(
            Flag(
                "unmanaged-memory",
                "warning",
                first,
                str(worker),
                f"Worker {worker} held up to {format_bytes(peak)} of unmanaged "
                f"memory ({peak / limit:.0%} of its {format_bytes(limit)} limit) "
                f"for {format_seconds(high['time'].max() - first)}: memory that "
                "is not task results, so spilling could not free it.",
                "Look for a leak (objects kept in globals or caches by your "
                "tasks), large temporaries inside tasks, or memory the OS did not "
                "get back (distributed's docs: 'Memory not released back to the "
                "OS'; MALLOC_TRIM_THRESHOLD_). Restarting workers frees it.",
                (warnings.get(str(worker), []) + samples_evidence)[:MAX_EVIDENCE],
            )
        )
    return flags


# -- the event loop and the GIL -----------------------------------------------


#: A worker's heartbeat metrics describe the seconds before it: samples this soon
#: after a run starts may describe the run before.
_HEARTBEAT_LAG_S = 2.0


def event_loop_blocked(ctx: Context) -> list[Flag]:
    """From distributed's own "Event loop was unresponsive" lines (logged past
    ``distributed.admin.tick.limit``, 3 s by default) and from workers' sampled
    ``event_loop_interval`` over ``observe.flags.event-loop-blocked.tick``."""
    tick = _setting("event-loop-blocked.tick", 1.0)
    evidence = [
        _evidence(t, w, m) for t, w, m in ctx.logs("Event loop was unresponsive")
    ]
    slow = ctx.metric("event_loop_interval")
    slow = slow[
        (slow["value"] > tick) & (slow["time"] > ctx.run.started + _HEARTBEAT_LAG_S)
    ]
    evidence += [
        _evidence(float(t), str(w), f"event loop ticks every {format_seconds(v)}")
        for t, w, v in zip(slow["time"], slow["worker"], slow["value"], strict=True)
    ]
    if not evidence:
        return []
    evidence.sort(key=lambda e: float(e["time"]))
    return [
        Flag(
            "event-loop-blocked",
            "warning",
            evidence[0]["time"],
            _workers(e["worker"] for e in evidence),
            f"The event loop of a worker or the scheduler was unresponsive "
            f"({len(evidence)} observation(s)): something held it (or the GIL) for "
            "seconds, so heartbeats and transfers waited.",
            "Release the GIL in long-running tasks (NumPy or Numba with nogil), "
            "split them up, or avoid moving very large objects between workers.",
            evidence[:MAX_EVIDENCE],
        )
    ]


def gil_contention(ctx: Context) -> list[Flag]:
    """Task threads of one worker fighting over the GIL, where distributed
    measures it (with gilknocker installed).

    Only workers with several threads are judged: in a one-thread worker a task
    holding the GIL shows as contention too, but the remedy (and the flag) is
    event-loop-blocked's. A single high sample is noise; two or more count.
    """
    share = _setting("gil-contention.share", 0.5)
    values = ctx.metric("gil_contention")
    threads = ctx.metric("nthreads").groupby("worker")["value"].max()
    threaded = set(threads[threads > 1].index)
    high = values[(values["value"] > share) & values["worker"].isin(threaded)]
    counts = high.groupby("worker").size()
    high = high[high["worker"].isin(counts[counts >= 2].index)]
    if high.empty:
        return []
    return [
        Flag(
            "gil-contention",
            "warning",
            float(high["time"].min()),
            _workers(high["worker"]),
            f"Task threads waited for the GIL more than {share:.0%} of the time "
            f"({len(high)} samples): they took turns instead of running together.",
            "Use processes rather than threads (more workers, one thread each), or "
            "code that releases the GIL (NumPy, pandas, Numba with nogil).",
            [
                _evidence(float(t), str(w), f"GIL contention {v:.0%}")
                for t, w, v in zip(
                    high["time"], high["worker"], high["value"], strict=True
                )
            ][:MAX_EVIDENCE],
        )
    ]


# -- how the work was cut --------------------------------------------------------


def tiny_tasks(ctx: Context) -> list[Flag]:
    threshold = _setting("tiny-tasks.median", 0.001)
    minimum = _setting("tiny-tasks.min-count", 1000)
    done = ctx.finished
    if len(done) < minimum:
        return []
    median = float(done["duration_s"].median())
    if median >= threshold:
        return []
    # Enough work per task to dwarf ~1 ms of scheduling: about 100 ms, said
    # with one significant digit (nobody resizes chunks by 386x).
    raw = max(2.0, 0.1 / max(median, 1e-6))
    magnitude = 10 ** math.floor(math.log10(raw))
    factor = int(round(raw / magnitude) * magnitude)
    by_prefix = (
        done.groupby("prefix")["duration_s"]
        .agg(["median", "size"])
        .sort_values("size", ascending=False)
        .head(3)
    )
    evidence = [
        _evidence(
            float(done["stop"].min()),
            None,
            f"{prefix}: {int(row['size'])} tasks, "
            f"median {format_seconds(row['median'])}",
        )
        for prefix, row in by_prefix.iterrows()
    ]
    total = float(done["duration_s"].sum())
    evidence.append(
        _evidence(
            float(done["stop"].max()),
            None,
            f"{len(done)} tasks computed for {format_seconds(total)} in all during "
            f"a {format_seconds(ctx.duration)} run",
        )
    )
    return [
        Flag(
            "tiny-tasks",
            "warning",
            float(done["stop"].min()),
            None,
            f"{len(done)} tasks computed for a median of {format_seconds(median)} "
            "each, less than the scheduler spends on a task (about 1 ms): "
            "scheduling, not computing, took most of the time.",
            f"Give each task about {factor}x more work: chunks or partitions "
            f"{factor}x larger, or batch items into fewer tasks.",
            evidence,
        )
    ]


def task_errors(ctx: Context) -> list[Flag]:
    tasks = ctx.tasks
    erred = tasks[tasks["status"] == "erred"]
    exceptions = erred["exception"].fillna("unknown error").astype(str)
    erred = erred[~exceptions.str.contains("KilledWorker|workers died")]
    if erred.empty:
        return []
    kinds = (
        erred["exception"]
        .fillna("unknown error")
        .astype(str)
        .str.extract(r"^\s*(\w+)", expand=False)
        .fillna("error")
        .value_counts()
    )
    listed = ", ".join(f"{kind} ({n})" for kind, n in kinds.items())
    return [
        Flag(
            "task-errors",
            "error",
            float(erred["ended"].min()),
            _workers(erred["worker"]),
            f"{len(erred)} task(s) raised an exception: {listed}.",
            "Read the first failure's traceback in the report (or "
            "run.tasks() where status is 'erred'); later failures often follow it.",
            [
                _evidence(float(t), w if isinstance(w, str) else None, f"{k}: {e}")
                for t, w, k, e in zip(
                    erred["ended"],
                    erred["worker"],
                    erred["key"],
                    erred["exception"],
                    strict=True,
                )
            ][:MAX_EVIDENCE],
        )
    ]


def load_imbalance(ctx: Context) -> list[Flag]:
    """Workers idle while another had tasks waiting for a thread.

    Judged from the sampled ``tasks_processing`` of each worker: a sample counts
    when one worker holds more tasks than it has threads and another holds none.
    A single long task, or the short tail of a graph, never counts.
    """
    share = _setting("load-imbalance.share", 0.3)
    min_time = _setting("load-imbalance.min-time", 2.0)
    processing = ctx.metric("tasks_processing")
    threads = ctx.metric("nthreads")
    if processing.empty or threads.empty:
        return []
    nthreads = threads.groupby("worker")["value"].max()
    samples = processing.pivot_table(
        index="time", columns="worker", values="value", aggfunc="last"
    )
    busy = samples.gt(nthreads.reindex(samples.columns).fillna(1.0), axis=1)
    idle = samples.eq(0)
    active = samples.gt(0).any(axis=1)
    uneven = busy.any(axis=1) & idle.any(axis=1)
    n_active = int(active.sum())
    n_uneven = int(uneven.sum())
    interval = float(np.median(np.diff(samples.index))) if len(samples) > 1 else 1.0
    if n_uneven * interval < min_time or n_uneven < share * max(n_active, 1):
        return []
    times = samples.index[uneven]
    evidence = []
    for t in times[:MAX_EVIDENCE]:
        row = samples.loc[t]
        waiting = [f"{w} held {int(row[w])} tasks" for w in row.index if busy.loc[t, w]]
        idlers = [str(w) for w in row.index if idle.loc[t, w]]
        evidence.append(
            _evidence(
                float(t),
                _workers(list(busy.columns[busy.loc[t]]) + idlers),
                f"{'; '.join(waiting)} while {', '.join(idlers)} had none",
            )
        )
    overloaded = str(busy[uneven].sum().idxmax())
    idlest = str(idle[uneven].sum().idxmax())
    return [
        Flag(
            "load-imbalance",
            "warning",
            float(times[0]),
            _workers([overloaded, idlest]),
            f"Work was uneven: for about {format_seconds(n_uneven * interval)} "
            f"{overloaded} had tasks waiting for a thread while {idlest} sat idle.",
            "Avoid pinning tasks to workers (workers=, resources=), split large "
            "partitions, and let the scheduler place work (check for one partition "
            "much larger than the others).",
            evidence,
        )
    ]


def high_transfer(ctx: Context) -> list[Flag]:
    share_limit = _setting("high-transfer.share", 0.3)
    min_time = _setting("high-transfer.min-time", 1.0)
    done = ctx.finished
    transfer = float(done["transfer_s"].fillna(0.0).sum())
    compute = float(done["compute_s"].fillna(0.0).sum())
    if transfer < min_time or transfer / (transfer + compute) <= share_limit:
        return []
    by_worker = done.groupby("worker")["transfer_s"].sum().sort_values(ascending=False)
    return [
        Flag(
            "high-transfer",
            "warning",
            float(done["start"].min()),
            _workers(by_worker.index[:3]),
            f"Tasks spent {transfer / (transfer + compute):.0%} of their time "
            f"waiting for data from other workers ({format_seconds(transfer)} "
            f"against {format_seconds(compute)} computing).",
            "Keep related data together (fewer shuffles, rechunk less), make "
            "results smaller before combining them, or use fewer, larger workers.",
            [
                _evidence(
                    float(done["start"].min()), str(w), f"transfer {format_seconds(v)}"
                )
                for w, v in by_worker.head(MAX_EVIDENCE).items()
            ],
        )
    ]


RULES: tuple[Callable[[Context], list[Flag]], ...] = (
    memory_pressure,
    memory_restart,
    killed_worker,
    worker_lost,
    spilling,
    unmanaged_memory,
    event_loop_blocked,
    gil_contention,
    tiny_tasks,
    task_errors,
    load_imbalance,
    high_transfer,
)

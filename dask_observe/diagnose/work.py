"""How the work was cut and placed: tasks too small, tasks that failed, work
spread unevenly, time spent moving data."""

from __future__ import annotations

import math

import numpy as np

from dask_observe.analysis.series import held
from dask_observe.diagnose.base import (
    MAX_EVIDENCE,
    Context,
    Flag,
    evidence,
    rule,
    workers,
)
from dask_observe.units import format_seconds


@rule("tiny-tasks")
def tiny_tasks(ctx: Context) -> list[Flag]:
    """Tasks so small that scheduling them outweighed computing them.

    A prefix is tiny when its tasks compute for less, on average, than the
    scheduler spends on a task (``tiny-tasks.overhead``). The flag needs the
    scheduling of the tiny tasks to have taken longer than all the run's tasks
    computed, and a ``share`` of its wall time: a stencil of many 0.3 ms
    slicing tasks beside 5 s of real compute is well cut.
    """
    overhead = ctx.seconds("tiny-tasks.overhead")
    share = ctx.number("tiny-tasks.share")
    done = ctx.finished
    if len(done) < ctx.number("tiny-tasks.min-count"):
        return []
    by_prefix = done.groupby("prefix")["duration_s"].agg(["mean", "size", "sum"])
    tiny = by_prefix[by_prefix["mean"] < overhead].sort_values("size", ascending=False)
    count = int(tiny["size"].sum())
    scheduling = count * overhead
    computing = float(done["duration_s"].sum())
    wall = max(ctx.duration, 1e-9)
    if (
        count < ctx.number("tiny-tasks.min-count")
        or scheduling <= computing
        or scheduling < share * wall
    ):
        return []
    mean = float(tiny["sum"].sum()) / count
    # Enough work per task to dwarf the scheduling: about 100x it, said with
    # one significant digit (nobody resizes chunks by 386x).
    raw = max(2.0, 100 * overhead / max(mean, 1e-6))
    magnitude = 10 ** math.floor(math.log10(raw))
    factor = int(round(raw / magnitude) * magnitude)
    first = float(done["stop"].min())
    found = [
        evidence(
            first,
            None,
            f"{prefix}: {int(row['size'])} tasks, mean {format_seconds(row['mean'])}",
        )
        for prefix, row in tiny.head(3).iterrows()
    ]
    found.append(
        evidence(
            float(done["stop"].max()),
            None,
            f"{len(done)} tasks computed for {format_seconds(computing)} in all during "
            f"a {format_seconds(wall)} run",
        )
    )
    return [
        Flag(
            "tiny-tasks",
            "warning" if scheduling >= 2 * share * wall else "info",
            first,
            None,
            f"{count} tasks computed for a mean of {format_seconds(mean)} each, "
            f"less than the scheduler spends on a task (about "
            f"{format_seconds(overhead)}): scheduling them took about "
            f"{format_seconds(scheduling)}, more than the "
            f"{format_seconds(computing)} all tasks computed, in a "
            f"{format_seconds(wall)} run.",
            f"Give each task about {factor}x more work: chunks or partitions "
            f"{factor}x larger, or batch items into fewer tasks.",
            found,
        )
    ]


@rule("task-errors")
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
            workers(erred["worker"]),
            f"{len(erred)} task(s) raised an exception: {listed}.",
            "Read the first failure's traceback in the report (or "
            "run.tasks() where status is 'erred'); later failures often follow it.",
            [
                evidence(float(t), w if isinstance(w, str) else None, f"{k}: {e}")
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


@rule("load-imbalance")
def load_imbalance(ctx: Context) -> list[Flag]:
    """Workers idle while another had tasks waiting for a thread.

    Judged from the sampled ``tasks_processing`` of each worker: a sample counts
    when one worker holds more tasks than it has threads and another holds none.
    A single long task, or the short tail of a graph, never counts.
    """
    share = ctx.number("load-imbalance.share")
    min_time = ctx.seconds("load-imbalance.min-time")
    processing = ctx.metric("tasks_processing")
    threads = ctx.metric("nthreads")
    if processing.empty or threads.empty:
        return []
    nthreads = threads.groupby("worker")["value"].max()
    limit = processing["worker"].map(nthreads).fillna(1.0)
    if not (processing["value"] > limit).any():  # no worker ever had a queue
        return []
    # A worker's count is sampled when it changes: held until the next.
    samples = held(processing, ((t, w) for t, w, _ in ctx.removals))
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
    found = []
    for t in times[:MAX_EVIDENCE]:
        row = samples.loc[t]
        waiting = [f"{w} held {int(row[w])} tasks" for w in row.index if busy.loc[t, w]]
        idlers = [str(w) for w in row.index if idle.loc[t, w]]
        found.append(
            evidence(
                float(t),
                workers(list(busy.columns[busy.loc[t]]) + idlers),
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
            workers([overloaded, idlest]),
            f"Work was uneven: for about {format_seconds(n_uneven * interval)} "
            f"{overloaded} had tasks waiting for a thread while {idlest} sat idle.",
            "Avoid pinning tasks to workers (workers=, resources=), split large "
            "partitions, and let the scheduler place work (check for one partition "
            "much larger than the others).",
            found,
        )
    ]


@rule("high-transfer")
def high_transfer(ctx: Context) -> list[Flag]:
    share_limit = ctx.number("high-transfer.share")
    min_time = ctx.seconds("high-transfer.min-time")
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
            workers(by_worker.index[:3]),
            f"Tasks spent {transfer / (transfer + compute):.0%} of their time "
            f"waiting for data from other workers ({format_seconds(transfer)} "
            f"against {format_seconds(compute)} computing).",
            "Keep related data together (fewer shuffles, rechunk less), make "
            "results smaller before combining them, or use fewer, larger workers.",
            [
                evidence(
                    float(done["start"].min()), str(w), f"transfer {format_seconds(v)}"
                )
                for w, v in by_worker.head(MAX_EVIDENCE).items()
            ],
        )
    ]

"""How the work was cut and placed: tasks too small, tasks that failed, work
spread unevenly, time spent moving data."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dask_observe.analysis.series import held
from dask_observe.capture.events import Transfer
from dask_observe.diagnose.base import (
    MAX_EVIDENCE,
    Context,
    Flag,
    evidence,
    rule,
    workers,
)
from dask_observe.diagnose.holdups import busiest
from dask_observe.diagnose.host import HOST_ADVICE, Busy, BusyHosts
from dask_observe.diagnose.lives import WorkerLives
from dask_observe.units import format_bytes, format_seconds

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


def scheduling_gaps(done: pd.DataFrame, idle: float) -> pd.Series:
    """Each finished task's gap on its thread: from the end of the task that
    thread ran before it to its own start, the time it took to hand the
    thread its next task (the scheduler, the worker, the network, a busy
    host: all of a task's cost that is not its compute). NaN for a thread's
    first task and across a gap of ``idle`` or more (a thread with nothing
    to do, not one waiting to be handed work)."""
    frame = done[["worker", "thread", "start", "stop"]].sort_values(
        ["worker", "thread", "start"], kind="stable"
    )
    same = (frame["worker"] == frame["worker"].shift()) & (
        frame["thread"] == frame["thread"].shift()
    )
    gaps = (frame["start"] - frame["stop"].shift()).where(same)
    return gaps.where((gaps >= 0) & (gaps < idle)).reindex(done.index)


@rule("tiny-tasks")
def tiny_tasks(ctx: Context) -> list[Flag]:
    """Tasks so small that handing them to a thread outweighed computing them.

    What a task costs beside its compute is measured in the run: the median
    gap on a thread between one task's end and the next one's start
    (``scheduling_gaps``). On a quiet host that is about a millisecond; on
    one loaded two to three times over its cores, 3-4 ms: a constant
    (``tiny-tasks.overhead``, used only where too few gaps were seen) missed
    the flag exactly where the cost was worst. A prefix is tiny when its tasks
    compute for less, on average, than that cost. The flag needs the gaps
    before the tiny tasks to add up to more than all the run's tasks
    computed, and to a ``share`` of its wall time on the threads that ran
    them: a stencil of many 0.3 ms slicing tasks beside 5 s of real compute is
    well cut.
    """
    share = ctx.number("tiny-tasks.share")
    least = ctx.number("tiny-tasks.min-count")
    done = ctx.finished
    if len(done) < least:
        return []
    gaps = scheduling_gaps(done, ctx.seconds("tiny-tasks.idle"))
    measured = gaps.notna().sum() >= least / 2
    overhead = float(gaps.median()) if measured else ctx.seconds("tiny-tasks.overhead")
    by_prefix = done.groupby("prefix")["duration_s"].agg(["mean", "size", "sum"])
    tiny = by_prefix[by_prefix["mean"] < overhead].sort_values("size", ascending=False)
    count = int(tiny["size"].sum())
    mine = done["prefix"].isin(tiny.index)
    threads = max(1, len(done.loc[mine, ["worker", "thread"]].drop_duplicates()))
    scheduling = float(gaps[mine].sum()) if measured else count * overhead / threads
    computing = float(done["duration_s"].sum())
    wall = max(ctx.duration, 1e-9)
    if count < least or scheduling <= computing or scheduling / threads < share * wall:
        return []
    mean = float(tiny["sum"].sum()) / count
    first = float(done["stop"].min())
    found = [
        evidence(
            first,
            None,
            f"{prefix}: {int(row['size'])} tasks, mean {format_seconds(row['mean'])}",
        )
        for prefix, row in tiny.head(3).iterrows()
    ]
    cost = (
        f"a median {format_seconds(overhead)} between one task's end and the "
        "next one's start on a thread, measured in this run"
        if measured
        else f"about {format_seconds(overhead)}, the usual cost"
    )
    found.append(
        evidence(
            float(done["stop"].max()),
            None,
            f"{len(done)} tasks computed for {format_seconds(computing)} in all during "
            f"a {format_seconds(wall)} run; {count} tiny ones waited "
            f"{format_seconds(scheduling)} in all to start on {threads} thread(s)",
        )
    )
    names = ", ".join(repr(str(p)) for p in tiny.index[:3])
    return [
        Flag(
            "tiny-tasks",
            "warning" if scheduling / threads >= 2 * share * wall else "info",
            first,
            None,
            f"{count} tasks of {names} computed for a mean of "
            f"{format_seconds(mean)} each, less than a task cost beside its "
            f"compute ({cost}): handing them to threads took about "
            f"{format_seconds(scheduling)} of thread time, more than the "
            f"{format_seconds(computing)} all tasks computed, in a "
            f"{format_seconds(wall)} run.",
            _growth_advice(names, 100 * overhead / max(mean, 1e-6), done),
            found,
        )
    ]


def _one_digit(x: float, *, down: bool = False) -> int:
    """``x`` with one significant digit (nobody resizes chunks by 386x),
    rounded ``down`` where more would pass a bound."""
    magnitude = 10 ** math.floor(math.log10(x))
    digit = math.floor(x / magnitude) if down else round(x / magnitude)
    return int(digit * magnitude)


def _growth_advice(names: str, wanted: float, done: pd.DataFrame) -> str:
    """How much more work each tiny task wants: ``wanted`` times (about 100x
    its cost, to dwarf it), but no more than chunks of dask's own chunk size
    (``array.chunk-size``, 128 MiB) allow. The run's chunks are its largest
    typical result (a prefix's median): a diff's slivers of 8 KB beside
    chunks of 8 MB were told to grow 900x, chunks of 7 GB."""
    import dask.config
    from dask.utils import parse_bytes as dask_bytes

    limit = float(dask_bytes(dask.config.get("array.chunk-size", "128MiB")))
    sizes = done.groupby("prefix")["nbytes"].median().fillna(0.0)
    chunk = float(sizes.max()) if len(sizes) else 0.0
    room = limit / chunk if chunk > 0 else math.inf
    if room < 2:
        return (
            f"The run's chunks are {format_bytes(chunk)} already, about dask's "
            f"chunk size: {names} are the small pieces of work cut from them (a "
            "rechunk, an overlap, a slice across chunks). Fewer come from "
            "rechunking once to the shape the computation needs, or from an "
            "operation that cuts across fewer chunks."
        )
    if wanted <= room:
        factor = _one_digit(max(2.0, wanted))
        if math.isfinite(room):  # rounded, but never past the room there is
            factor = min(factor, _one_digit(room, down=True))
        return (
            f"Give each task of {names} about {factor}x more work: chunks or "
            f"partitions {factor}x larger, or batch items into fewer tasks."
        )
    factor = _one_digit(room, down=True)
    return (
        f"Give each task of {names} about {factor}x more work: chunks or "
        f"partitions {factor}x larger (about {format_bytes(chunk * factor)}, "
        f"as large as dask's chunk size; the run's are {format_bytes(chunk)}), "
        "or batch items into fewer tasks."
    )


@rule("task-errors")
def task_errors(ctx: Context) -> list[Flag]:
    if not ctx.any_erred:
        return []
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
    import numpy as np

    share = ctx.number("load-imbalance.share")
    min_time = ctx.seconds("load-imbalance.min-time")
    nthreads_of = ctx.highest_by_worker("nthreads")
    if not nthreads_of or not any(
        value > nthreads_of.get(worker, 1.0)
        for _, worker, _, value in ctx.metric_rows("tasks_processing")
    ):  # most runs: no worker ever had a queue
        return []
    processing = ctx.metric("tasks_processing")
    nthreads = ctx.metric("nthreads").groupby("worker")["value"].max()
    # A worker's count is sampled when it changes: held until the next.
    samples = held(processing, ((t, w) for t, w, _ in WorkerLives.of(ctx).removals))
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
    """Tasks that spent much of their time waiting for data from other workers,
    where that data was large enough to be the cause (``min-bytes`` moved in
    the run, from the workers' own transfer logs): time spent fetching a few
    KiB is the latency of handing out many small tasks or of a busy host, not
    data in the wrong place (a notebook's 10,717 tasks of 0.3 ms that moved
    71 KiB were told to "keep related data together").

    Moving data takes CPU (serialising, copying, the event loop handling the
    messages): a host oversubscribed while a task waited for its data
    stretches that wait. A task's wait (the ``transfer_s`` before its compute
    started) that overlapped a busy second of its worker's host is the
    host's, as gil-contention's samples are: where the waits on quiet hosts
    alone would not make the flag, it is told with advice about the host (a
    clean array workload's 61 MiB took 1.12 s beside the suite's other tests
    on two cores, and was told to keep related data together).
    """
    done = ctx.finished
    waits = done["transfer_s"].fillna(0.0)
    transfer = float(waits.sum())
    compute = float(done["compute_s"].fillna(0.0).sum())
    if not _transfer_bound(ctx, transfer, compute):
        return []
    logged = ctx.events("transfer")
    moved = sum(
        said.bytes for *_, d in logged if (said := Transfer.from_data(d)) is not None
    )
    if logged and moved < ctx.nbytes("high-transfer.min-bytes"):
        return []
    hosts = BusyHosts.of(ctx)
    names = done["worker"].to_numpy()
    until = done["start"].to_numpy(dtype=float)
    since = until - waits.to_numpy()
    at_busy = (waits > 0).to_numpy() & hosts.overlapping(names, since, until)
    quiet = float(waits[~at_busy].sum())
    by_worker = done.groupby("worker")["transfer_s"].sum().sort_values(ascending=False)
    by_prefix = done.groupby("prefix")["transfer_s"].sum().sort_values(ascending=False)
    waited = ", ".join(
        f"{prefix!r} {format_seconds(seconds)}"
        for prefix, seconds in by_prefix.head(3).items()
        if seconds > 0
    )
    size = f" for {format_bytes(moved)} moved" if logged else ""
    message = (
        f"Tasks spent {transfer / (transfer + compute):.0%} of their time "
        f"waiting for data from other workers ({format_seconds(transfer)}"
        f"{size}, against {format_seconds(compute)} computing); most of it "
        f"the tasks of {waited}."
    )
    found = [
        evidence(float(done["start"].min()), str(w), f"transfer {format_seconds(v)}")
        for w, v in by_worker.head(MAX_EVIDENCE).items()
    ]
    advice = (
        "Keep related data together (fewer shuffles, rechunk less), make "
        "results smaller before combining them, or use fewer, larger workers."
    )
    if not _transfer_bound(ctx, quiet, compute):
        busy = _busy_during(hosts, names[at_busy], since[at_busy], until[at_busy])
        how = f" ({busiest(busy)})" if busy else ""
        message += (
            f" {format_seconds(transfer - quiet)} of it while their host was "
            f"oversubscribed{how}: moving data takes CPU "
            "(serialising, copying, the event loop that carries it), which the "
            "host gave to other work. A busy host, not where the data lives, is "
            "the likely cause."
        )
        advice = HOST_ADVICE
        found = (hosts.evidence(busy) + found)[:MAX_EVIDENCE]
    return [
        Flag(
            "high-transfer",
            "warning",
            float(done["start"].min()),
            workers(by_worker.index[:3]),
            message,
            advice,
            found,
        )
    ]


def _transfer_bound(ctx: Context, transfer: float, compute: float) -> bool:
    """Whether ``transfer`` seconds of waiting for data, beside ``compute``
    seconds computing, are enough for the flag (``min-time`` and ``share``)."""
    if transfer < ctx.seconds("high-transfer.min-time"):
        return False
    return transfer / (transfer + compute) > ctx.number("high-transfer.share")


def _busy_during(
    hosts: BusyHosts, workers: np.ndarray, since: np.ndarray, until: np.ndarray
) -> list[Busy]:
    """The busy seconds that overlapped the longest of these waits for data,
    ``workers[i]``'s from ``since[i]`` to ``until[i]`` (the flag's evidence
    needs a few, not every task's)."""
    found = []
    for i in (until - since).argsort()[::-1][:MAX_EVIDENCE]:
        worker = workers[i]
        named = worker if isinstance(worker, str) and worker else None
        second = hosts.during(named, float(since[i]), float(until[i]))
        if second is not None:
            found.append(second)
    return found


LARGE_GRAPH_ADVICE = (
    "Scatter the object first (client.scatter) and pass its future, or load the "
    "data inside the tasks (dask.array, dask.dataframe readers) instead of "
    "embedding it in the graph."
)


@rule("large-graph")
def large_graph(ctx: Context) -> list[Flag]:
    """distributed warned, as the run's client sent it, that a task graph was
    large: an object embedded in it went through the scheduler, pickled."""
    flags = []
    for t, _, _, data in ctx.run.event_rows("large-graph"):
        size = data.get("bytes")
        said = str(data.get("size") or "")
        shown = format_bytes(float(size)) if isinstance(size, (int, float)) else said
        done = ctx.finished
        compute = float(done["compute_s"].fillna(0.0).sum()) if len(done) else 0.0
        tasks = f"{len(done):,} task{'' if len(done) == 1 else 's'}"
        against = (
            f"; the run's {tasks} computed for {format_seconds(compute)} in all"
            if len(done)
            else ""
        )
        flags.append(
            Flag(
                "large-graph",
                "warning",
                t,
                None,
                f"The client sent a task graph of {shown} to the scheduler "
                f'(distributed warned "Sending large graph of size {said}"): a large '
                "object embedded in it (an array or DataFrame captured by a task's "
                "function or passed as an argument) is pickled into the graph and "
                f"shipped through the scheduler{against}.",
                LARGE_GRAPH_ADVICE,
                [evidence(t, None, str(data.get("message") or ""))],
            )
        )
    return flags

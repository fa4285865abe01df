"""Memory: workers paused, restarted by their nanny, spilling, or holding
memory that is not Dask's."""

from __future__ import annotations

from typing import Any

from dask_observe.diagnose.base import (
    MAX_EVIDENCE,
    Context,
    Flag,
    evidence,
    rule,
    workers,
)
from dask_observe.diagnose.holdups import Holdups, Stall
from dask_observe.diagnose.lives import WorkerLives
from dask_observe.units import format_bytes, format_seconds

#: distributed's fine-metrics context of P2P shuffles: their disk is where
#: shuffles keep their shards by design, not spilling.
SHUFFLE_CONTEXT = "p2p"


@rule("memory-pressure")
def memory_pressure(ctx: Context) -> list[Flag]:
    """Workers paused for memory: their "Pausing worker" lines, and the status
    changes the scheduler logged (which survive a worker that dies right after).
    With the stalls of their event loops in the collections a worker runs as
    it pauses and while paused (``Stalls.paused``): the pause's, not
    event-loop-blocked's."""
    seen: dict[str, list[dict[str, Any]]] = {}
    for t, worker, message in ctx.logs("Pausing worker"):
        seen.setdefault(worker or "?", []).append(evidence(t, worker, message))
    for t, worker in WorkerLives.of(ctx).pauses:
        if worker not in seen:  # the line was lost with its worker
            seen[worker] = [evidence(t, worker, "status changed to paused")]
    stalled: dict[str, list[Stall]] = {}
    for stall, _ in Holdups.of(ctx).stalls.paused if seen else []:
        stalled.setdefault(str(stall.worker), []).append(stall)
    flags = []
    for worker, found in seen.items():
        stalls = stalled.get(worker, [])
        also = (
            f" Its event loop stalled {len(stalls)} time(s) meanwhile, up to "
            f"{format_seconds(max(s for _, _, s, _ in stalls))}, in the full "
            "garbage collections a worker runs on its event loop to free memory "
            "as it pauses and while paused, so heartbeats and transfers waited."
            if stalls
            else ""
        )
        told = [evidence(t, w, text) for t, w, _, text in stalls]
        flags.append(
            Flag(
                "memory-pressure",
                "warning",
                found[0]["time"],
                worker,
                f"Worker {worker} was paused {len(found)} time(s): its memory "
                f"passed {ctx.fraction('pause', worker):.0%} of its limit, so it "
                f"stopped starting tasks until memory fell again.{also}",
                "Give workers more memory or fewer threads, or use smaller chunks "
                "so that fewer intermediate results are held at once.",
                sorted(found + told, key=lambda e: e["time"])[:MAX_EVIDENCE],
            )
        )
    return flags


@rule("memory-restart")
def memory_restart(ctx: Context) -> list[Flag]:
    flags = []
    lives = WorkerLives.of(ctx)
    for t, worker, event in lives.memory_restarts:
        _, cause, _ = lives.deaths.get(worker, (t, "restarted for memory", ""))
        lines = [
            evidence(lt, lw, m)
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
                lines[:MAX_EVIDENCE] or [evidence(t, worker, f"rss={event.rss}")],
            )
        )
    return flags


@rule("spilling")
def spilling(ctx: Context) -> list[Flag]:
    """From the bytes workers report spilled and, exactly, the bytes they wrote
    to disk (fine performance metrics: the run's tasks', and the memory
    monitor's while the run lasted; a P2P shuffle's are its own, not spilling).
    Not from the tasks' "disk-read" / "disk-write" times: distributed records
    any stall over 5 ms around a task's arguments or result under those names,
    spilled or not (a task without dependencies got 139 ms of "disk-read" on a
    busy machine). A warning from ``spilling.warning-bytes`` written or
    ``spilling.warning-time`` on disk, or where a worker's event loop stalled
    while it spilled (``event-loop-blocked.tick``: heartbeats and transfers
    waited for the disk); information below."""
    # A gauge of what is on disk now: what a run before spilled and its
    # client still holds stays there. A worker's spilling in this run is the
    # rise above where its gauge stood before the run.
    disk = ctx.fine_totals(("disk-write", "disk-read"), exclude=(SHUFFLE_CONTEXT,))
    written = disk.get(("disk-write", "bytes"), 0.0)
    stalls = [stall for stall, _ in Holdups.of(ctx).stalls.spilled]
    ever = any(value > 0 for *_, value in ctx.metric_rows("memory_spilled"))
    if not ever and not written and not stalls:
        return []  # most runs: nothing on disk at all, no rise to read
    spilled = ctx.metric("memory_spilled")
    if len(spilled):
        before = ctx.run.metric_before("memory_spilled")
        start = spilled["worker"].map(lambda w: before.get(w, 0.0))
        spilled = spilled.assign(value=spilled["value"] - start)
    spilled = spilled[spilled["value"] > 0]
    if spilled.empty and not written and not stalls:
        return []
    peaks = spilled.groupby("worker")["value"].max().sort_values(ascending=False)
    seen = [float(spilled["time"].min())] if len(spilled) else []
    first = min([*seen, *(t for t, _, _, _ in stalls)], default=ctx.run.started)
    on_disk = disk.get(("disk-write", "seconds"), 0.0) + disk.get(
        ("disk-read", "seconds"), 0.0
    )
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
    if stalls:
        seconds = [s for _, _, s, _ in stalls]
        parts.append(
            f"the event loop of {workers(w for _, w, _, _ in stalls)} "
            f"stalled {len(stalls)} time(s) while it spilled, up to "
            f"{format_seconds(max(seconds))} ({format_seconds(sum(seconds))} in "
            "all): heartbeats and transfers waited for the disk"
        )
    heavy = (
        max(written, float(peaks.max()) if len(peaks) else 0.0)
        >= ctx.nbytes("spilling.warning-bytes")
        or on_disk >= ctx.seconds("spilling.warning-time")
        or bool(stalls)
    )
    # The stalls first: what the spilling cost, then where it went.
    found = [evidence(t, w, text) for t, w, _, text in stalls] + [
        evidence(first, str(w), f"spilled {format_bytes(v)} at peak")
        for w, v in peaks.items()
    ]
    found = found[:MAX_EVIDENCE] or [evidence(first, None, parts[-1])]
    spill = ctx.fraction("spill")
    return [
        Flag(
            "spilling",
            "warning" if heavy else "info",
            first,
            workers([*peaks.index, *(w for _, w, _, _ in stalls)]),
            f"Workers spilled data to disk ({'; '.join(parts)}).",
            f"Memory passed {spill:.0%} of the limit: give workers more "
            "memory, persist less at once, or use smaller chunks."
            if heavy
            else "Too little to slow the run: nothing to do unless it grows.",
            found,
        )
    ]


@rule("unmanaged-memory")
def unmanaged_memory(ctx: Context) -> list[Flag]:
    """Workers whose unmanaged memory (what the process holds beyond the data
    Dask manages: leaks, libraries' buffers, memory not given back to the OS)
    stayed above the spill threshold, where spilling cannot help. Sampled for
    ``min-time`` at least; a worker restarted for memory is memory-restart's."""
    min_time = ctx.seconds("unmanaged-memory.min-time")
    lives = WorkerLives.of(ctx)
    restarted = {w for _, w, _ in lives.memory_restarts}
    highest = ctx.highest_by_worker("memory_unmanaged")
    if not any(
        (limit := lives.limits.get(worker))
        and value > ctx.fraction("spill", worker) * limit
        for worker, value in highest.items()
    ):  # most runs: no worker ever above the line
        return []
    frame = ctx.metric("memory_unmanaged")
    # distributed's own warning (logged at most every 5 minutes per worker).
    warnings: dict[str, list[dict[str, Any]]] = {}
    for t, w, message in ctx.logs("Unmanaged memory use is high"):
        warnings.setdefault(w or "?", []).append(evidence(t, w, message))
    flags = []
    for worker, samples in frame.groupby("worker", sort=True):
        limit = lives.limits.get(str(worker))
        if not limit or worker in restarted:
            continue
        # The longest stretch of consecutive samples above the line: two brief
        # peaks far apart are not memory that stayed.
        samples = samples.sort_values("time")
        above = samples["value"] > ctx.fraction("spill", str(worker)) * limit
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
            evidence(float(t), str(worker), f"unmanaged {format_bytes(v)}")
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

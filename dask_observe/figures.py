"""Figures from a run's telemetry that more than one reader shows (the report
and the flags): memory beyond the heartbeats, and what a killed task did."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dask_observe.units import format_bytes, format_seconds

if TYPE_CHECKING:
    import pandas as pd

    from dask_observe.store import Run


def fast_memory(run: Run, start: float = 0.0) -> pd.DataFrame:
    """Process memory beyond the heartbeats: each worker's own fast samples
    (``memory_rss``) and the RSS its nanny measured when it restarted it for
    memory (the ``worker-restart-memory`` event): time (seconds since
    ``start``), worker, rss; by time."""
    import pandas as pd

    rss = run.metrics("memory_rss", epoch=True)
    frames = [rss.rename(columns={"value": "rss"})[["time", "worker", "rss"]]]
    restarts = run.events("worker-restart-memory", epoch=True)
    if not restarts.empty:
        frames.append(
            pd.DataFrame(
                {
                    "time": restarts["time"],
                    "worker": restarts["worker"],
                    "rss": [float((d or {}).get("rss") or 0) for d in restarts["data"]],
                }
            )
        )
    found = pd.concat(frames, ignore_index=True).dropna(subset=["worker"])
    found = found[found["rss"] > 0].sort_values("time", ignore_index=True)
    found["time"] = found["time"] - start
    return found


def long_tasks(run: Run) -> dict[str, tuple[float, str]]:
    """Tasks a worker said were running for a second or more (``task-running``):
    key -> (when it started, epoch seconds; the worker)."""
    events = run.events("task-running", epoch=True)
    return {
        str(data["key"]): (float(data["since"]), str(worker))
        for worker, data in zip(events["worker"], events["data"], strict=True)
        if isinstance(data, dict) and "key" in data and "since" in data
    }


def killed_task_story(
    run: Run, key: str, until: float, memory: pd.DataFrame | None = None
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

"""Figures from a run's telemetry that more than one reader shows (the report
and the flags): memory beyond the heartbeats, what a killed task did, the
profile as trees and tables, and the transfers between workers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dask_observe.units import format_bytes, format_seconds

if TYPE_CHECKING:
    import pandas as pd

    from dask_observe.store import Run


def fast_memory(run: Run) -> pd.DataFrame:
    """Process memory beyond the heartbeats: each worker's own fast samples
    (``memory_rss``) and the RSS its nanny measured when it restarted it for
    memory (the ``worker-restart-memory`` event): time (epoch seconds),
    worker, rss; by time."""
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
    return found[found["rss"] > 0].sort_values("time", ignore_index=True)


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


# -- profiles ---------------------------------------------------------------------

#: Profile nodes with fewer samples than this share of the whole are dropped.
PROFILE_PRUNE = 0.005

PROFILE_COLUMNS = ("prefix", "function", "filename", "lineno", "self_s", "total_s")


def prune_profile(tree: dict[str, Any], interval: float) -> dict[str, Any]:
    """distributed's profile tree as a report needs it: per node its name,
    filename, line, ``count`` (samples with it on the stack) and children as
    a list; nodes under PROFILE_PRUNE of the samples dropped; ``interval``
    (seconds a sample) kept with it.

    A worker's profile never counts the innermost Python frame itself (its
    ``trigger_profile`` processes frames as if a low-level frame followed):
    its samples sit in its caller's count. Where the caller has a single
    callee, they are given back to it (a task function that loops in Python
    is named, not dask's ``__call__`` above it); with several callees they
    cannot be told apart and stay with the caller.
    """
    least = max(1, int(tree.get("count", 0) * PROFILE_PRUNE))

    def node(state: dict[str, Any], innermost: int) -> dict[str, Any]:
        description = state.get("description") or {}
        children = list((state.get("children") or {}).values())
        surplus = int(state.get("count", 0)) - sum(int(c["count"]) for c in children)
        handed = surplus if len(children) == 1 else 0
        kept = [node(child, handed) for child in children]
        return {
            "name": str(description.get("name", "")),
            "filename": str(description.get("filename", "")),
            "line": int(description.get("line_number") or 0),
            "count": int(state.get("count", 0)) + innermost,
            "children": [child for child in kept if child["count"] >= least],
        }

    return {"interval": interval, "root": node(tree, 0)}


def merge_profiles(trees: list[dict[str, Any]], interval: float) -> dict[str, Any]:
    """Pruned profile trees (``prune_profile``) summed into one: nodes of the
    same function at the same place in the stack add their counts."""

    def merge(nodes: list[dict[str, Any]]) -> dict[str, Any]:
        groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
        for node in nodes:
            for child in node["children"]:
                key = (child["name"], child["filename"], child["line"])
                groups.setdefault(key, []).append(child)
        first = nodes[0]
        return {
            "name": first["name"],
            "filename": first["filename"],
            "line": first["line"],
            "count": sum(n["count"] for n in nodes),
            "children": [merge(group) for group in groups.values()],
        }

    return {"interval": interval, "root": merge([t["root"] for t in trees])}


Function = tuple[str, str, int]  # name, filename, line
Counts = dict[Function, int]


def _function_counts(root: dict[str, Any]) -> tuple[Counts, Counts]:
    """Samples in each function itself, and in it or below it (once per stack
    however deep it recurses)."""
    own: Counts = {}
    total: Counts = {}
    stack = [(child, frozenset[Function]()) for child in root["children"]]
    while stack:
        node, above = stack.pop()
        key = (node["name"], node["filename"], node["line"])
        children = node["children"]
        own[key] = own.get(key, 0) + node["count"] - sum(c["count"] for c in children)
        if key not in above:
            total[key] = total.get(key, 0) + node["count"]
        stack += [(child, above | {key}) for child in children]
    return own, total


def profile_table(trees: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One row a function (name, file, line) of each profile (prefix "" for
    the whole run): seconds sampled in it (self_s) and in it or what it called
    (total_s); most total time first."""
    import pandas as pd

    rows = []
    for prefix, profile in trees.items():
        interval = float(profile.get("interval") or 0.01)
        own, total = _function_counts(profile["root"])
        rows += [
            (prefix, *key, own[key] * interval, n * interval)
            for key, n in total.items()
        ]
    table = pd.DataFrame(rows, columns=list(PROFILE_COLUMNS))
    return table.sort_values(
        ["prefix", "total_s"], ascending=[True, False], ignore_index=True
    )


def transfer_summary(transfers: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """``Run.transfers()`` summed by ``by`` (e.g. ``["peer", "worker"]`` for
    each pair of workers, ``["type"]``): bytes, seconds, count, keys and
    bandwidth (bytes over the seconds spent transferring); most bytes first."""
    sums = (
        transfers.groupby(by, sort=False)[["bytes", "seconds", "count", "keys"]]
        .sum()
        .reset_index()
    )
    sums["bandwidth"] = sums["bytes"] / sums["seconds"].clip(lower=1e-3)
    return sums.sort_values("bytes", ascending=False, ignore_index=True)

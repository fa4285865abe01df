"""distributed's statistical profiles of a run, as trees: what a run's end
keeps (one tree a task prefix, the rest apart, pruned), and as a table of
functions for readers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dask_observe.analysis.native import is_native

#: A call path from the root of a profile tree: (function, file, line) of
#: each frame.
CallPath = tuple[tuple[str, str, int], ...]

if TYPE_CHECKING:
    import pandas as pd


#: Profile nodes with fewer samples than this share of the whole are dropped.
PROFILE_PRUNE = 0.005

PROFILE_COLUMNS = (
    "prefix", "function", "filename", "lineno", "self_s", "total_s", "native",
)  # fmt: skip


def subtract_profile(
    tree: dict[str, Any], parts: list[dict[str, Any]]
) -> dict[str, Any]:
    """distributed's profile tree ``tree`` (a worker's whole) less ``parts``,
    trees of some of its samples (a task prefix's: a worker samples each
    task thread into both). What is left is the work of no part: other
    prefixes, tasks of no run. Nodes the parts took all of are dropped."""

    def minus(node: dict[str, Any], others: list[dict[str, Any]]) -> dict[str, Any]:
        children = {}
        for ident, child in (node.get("children") or {}).items():
            theirs = [o["children"][ident] for o in others if ident in o["children"]]
            left = minus(child, theirs)
            # (An innermost frame is a node of count 0: kept where it is only
            # the rest's, for prune_profile to hand its caller's samples back.)
            if left["count"] > 0 or left["children"] or not theirs:
                children[ident] = left
        count = int(node.get("count", 0)) - sum(int(o["count"]) for o in others)
        return {**node, "count": max(count, 0), "children": children}

    return minus(tree, parts)


def _defined_at(state: dict[str, Any], description: dict[str, Any]) -> int:
    """The line a profile node's function is defined on: the last part of
    distributed's identifier ("name;filename;first line"). The description's
    line is the one the node's first sample happened to be on, which differs
    from run to run in a function that loops over two lines: compared, the
    same function was two rows, one slower and one faster."""
    first = str(state.get("identifier", "")).rpartition(";")[2]
    return int(first) if first.isdigit() else int(description.get("line_number") or 0)


def prune_profile(
    tree: dict[str, Any], interval: float, *, of: int | None = None
) -> dict[str, Any]:
    """distributed's profile tree as a report needs it: per node its name,
    filename, line (where its function starts), ``count`` (samples with it on
    the stack) and children as
    a list; nodes under PROFILE_PRUNE of the samples dropped; ``interval``
    (seconds a sample) kept with it.

    A worker's profile never counts the innermost Python frame itself (its
    ``trigger_profile`` processes frames as if a low-level frame followed):
    its samples sit in its caller's count. Where the caller has a single
    callee, they are given back to it (a task function that loops in Python
    is named, not dask's ``__call__`` above it); with several callees they
    cannot be told apart and stay with the caller.

    ``of``: the count the PROFILE_PRUNE share is of, when the tree is a part
    of a larger one (the tree's own count by default).
    """
    least = max(1, int((tree.get("count", 0) if of is None else of) * PROFILE_PRUNE))

    def node(state: dict[str, Any], innermost: int) -> dict[str, Any]:
        description = state.get("description") or {}
        children = list((state.get("children") or {}).values())
        surplus = int(state.get("count", 0)) - sum(int(c["count"]) for c in children)
        handed = surplus if len(children) == 1 else 0
        kept = [node(child, handed) for child in children]
        return {
            "name": str(description.get("name", "")),
            "filename": str(description.get("filename", "")),
            "line": _defined_at(state, description),
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
    (total_s), and whether it is compiled code (native); most total time
    first."""
    import pandas as pd

    rows = []
    for prefix, profile in trees.items():
        interval = float(profile.get("interval") or 0.01)
        own, total = _function_counts(profile["root"])
        # A compiled function's node (a native profile's, grafted) has a
        # shared library for its file; distributed's are all Python's.
        rows += [
            (prefix, *key, own[key] * interval, n * interval, is_native(key[1]))
            for key, n in total.items()
        ]
    table = pd.DataFrame(rows, columns=list(PROFILE_COLUMNS))
    return table.sort_values(
        ["prefix", "total_s"], ascending=[True, False], ignore_index=True
    )

"""Which code got slower: two runs' statistical profiles compared.

distributed samples every worker thread's stack (``distributed.worker.profile.
interval``, 10 ms); a run keeps the samples of its time window, per task
prefix (:meth:`RunData.profile_trees`). Two runs of a job can then be compared
function by function, which no anchor offers for distributed runs.

A function's time is its *self* time, the samples whose innermost counted
frame is that function: the one whose own lines got slower is named, not every
caller above it. Each prefix's samples are scaled to the compute time the task
stream measured for it (see :func:`measured`). Sampling is counting, so a
function's samples vary like a Poisson count: a change is judged only beyond
``_SIGMAS`` standard deviations of that count, above a floor in seconds, and
beyond a share of the run's profiled time; and, where a prefix ran a different
number of tasks, per task (more work is not slower code).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dask_observe.analysis import verdicts
from dask_observe.analysis.figures import HostLoad
from dask_observe.analysis.trees import CallPath, profile_table

if TYPE_CHECKING:
    import pandas as pd

    from dask_observe.store import RunData

#: Columns of ``Comparison.profile_changes()``: ``verdict`` judges the totals
#: beside it (``a_s``, ``b_s``, ``ratio``), ``per_task_verdict`` the seconds a
#: task of the prefix (``a_tasks`` and ``b_tasks`` of them) beside it.
PROFILE_CHANGE_COLUMNS = (
    "function", "filename", "lineno", "prefix", "a_s", "b_s", "ratio", "verdict",
    "a_tasks", "b_tasks", "a_per_task_s", "b_per_task_s", "per_task_ratio",
    "per_task_verdict",
)  # fmt: skip

#: A change of fewer seconds than this is never marked (ten 10 ms samples).
_FLOOR_S = 0.1
#: ... nor one under this share of the larger run's sampled time.
_MATERIAL_SHARE = 0.05
#: ... nor one within this many standard deviations of a Poisson count.
_SIGMAS = 3.0


@dataclass
class Measured:
    """A run's profile scaled to the compute its task stream measured."""

    #: Per prefix (or the whole run's, "", where it has no per-prefix ones),
    #: trees whose counts are scaled: count x interval is measured seconds.
    trees: dict[str, dict[str, Any]]
    #: Per prefix, the seconds one sample stands for after scaling.
    sample_s: dict[str, float]
    #: Tasks per prefix.
    tasks: dict[str, int]

    def combined(self) -> dict[str, Any]:
        """One tree: a box per prefix, its profile below it."""
        roots = [
            {**tree["root"], "name": prefix or "(all)", "filename": "", "line": 0}
            for prefix, tree in self.trees.items()
        ]
        total = sum(root["count"] for root in roots)
        root = {"name": "", "filename": "", "line": 0, "count": total}
        return {"interval": _INTERVAL, "root": {**root, "children": roots}}


#: The interval of scaled trees: their counts are measured seconds / 0.01.
_INTERVAL = 0.01


def _scaled(node: dict[str, Any], factor: float) -> dict[str, Any]:
    """A copy of a profile tree with every count multiplied by ``factor``."""
    top: dict[str, Any] = {**node, "count": node["count"] * factor, "children": []}
    stack = [(node, top)]
    while stack:
        source, copy = stack.pop()
        for child in source["children"]:
            scaled = {**child, "count": child["count"] * factor, "children": []}
            copy["children"].append(scaled)
            stack.append((child, scaled))
    return top


def measured(run: RunData, tasks: pd.DataFrame | None = None) -> Measured:
    """``run``'s profile, each prefix's tree scaled so that its samples add
    up to the compute time the task stream measured for that prefix.

    The profile says where within a prefix the time went; the task stream
    says how much there was. A run's profile is the workers' profile cycles
    (``distributed.worker.profile.cycle``, 1 s) that overlap its window, so
    it may hold up to a cycle of the work before or after it: an unchanged
    function read 0.57 s in one run and 1.16 s in the next, while its share
    of its prefix's samples stayed the same. ``tasks``: the run's tasks where
    read already (their prefix and compute_s)."""
    # Python's frames alone: a run recorded with native=True has compiled
    # ones too, which a run without would seem to lack.
    trees = run.profile_trees(native=False)
    if not trees:  # no profile (under half a second of compute): no task read
        return Measured({}, {}, {})
    if any(trees):  # per-prefix trees: the whole run's adds nothing to them
        trees = {prefix: tree for prefix, tree in trees.items() if prefix}
    tasks = run.tasks() if tasks is None else tasks
    compute = tasks.groupby("prefix")["compute_s"].sum()
    counts = tasks["prefix"].value_counts()  # keyed by the prefixes themselves
    result = Measured({}, {}, {str(k): int(v) for k, v in counts.items()})
    for prefix, tree in trees.items():
        interval = float(tree.get("interval") or 0.01)
        sampled = tree["root"]["count"] * interval
        exact = float(compute.get(prefix, 0.0) if prefix else compute.sum())
        # No measured compute (a prefix the stream did not see): as sampled.
        factor = exact / sampled if sampled and exact else 1.0
        seconds = interval / _INTERVAL * factor  # per sample, in scaled counts
        result.trees[prefix] = {
            "interval": _INTERVAL,
            "root": _scaled(tree["root"], seconds),
        }
        result.sample_s[prefix] = interval * factor
    return result


def judge(
    a_s: float,
    b_s: float,
    *,
    sample_s: tuple[float, float],
    sampled: float,
    threshold: float,
    work: float = 1.0,
) -> str:
    """``regression``, ``improvement`` or "" for a function's self time going
    from ``a_s`` to ``b_s``. ``sample_s``: the seconds one sample stands for
    in each run; ``work``: b's tasks over a's (a's time is scaled by it:
    judged per task); ``sampled``: the larger run's profiled seconds."""
    expected = a_s * work
    delta = b_s - expected
    if abs(delta) < max(_FLOOR_S, _MATERIAL_SHARE * sampled):
        return ""
    if expected > 0 and abs(b_s / expected - 1) <= threshold:
        return ""
    # Samples are counts: a count n varies by about sqrt(n), so n samples
    # of s seconds each vary by sqrt(n) * s = sqrt(seconds * s).
    spread = math.sqrt(a_s * sample_s[0] * work**2 + b_s * sample_s[1])
    if abs(delta) <= _SIGMAS * spread:
        return ""
    return "regression" if delta > 0 else "improvement"


def profile_changes(
    run_a: RunData,
    run_b: RunData,
    threshold: float = 0.1,
    hosts: tuple[HostLoad, HostLoad] | None = None,
    measures: tuple[Measured, Measured] | None = None,
) -> pd.DataFrame:
    """Function by function, the self time of run ``b`` against run ``a``:
    PROFILE_CHANGE_COLUMNS, the largest changes first. Empty when either run
    has no profile (under half a second of compute). ``hosts``: how
    busy each run's host was (a time that moved with the host says so:
    ``verdicts.on_host``); ``measures``: the runs' :func:`measured`, if read
    already."""
    import pandas as pd

    hosts = hosts or (HostLoad(), HostLoad())
    ma, mb = measures or (measured(run_a), measured(run_b))
    ta, tb = (_with_samples(m) for m in (ma, mb))
    if ta.empty or tb.empty:
        return pd.DataFrame(columns=list(PROFILE_CHANGE_COLUMNS))
    key = ["prefix", "function", "filename", "lineno"]
    both = ta[[*key, "self_s", "sample_s"]].merge(
        tb[[*key, "self_s", "sample_s"]], on=key, how="outer", suffixes=("_a", "_b")
    )
    both = both.fillna({"self_s_a": 0.0, "self_s_b": 0.0})
    # A function in one run only: its sample in the other is that run's.
    both["sample_s_a"] = both["sample_s_a"].fillna(both["sample_s_b"])
    both["sample_s_b"] = both["sample_s_b"].fillna(both["sample_s_a"])
    sampled = max(float(ta["self_s"].sum()), float(tb["self_s"].sum()))
    rows = []
    for r in both.to_dict("records"):
        a_s, b_s = float(r["self_s_a"]), float(r["self_s_b"])
        if a_s == b_s == 0:
            continue
        prefix = str(r["prefix"])
        tasks_a, tasks_b = ma.tasks.get(prefix, 0), mb.tasks.get(prefix, 0)
        if any(
            prefix not in m.trees and (tasks or not prefix)
            for tasks, m in ((tasks_a, ma), (tasks_b, mb))
        ):
            # Its tasks ran in that run but its profile holds no sample of
            # them (a short run within a profile cycle), or that run's
            # profile is by prefix and this row is of a whole run's: unknown
            # there, not 0 s ("0 s -> 2 s, a regression" was said so).
            continue
        judged = functools.partial(
            judge, a_s, b_s, sampled=sampled, threshold=threshold,
            sample_s=(float(r["sample_s_a"]), float(r["sample_s_b"])),
        )  # fmt: skip
        ratio = b_s / a_s if a_s else math.inf
        total = verdicts.on_host(judged(work=1.0), "s", ratio, hosts, threshold)
        per_a = a_s / tasks_a if tasks_a else math.nan
        per_b = b_s / tasks_b if tasks_b else math.nan
        per_ratio = per_b / per_a if per_a else math.inf
        per_task = (
            verdicts.on_host(
                judged(work=tasks_b / tasks_a), "s", per_ratio, hosts, threshold
            )
            if tasks_a and tasks_b
            else ""
        )
        where = (r["function"], r["filename"], int(r["lineno"]), prefix)
        rows.append((*where, a_s, b_s, ratio, total, tasks_a, tasks_b, per_a,
                     per_b, per_ratio, per_task))  # fmt: skip
    table = pd.DataFrame(rows, columns=list(PROFILE_CHANGE_COLUMNS))
    order = (table["b_s"] - table["a_s"]).abs().sort_values(ascending=False).index
    return table.loc[order].reset_index(drop=True)


def _with_samples(m: Measured) -> pd.DataFrame:
    table = profile_table(m.trees)
    table["sample_s"] = table["prefix"].map(m.sample_s)
    return table


# -- each call path's change, for the differential icicle ---------------------------


def _seconds_by_path(profile: dict[str, Any]) -> dict[CallPath, float]:
    interval = float(profile.get("interval") or 0.01)
    found: dict[CallPath, float] = {}
    stack: list[tuple[dict[str, Any], CallPath]] = [(profile["root"], ())]
    while stack:
        node, path = stack.pop()
        found[path] = found.get(path, 0.0) + node["count"] * interval
        for child in node["children"]:
            key = (str(child["name"]), str(child["filename"]), int(child["line"]))
            stack.append((child, (*path, key)))
    return found


#: Where a call path's change (``path_change``) takes a step more: |log2|
#: of its ratio past 0.32 (1.25x), 1 (2x) and 2 (4x), steps 1 to 4.
CHANGE_STEPS = (0.32, 1.0, 2.0)


def path_change(
    a: dict[str, Any], b: dict[str, Any]
) -> Callable[[dict[str, Any], CallPath], int]:
    """How each box of b's profile changed against the same call path in a:
    0 within sampling noise; 1 to 4 slower (1.25x, 2x, 4x, beyond), -1 to -4
    faster."""
    before = _seconds_by_path(a)
    interval = float(b.get("interval") or 0.01)

    def change(node: dict[str, Any], path: CallPath) -> int:
        now = node["count"] * interval
        then = before.get(path, 0.0)
        spread = math.sqrt((now + then) / interval) * interval
        if abs(now - then) <= max(_SIGMAS * spread, 2 * interval):
            return 0
        ratio = now / then if then else math.inf
        size = abs(math.log2(ratio)) if then else math.inf
        step = 1 + sum(size >= bound for bound in CHANGE_STEPS)
        return step if ratio > 1 else -step

    return change


def compared_profiles(
    measures: tuple[Measured, Measured],
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The two runs' profiles as one tree each (a box per task prefix, its
    functions below), for the differential icicle; None when either has none."""
    a, b = measures[0].combined(), measures[1].combined()
    if not a["root"]["children"] or not b["root"]["count"]:
        return None
    return a, b

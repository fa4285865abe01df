"""Run-to-run comparison: did this change make it slower, or hungrier?

``compare(a, b)`` puts the headline figures and the time of each task prefix of
two runs side by side, with the ratio ``b / a``. For every figure lower is
better. A change is marked (regression or improvement) when it is beyond the
``threshold`` floor and beyond noise: the tasks' durations shifted
significantly (a rank test) and by 1.5x at the median, their number changed,
or, for wall time, the value lies outside the spread of five or more earlier
runs of the same name. Identical runs, whose wall times differ by 10-30% on a
busy machine, are rarely marked (``benchmarks/noise.py``). Figures too small to
measure, and prefixes with under 5% of the tasks' time, are not judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from dask_observe import config
from dask_observe.analysis import noise, verdicts
from dask_observe.analysis.changes import code_diff, differences
from dask_observe.analysis.comparing import (
    CODE_ROWS,
    per_task_text,
    ratio_text,
    shown,
    where,
)
from dask_observe.analysis.figures import (
    HostLoad,
    host_load,
    peak_memory,
    phase_totals,
    prefix_table,
    task_table,
    time_split,
)
from dask_observe.analysis.profiles import (
    PROFILE_CHANGE_COLUMNS,
    compared_profiles,
    measured,
    profile_changes,
)
from dask_observe.analysis.verdicts import PER_TASK
from dask_observe.store import RunData
from dask_observe.units import format_seconds

if TYPE_CHECKING:
    import pandas as pd


class RunSource(Protocol):
    """What holds runs by id: a store, or an archive."""

    def run(self, run: int | str = "last") -> RunData: ...


#: Columns of ``Comparison.table``.
COMPARISON_COLUMNS = ("figure", "unit", "a", "b", "ratio", "verdict")


class NothingToCompare(ValueError):
    """A run without tasks has nothing to compare."""


@dataclass
class Comparison:
    """Two runs side by side. ``table`` has the columns COMPARISON_COLUMNS."""

    a: dict[str, Any]
    b: dict[str, Any]
    table: pd.DataFrame
    threshold: float
    #: What else changed from a to b (``environment.differences``): area
    #: (packages, config, cluster, code), what, in a, in b.
    changed: list[tuple[str, str, Any, Any]] = field(default_factory=list)
    #: Prefixes whose number of tasks changed: prefix, tasks in a, in b.
    #: Their totals follow the work; their "per task" rows judge the pace.
    work: list[tuple[str, int, int]] = field(default_factory=list)
    #: How busy each run's busiest host was (a, b): time figures that moved
    #: with it, by no more than it explains, say so, unmarked.
    host: tuple[HostLoad, HostLoad] = (HostLoad(), HostLoad())
    #: Which code changed (``profiles.profile_changes``; empty when not read).
    code: pd.DataFrame | None = field(default=None, repr=False)
    #: The two runs' profiles, a box per prefix (``profiles.compared_profiles``),
    #: that the report draws as b's coloured by its change against a; None
    #: where either has none, or they were not read.
    profiles: tuple[dict[str, Any], dict[str, Any]] | None = field(
        default=None, repr=False
    )

    def profile_changes(self) -> pd.DataFrame:
        """Which code got slower: function by function, the self time in b
        against a (columns ``profiles.PROFILE_CHANGE_COLUMNS``: function,
        filename, lineno, prefix, a_s, b_s, ratio, verdict), largest changes
        first; judged beyond sampling noise and per task where a prefix ran
        a different number of tasks (see :mod:`dask_observe.analysis.profiles`)."""
        if self.code is None:
            import pandas as pd

            return pd.DataFrame(columns=list(PROFILE_CHANGE_COLUMNS))
        return self.code

    @property
    def regressions(self) -> pd.DataFrame:
        return self.table[self.table["verdict"] == "regression"]

    @property
    def improvements(self) -> pd.DataFrame:
        return self.table[self.table["verdict"] == "improvement"]

    def text(self) -> str:
        """The table as plain text, for terminals."""
        rows = [
            f"Run {self.a['id']} {self.a['name']!r} -> run {self.b['id']} "
            f"{self.b['name']!r} (ratio b/a; {self.marks_text()})"
        ]
        if self.work:
            rows.append(self.work_text())
        if self.host_text():
            rows.append(self.host_text())
        for r in self.table.to_dict("records"):
            ratio = ratio_text(r["ratio"])
            rows.append(
                f"  {r['figure']:<32} {shown(r['a'], r['unit']):>12} "
                f"{shown(r['b'], r['unit']):>12} {ratio:>8}  {r['verdict']}"
            )
        if self.changed:
            rows.append("What else changed:")
            for area, what, a, b in self.changed:
                if area == "code" and what == "cell":
                    rows.append("  code cell:")
                    rows += [f"    {line}" for line in code_diff(a, b)]
                else:
                    rows.append(f"  {area} {what}: {a!r} -> {b!r}")
        code = self.profile_changes()
        marked = code[(code["verdict"] != "") | (code["per_task_verdict"] != "")]
        if not marked.empty:
            rows.append("Code that changed (self time in the function, b/a):")
            rows += [
                f"  {r['function']} ({where(r)}) {format_seconds(r['a_s'])} -> "
                f"{format_seconds(r['b_s'])} {ratio_text(r['ratio'])}  "
                f"{r['verdict'] or 'unmarked'}{per_task_text(r)}"
                for r in marked.head(CODE_ROWS).to_dict("records")
            ]
        return "\n".join(rows)

    def marks_text(self) -> str:
        """What the marks mean, and how many there are: the summary line."""
        counts = self.table["verdict"].value_counts()
        marks = [
            f"{counts.get(v, 0)} {v}{'s' if counts.get(v, 0) != 1 else ''}"
            for v in ("regression", "improvement")
        ]
        marks += [f"{counts[v]} {v}" for v in HOST_MARKS if counts.get(v, 0)]
        return (
            f"{', '.join(marks)}; a change is marked where it exceeds "
            f"+/-{self.threshold:.0%} and the runs' noise"
        )

    def host_text(self) -> str:
        """What the hosts' load says, when one run's was busier ("" when not)."""
        a, b = self.host
        if abs(b.waiting - a.waiting) < verdicts.HOST_BUSIER:
            return ""
        (busier, busy), (other, quiet) = sorted(
            (("a", a), ("b", b)), key=lambda pair: pair[1].waiting, reverse=True
        )
        return (
            f"Run {busier} ran on a busier host: threads waited for a core "
            f"{busy.waiting:.0%} of its time ({other}: {quiet.waiting:.0%}), "
            f"{busy.crowding:.1f} runnable threads a core on average ({other}: "
            f"{quiet.crowding:.1f}); times that moved with the host, by no more "
            "than that, say so, unmarked."
        )

    def work_text(self) -> str:
        """What changed in the work itself, said before any figure: totals
        follow the work; the "per task" rows say whether the pace did."""
        told = ", ".join(f"{p} {a:,} -> {b:,} tasks" for p, a, b in self.work)
        return (
            f"The work changed ({told}): totals follow the work; "
            "the per-task rows say whether it got slower."
        )

    def __repr__(self) -> str:
        return self.text()


#: What a time figure says, unmarked, when the host explains its change.
HOST_MARKS = (verdicts.BUSIER_HOST, verdicts.QUIETER_HOST)


def figures(run: RunData) -> dict[str, Any]:
    """The figures a comparison reads of one run: (unit, value) by name, and the
    total compute seconds of each prefix."""
    summary = run.summary()
    tasks = task_table(run, run.started)
    if tasks.empty:
        raise NothingToCompare(
            f"run {run.id} {run.name!r} has no tasks: nothing to compare"
        )
    values: dict[str, tuple[str, float | None]] = {
        "wall time": ("s", summary["duration_s"]),
    }
    for phase, seconds in phase_totals(tasks).items():
        values[f"{phase} time"] = ("s", seconds)
    # From the workers' own meters; None for a run recorded without them.
    split = time_split(run)
    values["CPU time"] = ("s", split.get("thread-cpu"))
    values["waiting time (GIL, I/O)"] = ("s", split.get("thread-noncpu"))
    values["peak memory"] = ("bytes", peak_memory(run))
    values["spilled (peak)"] = (
        "bytes",
        run.cluster_metric_rise("memory_spilled") or 0.0,
    )
    values["tasks"] = ("tasks", float(summary["n_tasks"]))
    values["failed tasks"] = ("tasks", float(summary["n_failed"]))
    prefixes = prefix_table(tasks).set_index("prefix")["total_s"]
    done = tasks[tasks["status"] == "memory"]
    wall = summary["duration_s"]
    threads = run.cluster_metric_max("nthreads")
    compute = values["compute time"][1]
    judged = run.store.kept.judgement(run.id)
    return {
        "summary": summary,
        "values": values,
        # How busy its threads were, its host, and what it was flagged for:
        # what a wall time that moved without the tasks says of the run.
        "busy": compute / (wall * threads) if wall and threads and compute else None,
        "host": host_load(run, wall),
        "kinds": None if judged is None else frozenset(f["kind"] for f in judged[1]),
        "prefixes": prefixes.to_dict(),
        # Each task's duration, the spread a change is judged against.
        "durations": done["duration_s"].to_numpy(dtype=float),
        # Its tasks, read once: the profiles' scaling reads them again.
        "tasks": tasks,
        "by_prefix": {
            str(p): d.to_numpy(dtype=float)
            for p, d in done.groupby("prefix")["duration_s"]
        },
    }


def _history(run: RunData, limit: int = 10) -> list[float]:
    """Wall times of the finished runs of the same name before ``run``."""
    return run.store.wall_times(run.name, run.id, limit)


def compare(
    a: RunData | int | str,
    b: RunData | int | str,
    *,
    threshold: float | None = None,
    store: RunSource | None = None,
    profiles: bool = True,
) -> Comparison:
    """Compare run ``b`` against run ``a`` (ratios are ``b / a``).

    Runs may be given as :class:`Run` objects or as ids (or ``"last"``) in
    ``store``. ``threshold`` (default ``observe.compare.threshold``, 0.1) is
    the floor: smaller relative changes are never marked, larger ones only
    when they are beyond noise (see the module's docstring). ``profiles``:
    whether to compare the runs' profiles too (``profile_changes()``).

    Raises
    ------
    NothingToCompare
        When a run has no tasks.
    """
    import pandas as pd

    if threshold is None:
        threshold = float(config.get("compare.threshold") or 0.1)
    if threshold < 0:
        raise ValueError(f"threshold must be 0 or more, not {threshold}")
    run_a, run_b = (_resolve(r, store) for r in (a, b))
    fa, fb = figures(run_a), figures(run_b)
    # The work itself: did tasks take longer, or were there more of them?
    work = [
        noise.shift(fa["durations"], fb["durations"], verdicts.SHIFT_RATIO),
        verdicts.count_change(len(fa["durations"]), len(fb["durations"]), threshold),
    ]
    history = noise.outside(
        _history(run_b), fb["values"]["wall time"][1] or 0.0, threshold
    )
    walls = (fa["values"]["wall time"][1], fb["values"]["wall time"][1])
    rows = []
    for name, (unit, va) in fa["values"].items():
        vb = fb["values"][name][1]
        evidence = [*work, history] if name == "wall time" else list(work)
        if name == "wall time" and verdicts.far(va, vb):
            # The same tasks can make a slower run: a worker left idle, a new
            # flag. Heard only for a move beyond the runs' own jitter.
            evidence += [
                verdicts.appeared(fa["kinds"], fb["kinds"]),
                verdicts.idler(fa["busy"], fb["busy"], threshold),
            ]
        if unit == "bytes":  # memory follows the data, not the task times
            evidence = []
        rows.append((name, unit, va, vb, evidence))
    busy = max(sum(fa["prefixes"].values()), sum(fb["prefixes"].values()))
    work_changes: list[tuple[str, int, int]] = []
    for prefix in sorted(set(fa["prefixes"]) | set(fb["prefixes"])):
        pa, pb = fa["prefixes"].get(prefix), fb["prefixes"].get(prefix)
        da = fa["by_prefix"].get(prefix, ())
        db = fb["by_prefix"].get(prefix, ())
        count = verdicts.count_change(len(da), len(db), threshold)
        evidence = [noise.shift(da, db, verdicts.SHIFT_RATIO), count]
        if max(pa or 0.0, pb or 0.0) < verdicts.MINOR_PREFIX * busy:
            # Sub-millisecond tasks vary by half from run to run (a 'var' of
            # 64 chunks read 1.46x between identical runs): a prefix that is
            # a small share of the work is shown, not judged.
            evidence = [0]
        rows.append((f"prefix {prefix}", "s", pa, pb, evidence))
        if count and len(da) and len(db) and pa is not None and pb is not None:
            # The work changed: its pace is the rank test's alone.
            work_changes.append((prefix, len(da), len(db)))
            rows.append((f"prefix {prefix} per task", PER_TASK, pa / len(da),
                         pb / len(db), evidence[:1]))  # fmt: skip
    # The directions in which the tasks' time changed beyond any noise.
    moved = frozenset(
        verdicts.obvious("s", va, vb) for name, _, va, vb, _ in rows
        if name == "compute time" or name.startswith("prefix ")
    ) - {0}  # fmt: skip
    hosts = (fa["host"], fb["host"])
    table = pd.DataFrame(
        [
            (
                name,
                unit,
                va,
                vb,
                _ratio(va, vb),
                verdicts.on_host(
                    verdicts.verdict(
                        name, unit, va, vb, threshold, evidence, walls, moved
                    ),
                    unit,
                    _ratio(va, vb),
                    hosts,
                    threshold,
                ),
            )
            for name, unit, va, vb, evidence in rows
        ],
        columns=list(COMPARISON_COLUMNS),
    )
    changed = differences(run_a.environment(), run_b.environment())
    comparison = Comparison(
        fa["summary"], fb["summary"], table, threshold, changed, work=work_changes,
        host=hosts,
    )  # fmt: skip
    if profiles:  # read now: a comparison outlives the store it was read from
        # Each run's profile scaled once (it reads the run's tasks) for both.
        measures = (measured(run_a, fa["tasks"]), measured(run_b, fb["tasks"]))
        comparison.code = profile_changes(run_a, run_b, threshold, hosts, measures)
        comparison.profiles = compared_profiles(measures)
    return comparison


def _ratio(a: float | None, b: float | None) -> float:
    """b / a; inf for a figure that appeared from zero (shown as "new")."""
    if a is None or b is None:
        return 1.0 if a == b else float("nan")
    if a == 0:
        return 1.0 if b == 0 else float("inf")
    return b / a


def _resolve(run: RunData | int | str, store: RunSource | None) -> RunData:
    if isinstance(run, RunData):
        return run
    if store is None:
        raise TypeError(f"run {run!r} is an id: give the store that holds it")
    return store.run(run)

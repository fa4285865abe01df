"""What a report shows of a run's tasks: their count, the prefix table, the
phase totals, the task stream and the first failed tasks.

All of it is computed from the task rows, and reading a million rows takes
seconds (a Python object a value; SQLite's own GROUP BY over them took 1.5 s,
a bare scan 0.35 s: measured in ``benchmarks/reads.py``'s store). A run's end
reads the rows anyway, to judge its flags: it computes these figures from them
too and stores them beside its judged flags, for runs whose stream is binned; a
report of the run then reads a few kilobytes. A run still running, one whose
end never came (its process died) or one judged by another version of
dask-observe is computed from its rows again.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dask_observe import config
from dask_observe.analysis import few, figures
from dask_observe.report.taskstream import EXACT_LIMIT, StreamBins, bins

if TYPE_CHECKING:
    import pandas as pd

    from dask_observe.store import RunData

logger = logging.getLogger(__name__)

#: Failed tasks a report details; the rest are counted.
MAX_FAILURES = 20
#: The columns of a failed task a report shows (times since the run's start).
FAILED_COLUMNS = ("key", "prefix", "worker", "ended", "exception", "traceback")
PREFIX_COLUMNS = ("prefix", "count", "total_s", "mean_s", "nbytes", "errors")


@dataclass
class TaskFigures:
    """A run's tasks as its report shows them."""

    n_tasks: int
    #: One row a prefix: count, total_s, mean_s, nbytes, errors; slowest first.
    prefixes: pd.DataFrame
    #: Seconds of task time in each phase of ``figures.PHASE_COLUMNS``.
    phases: dict[str, float]
    #: Workers and worker threads that ran a task.
    workers: int
    threads: int
    #: The task stream: the rows of at most ``EXACT_LIMIT`` tasks
    #: (``figures.task_table``), else their bins.
    stream: pd.DataFrame | StreamBins
    #: The first ``MAX_FAILURES`` failed tasks (``FAILED_COLUMNS``).
    failed: pd.DataFrame

    def to_json(self) -> dict[str, Any]:
        assert isinstance(self.stream, StreamBins), "rows are never stored"
        return {
            "n_tasks": self.n_tasks,
            "prefixes": self.prefixes.to_dict("list"),
            "phases": self.phases,
            "workers": self.workers,
            "threads": self.threads,
            "stream": self.stream.to_json(),
            "failed": self.failed.astype(object)
            .where(self.failed.notna(), None)
            .to_dict("list"),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskFigures:
        import pandas as pd

        return cls(
            n_tasks=int(data["n_tasks"]),
            prefixes=pd.DataFrame(data["prefixes"], columns=list(PREFIX_COLUMNS)),
            phases={str(k): float(v) for k, v in data["phases"].items()},
            workers=int(data["workers"]),
            threads=int(data["threads"]),
            stream=StreamBins.from_json(data["stream"]),
            failed=pd.DataFrame(data["failed"], columns=list(FAILED_COLUMNS)),
        )


def compute(
    run: RunData, start: float, duration: float, tasks: pd.DataFrame | None = None
) -> TaskFigures:
    """The figures of ``run``'s tasks (``tasks``: ``run.tasks(epoch=True)``
    where read already), times since ``start``, the stream over ``duration``;
    of a few tasks, in plain Python (``analysis.few``)."""
    if tasks is None:
        columns, rows = run.task_rows()
        if len(rows) <= few.FEW_TASKS:
            few_rows = [dict(zip(columns, r, strict=True)) for r in rows]
            return _few_figures(run, start, few_rows)
        tasks = run.task_frame(columns, rows, epoch=True)
    table = figures.task_table(run, start, tasks)
    failed = table[table["status"] == "erred"].head(MAX_FAILURES)
    return TaskFigures(
        n_tasks=len(table),
        prefixes=figures.prefix_table(table),
        phases=figures.phase_totals(table),
        workers=int(table["worker"].nunique()),
        threads=int(table["lane"].nunique()),
        stream=table if len(table) <= EXACT_LIMIT else bins(table, duration),
        failed=failed[list(FAILED_COLUMNS)].reset_index(drop=True),
    )


def _few_figures(run: RunData, start: float, rows: list[dict[str, Any]]) -> TaskFigures:
    """:func:`compute` of at most ``few.FEW_TASKS`` task rows (as dicts)."""
    running = figures.long_tasks(run) if rows else {}
    table = few.task_table(run, start, rows, running)
    erred = [i for i, status in enumerate(table.get("status", [])) if status == "erred"]
    shown = erred[:MAX_FAILURES]
    return TaskFigures(
        n_tasks=len(rows),
        prefixes=few.frame(few.prefix_rows(table), PREFIX_COLUMNS),
        phases=few.phase_totals(table),
        workers=len({w for w in table.get("worker", []) if w is not None}),
        threads=len(set(table.get("lane", []))),
        stream=few.frame(table, few.TABLE_COLUMNS),
        failed=few.frame(
            {c: [table[c][i] for i in shown] for c in FAILED_COLUMNS},
            FAILED_COLUMNS,
        ),
    )


def read(run: RunData, start: float, duration: float) -> TaskFigures:
    """The figures of ``run``'s tasks: as its end stored them, if they were
    made for this version and this duration, else computed."""
    stored = run.store.kept.task_figures(run.id)
    if stored is not None:
        version, data = stored
        if version == config.version() and math.isclose(
            data.get("duration", -1.0), duration, rel_tol=0, abs_tol=1e-9
        ):
            try:
                return TaskFigures.from_json(data["figures"])
            except (KeyError, TypeError, ValueError) as e:  # computed again
                logger.warning("dask-observe: stored task figures unread: %s", e)
    return compute(run, start, duration)


def keep(run: RunData, tasks: pd.DataFrame) -> None:
    """At a run's end: compute its task figures from ``tasks`` (its rows, read
    for its judged flags) and store them, where its stream is binned (a smaller
    run's rows are read again in milliseconds)."""
    if len(tasks) <= EXACT_LIMIT:
        return
    start, duration = run.started, report_duration(run)
    made = compute(run, start, duration, tasks)
    run.store.kept.set_task_figures(
        run.id,
        config.version(),
        json.dumps({"duration": duration, "figures": made.to_json()}),
    )


def report_duration(run: RunData) -> float:
    """The seconds a report of ``run`` spans (its stream's width)."""
    return max(run.window_end() - run.started, 1e-9)

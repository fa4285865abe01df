"""How a comparison of two runs says its figures: the words its text
(``analysis.compare``) and its HTML (``report.comparison``) share, apart
from both, so that neither imports the other for them."""

from __future__ import annotations

from typing import Any

from dask_observe.analysis.verdicts import PER_TASK
from dask_observe.plaintext import short_path
from dask_observe.units import format_bytes, format_seconds

#: Functions listed at most under "Code that changed".
CODE_ROWS = 8


def per_task_text(row: dict[Any, Any]) -> str:
    """A profile change's seconds a task, with their own mark, where the
    prefix ran a different number of tasks ("" where it ran as many)."""
    if row["a_tasks"] == row["b_tasks"] or not row["a_tasks"] or not row["b_tasks"]:
        return ""
    return (
        f"; a task ({row['a_tasks']:,} -> {row['b_tasks']:,} tasks) "
        f"{format_seconds(row['a_per_task_s'])} -> "
        f"{format_seconds(row['b_per_task_s'])} {ratio_text(row['per_task_ratio'])}"
        f"  {row['per_task_verdict'] or 'unmarked'}"
    )


def where(row: dict[Any, Any]) -> str:
    """file:line of a profile row, in its prefix's tasks when it has one."""
    where = f"{short_path(str(row['filename']))}:{row['lineno']}"
    return f"{where}, in {row['prefix']} tasks" if row["prefix"] else where


def shown(value: float | None, unit: str) -> str:
    if value is None or value != value:
        return "-"
    if unit in ("s", PER_TASK):
        return format_seconds(value)
    if unit == "bytes":
        return format_bytes(value)
    return f"{int(value):,}"


def ratio_text(ratio: float) -> str:
    """A ratio as the comparison shows it: "2.50x", "new" (from zero),
    "gone" (to zero), "" (unknown)."""
    if ratio != ratio:
        return ""
    if ratio == float("inf"):
        return "new"
    return "gone" if ratio == 0 else f"{ratio:.2f}x"

"""The figures of a run with few rows, worked out in plain Python.

Most recorded runs are small: a notebook cell of a task or a few hundred.
pandas' fixed cost (a groupby, a rank, a pivot: 0.2-1 ms each, whatever the
rows) made most of a one-task run's report (~30 ms to read it, 8 to draw it:
a recorded cell cost 60 ms more than a plain one, where 100 ms is when people
notice). Here the same figures are worked out from the rows themselves, where
they are few (``FEW_TASKS``, ``FEW_ROWS``), and made a DataFrame once, as
their readers take them; more rows keep the pandas path, whose cost is then
per row. The two paths give the same figures: tests/test_few.py checks them
against each other on a real run and on a written one (a task killed with
its worker, a worker removed, a memory restart).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from dask_observe.store.queries import TASK_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

    from dask_observe.store import RunData

#: Task rows up to which a run's task figures are worked out here: the task
#: stream's own limit for drawing each task (``report.taskstream.EXACT_LIMIT``).
FEW_TASKS = 500

#: Metric samples up to which a run's memory figures are worked out here
#: (a minute of a few workers' fast samples).
FEW_ROWS = 5_000

#: The columns of :func:`task_table` (``figures.task_table``'s).
TABLE_COLUMNS = (*TASK_COLUMNS, "stall_s", "lane")

#: The phases a task's time is split into, as ``run.tasks()`` names them.
PHASE_COLUMNS = {
    "compute": ("compute_s",),
    "transfer": ("transfer_s",),
    "disk": ("disk_read_s", "disk_write_s"),
    "serialization": ("deserialize_s",),
    # What distributed times as reading a task's arguments from, or putting
    # its result into, worker storage when no byte went to disk: a stall.
    "stall": ("stall_s",),
}

#: The task columns of distributed's disk phases, by fine-metrics activity.
DISK_COLUMNS = {"disk-read": "disk_read_s", "disk-write": "disk_write_s"}

#: The seconds of a task row that may be missing.
SECONDS = ("compute_s", "transfer_s", "disk_read_s", "disk_write_s", "deserialize_s")


def _number(value: Any) -> float | None:
    """A stored number, None where there is none (NULL, or NaN)."""
    if value is None:
        return None
    number = float(value)
    return None if number != number else number


def task_table(
    run: RunData,
    start: float,
    rows: Sequence[dict[str, Any]],
    running: dict[str, tuple[float, str]],
) -> dict[str, list[Any]]:
    """``figures.task_table`` of a few tasks (``rows``: the run's task rows as
    dicts, epoch times), as columns: the same columns, in the same order.
    ``running``: ``figures.long_tasks(run)``."""
    tasks = []
    for row in rows:
        task: dict[str, Any] = {
            k: (_number(v) if k in _NUMBERS else v) for k, v in row.items()
        }
        begun, stopped = task["start"], task["stop"]
        task["duration_s"] = (
            stopped - begun if begun is not None and stopped is not None else None
        )
        since = running.get(str(task["key"]))
        if begun is None and since is not None:  # it died with its worker
            task["start"], task["worker"] = since
            task["stop"] = task["ended"]
            ran = task["ended"] - since[0] if task["ended"] is not None else None
            task["compute_s"] = task["duration_s"] = ran
        for column in ("start", "stop", "ended"):
            if task[column] is not None:
                task[column] -= start
        if task["duration_s"] is None:
            task["duration_s"] = 0.0
        tasks.append(task)
    _stalls_apart(run, tasks)
    _lanes(tasks)
    return {column: [task[column] for task in tasks] for column in TABLE_COLUMNS}


#: The task columns that hold numbers (floats here; None where missing).
_NUMBERS = frozenset(
    ("start", "stop", "ended", *SECONDS, "nbytes", "thread", "duration_s")
)


def _stalls_apart(run: RunData, tasks: list[dict[str, Any]]) -> None:
    """``figures.stalls_apart`` of the tasks' dicts."""
    for task in tasks:
        task["stall_s"] = 0.0
    if not any(task[c] for task in tasks for c in DISK_COLUMNS.values()):
        return
    fine = run.fine_rows()
    spilled = bool(run.cluster_metric_rise("memory_spilled"))
    for activity, column in DISK_COLUMNS.items():
        on_disk = {
            p
            for c, p, a, u, v in fine
            if c == "execute" and a == activity and u == "bytes" and v > 0
        }
        for task in tasks:
            stalled = (
                task["prefix"] is not None and not spilled
                if not fine
                else task["prefix"] not in on_disk
            )
            if stalled:
                task["stall_s"] += task[column] or 0.0
                task[column] = 0.0


def _lanes(tasks: list[dict[str, Any]]) -> None:
    """A lane a worker thread, numbered from 0 within its worker (as
    ``figures.task_table``): a task whose thread is unknown goes in its
    worker's first lane."""
    threads: dict[str, set[float]] = {}
    for task in tasks:
        worker = task["worker"] if task["worker"] is not None else "?"
        threads.setdefault(worker, set())
        if task["thread"] is not None:
            threads[worker].add(task["thread"])
    numbered = {
        w: {t: i for i, t in enumerate(sorted(ts))} for w, ts in threads.items()
    }
    for task in tasks:
        worker = task["worker"] if task["worker"] is not None else "?"
        known = threads[worker]
        thread = task["thread"] if task["thread"] is not None else min(known, default=0)
        number = numbered[worker].get(thread, 0)
        task["lane"] = f"{worker} #{number}"


def prefix_rows(table: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """``figures.prefix_table`` of a task table of :func:`task_table`."""
    found: dict[str, list[float]] = {}
    for prefix, seconds, nbytes, status in zip(
        table.get("prefix", []),
        table.get("duration_s", []),
        table.get("nbytes", []),
        table.get("status", []),
        strict=True,
    ):
        if prefix is None:  # as a groupby leaves it out
            continue
        summed = found.setdefault(prefix, [0, 0.0, 0.0, 0])
        summed[0] += 1
        summed[1] += seconds
        summed[2] += nbytes if nbytes is not None else 0.0
        summed[3] += status == "erred"
    # By prefix, then slowest first (a stable sort keeps the ties by name).
    ordered = sorted(sorted(found.items()), key=lambda item: -item[1][1])
    return {
        "prefix": [p for p, _ in ordered],
        "count": [int(s[0]) for _, s in ordered],
        "total_s": [s[1] for _, s in ordered],
        "mean_s": [s[1] / s[0] for _, s in ordered],
        "nbytes": [s[2] for _, s in ordered],
        "errors": [int(s[3]) for _, s in ordered],
    }


def phase_totals(table: dict[str, list[Any]]) -> dict[str, float]:
    """``figures.phase_totals`` of a task table of :func:`task_table`."""
    return {
        phase: float(
            sum(v for column in group for v in table.get(column, []) if v is not None)
        )
        for phase, group in PHASE_COLUMNS.items()
    }


def fast_memory(
    samples: Iterable[tuple[float, str | None, float]],
    restarts: Iterable[tuple[float, str | None, float]],
) -> list[tuple[float, str, float]]:
    """``figures.fast_memory`` as rows (time, worker, rss) by time: of the
    workers' ``memory_rss`` samples and their nannies' readings at memory
    restarts, (time, worker, rss) each."""
    found = [
        (t, w, rss)
        for t, w, rss in (*samples, *restarts)
        if w is not None and rss is not None and rss > 0
    ]
    return sorted(found, key=lambda row: row[0])


def process_memory(
    readings: Iterable[tuple[float, str, float]],
    removals: Iterable[tuple[float, str]],
) -> list[tuple[float, float]]:
    """``figures.process_memory`` as rows (second, rss): of each worker's
    readings (time, worker, rss), its highest in each second, held until
    its next or until it left (``removals``: time, worker), summed over the
    workers each second that has a reading."""
    highest: dict[tuple[int, str], float] = {}
    for t, worker, rss in readings:
        second = int(t // 1)
        if rss > highest.get((second, worker), -1.0):
            highest[(second, worker)] = rss
    # Each worker's readings and removals in time order: a removal at the
    # half second holds until the worker's next reading.
    changes: list[tuple[float, int, str, float | None]] = [
        (float(s), 0, w, rss) for (s, w), rss in highest.items()
    ]
    changes += [(t // 1 + 0.5, 1, w, None) for t, w in removals]
    changes.sort(key=lambda c: (c[0], c[1]))
    seconds = sorted({s for s, _ in highest})
    held: dict[str, float | None] = {}
    totals = []
    i = 0
    for second in seconds:
        while i < len(changes) and changes[i][0] <= second:
            _, _, worker, value = changes[i]
            held[worker] = value
            i += 1
        totals.append(
            (float(second), float(sum(v for v in held.values() if v is not None)))
        )
    return totals


def memory_series(
    samples: Iterable[tuple[float, str | None, str, float]], start: float
) -> dict[str, dict[str, list[float]]]:
    """``report.model``'s memory series (``MEMORY_METRICS``) as columns a
    worker ("" for the cluster): time since ``start``, managed, unmanaged,
    spilled, limit; a series missing at a time reads 0."""
    last: dict[str, dict[float, dict[str, float]]] = {}
    for t, worker, name, value in samples:
        at = last.setdefault(worker or "", {}).setdefault(t - start, {})
        at[name.removeprefix("memory_")] = value
    found = {}
    for worker in sorted(last):
        times = sorted(last[worker])
        series: dict[str, list[float]] = {"time": times}
        for name in ("managed", "unmanaged", "spilled", "limit"):
            series[name] = [last[worker][t].get(name, 0.0) for t in times]
        found[worker] = series
    return found


def frame(columns: dict[str, list[Any]], names: Sequence[str]) -> pd.DataFrame:
    """The columns as a DataFrame with these column names (in this order):
    numbers as floats (a missing one NaN), as ``RunData.tasks`` makes them.
    Made floats here, not by pandas a column at a time: 0.8 -> 0.3 ms for a
    task table of one row."""
    import numpy as np
    import pandas as pd

    data = {
        name: (
            np.array(columns.get(name, []), dtype=float)  # None: NaN
            if name in _FLOATS
            else columns.get(name, [])
        )
        for name in names
    }
    return pd.DataFrame(data, columns=list(names))


#: The columns :func:`frame` makes floats.
_FLOATS = _NUMBERS | {
    "stall_s",
    "total_s",
    "mean_s",
    "time",
    "managed",
    "unmanaged",
    "spilled",
    "limit",
}

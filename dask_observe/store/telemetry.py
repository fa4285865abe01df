"""Writing the cluster's telemetry into the store, and reading it back for a run."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import time
from collections.abc import Iterable, Sequence
from typing import Any

LOG_COLUMNS = ("time", "level", "source", "worker", "logger", "message")
TASK_COLUMNS = (
    "key", "prefix", "worker", "start", "stop", "duration_s", "status", "nbytes",
    "thread", "compute_s", "transfer_s", "disk_read_s", "disk_write_s",
    "deserialize_s", "exception", "traceback",
)  # fmt: skip
METRIC_COLUMNS = ("time", "worker", "name", "value")
EVENT_COLUMNS = ("time", "kind", "worker", "data")

#: The stored columns of each table after (seq, cluster), in the order of the
#: records the scheduler plugin sends; named, so that a migration adding a column
#: cannot shift them.
_STORED = {
    "logs": ("time", "level", "source", "worker", "logger", "message"),
    "tasks": (
        "time", "key", "prefix", "span_ids", "worker", "thread", "start", "stop",
        "status", "nbytes", "compute_s", "transfer_s", "disk_read_s",
        "disk_write_s", "deserialize_s", "exception", "traceback",
    ),
    "metrics": ("time", "worker", "name", "value"),
    "events": ("time", "kind", "worker", "data"),
}  # fmt: skip


def _insert(table: str) -> str:
    columns = ("seq", "cluster", *_STORED[table])
    marks = ", ".join("?" * len(columns))
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"


def _json(data: Any) -> str:
    return json.dumps(data, default=str)


def ingest(
    conn: sqlite3.Connection,
    cluster: str,
    records: Sequence[tuple[int, Sequence[Any]]],
    lost: dict[str, int],
) -> int:
    """Insert pulled records (``(number, record)`` pairs) inside the caller's
    transaction; ``lost`` counts records dropped before they could be read, by
    kind (log, task, metrics, event)."""
    logs: list[tuple[Any, ...]] = []
    tasks: list[tuple[Any, ...]] = []
    metrics: list[tuple[Any, ...]] = []
    events: list[tuple[Any, ...]] = [
        (time.time(), "dropped", None, _json({"kind": kind, "count": count}))
        for kind, count in lost.items()
        if count
    ]
    for _, record in records:
        kind, fields = record[0], record[1:]
        if kind == "log":
            logs.append(tuple(fields))
        elif kind == "task":
            tasks.append(tuple(fields))
        elif kind == "metrics":
            t, worker, values = fields
            metrics.extend((t, worker, name, value) for name, value in values.items())
        elif kind == "event":
            t, event_kind, worker, data = fields
            events.append((t, event_kind, worker, _json(data)))
    total = len(logs) + len(tasks) + len(metrics) + len(events)
    if not total:
        return 0
    (last,) = conn.execute(
        "UPDATE sequence SET value = value + ? RETURNING value", (total,)
    ).fetchone()
    seq = iter(range(last - total + 1, last + 1))
    for table, rows in (("logs", logs), ("tasks", tasks), ("metrics", metrics),
                        ("events", events)):  # fmt: skip
        if rows:
            conn.executemany(_insert(table), [(next(seq), cluster, *r) for r in rows])
    return total


def level_number(level: str | int) -> int:
    """``"warning"`` or ``30`` to 30; a clear error for anything else."""
    if isinstance(level, int):
        return level
    number = logging.getLevelNamesMapping().get(level.upper())
    if number is None:
        raise ValueError(
            f"unknown log level {level!r}; use debug, info, warning, error"
        )
    return number


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def log_query(
    cluster: str | None,
    since: float | None,
    until: float | None,
    *,
    contains: str | None = None,
    regex: bool = False,
    level: str | int | None = None,
    worker: str | None = None,
    source: str | None = None,
) -> tuple[str, list[Any]]:
    """SQL and parameters for log lines; filters combine with AND."""
    where, params = _window("logs", cluster, since, until)
    if contains:
        if regex:
            re.compile(contains)  # a bad pattern is the caller's error, said early
            where.append("message REGEXP ?")
            params.append(contains)
        else:
            where.append("message LIKE ? ESCAPE '\\'")
            params.append(f"%{_escape_like(contains)}%")
    if level is not None:
        where.append("level >= ?")
        params.append(level_number(level))
    if worker is not None:
        where.append("worker = ?")
        params.append(worker)
    if source is not None:
        where.append("source = ?")
        params.append(source)
    sql = "SELECT seq, time, level, source, worker, logger, message FROM logs"
    return f"{sql} WHERE {' AND '.join(where)} ORDER BY time, seq", params


def _window(
    table: str, cluster: str | None, since: float | None, until: float | None
) -> tuple[list[str], list[Any]]:
    where: list[str] = ["1"]
    params: list[Any] = []
    if cluster is not None:
        where.append(f"{table}.cluster = ?")
        params.append(cluster)
    if since is not None:
        where.append(f"{table}.time >= ?")
        params.append(since)
    if until is not None:
        where.append(f"{table}.time <= ?")
        params.append(until)
    return where, params


def _select(
    table: str,
    columns: Sequence[str],
    window: tuple[str | None, float | None, float | None],
    **equal: Any,
) -> tuple[str, list[Any]]:
    """Rows of ``table`` in a cluster's time window whose columns equal the given
    values (None: any), oldest first."""
    where, params = _window(table, *window)
    for column, value in equal.items():
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    sql = f"SELECT {', '.join(columns)} FROM {table} WHERE {' AND '.join(where)}"
    return f"{sql} ORDER BY time, seq", params


def metric_query(
    cluster: str | None,
    since: float | None,
    until: float | None,
    name: str | None,
    worker: str | None,
) -> tuple[str, list[Any]]:
    return _select(
        "metrics", METRIC_COLUMNS, (cluster, since, until), name=name, worker=worker
    )


def event_query(
    cluster: str | None, since: float | None, until: float | None, kind: str | None
) -> tuple[str, list[Any]]:
    return _select("events", EVENT_COLUMNS, (cluster, since, until), kind=kind)


def task_query(
    cluster: str | None,
    span_id: str | None,
    since: float | None,
    until: float | None,
) -> tuple[str, list[Any], list[str]]:
    """Tasks of a run, in the order they ended: those of its span (and of spans
    opened inside it), or, for a run without a span, all that ended in its window."""
    columns = [c for c in TASK_COLUMNS if c != "duration_s"]  # derived on reading
    if not span_id:
        sql, params = _select("tasks", columns, (cluster, since, until))
        return sql, params, columns
    sql = f"SELECT {', '.join(columns)} FROM tasks WHERE cluster = ?"
    sql += " AND instr(span_ids, ?) > 0 ORDER BY seq"
    return sql, [cluster, span_id], columns


def regexp(pattern: str, text: str | None) -> bool:
    """SQLite's REGEXP operator: a case-sensitive Python ``re.search``."""
    return text is not None and re.search(pattern, text) is not None


def level_names(levels: Iterable[int]) -> list[str]:
    return [logging.getLevelName(level) for level in levels]

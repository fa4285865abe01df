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

_LOG_SQL = "INSERT INTO logs VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_TASK_SQL = f"INSERT INTO tasks VALUES ({', '.join('?' * 19)})"
_METRIC_SQL = "INSERT INTO metrics VALUES (?, ?, ?, ?, ?, ?)"
_EVENT_SQL = "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)"


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
    for sql, rows in ((_LOG_SQL, logs), (_TASK_SQL, tasks), (_METRIC_SQL, metrics),
                      (_EVENT_SQL, events)):  # fmt: skip
        if rows:
            conn.executemany(sql, [(next(seq), cluster, *row) for row in rows])
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


def metric_query(
    cluster: str | None,
    since: float | None,
    until: float | None,
    name: str | None,
    worker: str | None,
) -> tuple[str, list[Any]]:
    where, params = _window("metrics", cluster, since, until)
    for column, value in (("name", name), ("worker", worker)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    sql = "SELECT time, worker, name, value FROM metrics"
    return f"{sql} WHERE {' AND '.join(where)} ORDER BY time, seq", params


def regexp(pattern: str, text: str | None) -> bool:
    """SQLite's REGEXP operator: a case-sensitive Python ``re.search``."""
    return text is not None and re.search(pattern, text) is not None


def level_names(levels: Iterable[int]) -> list[str]:
    return [logging.getLevelName(level) for level in levels]

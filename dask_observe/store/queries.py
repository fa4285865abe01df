"""Writing the cluster's telemetry into the store, and reading it back for a run."""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from itertools import count
from typing import Any, NamedTuple

from dask_observe.capture.text import MAX_TEXT_BYTES, bounded
from dask_observe.capture.wire import LogRecord, MetricsRecord, TaskRecord, typed
from dask_observe.store import patterns

LOG_COLUMNS = (
    "time", "level", "source", "worker", "logger", "message", "task", "fields",
)  # fmt: skip
TASK_COLUMNS = (
    "key", "prefix", "worker", "start", "stop", "duration_s", "status", "nbytes",
    "thread", "compute_s", "transfer_s", "disk_read_s", "disk_write_s",
    "deserialize_s", "exception", "traceback", "ended",
)  # fmt: skip
METRIC_COLUMNS = ("time", "worker", "name", "value")
EVENT_COLUMNS = ("time", "kind", "worker", "data")

#: The stored columns of each table after (seq, cluster), in the order of the
#: records the scheduler plugin sends; named, so that a migration adding a column
#: cannot shift them.
_STORED = {
    "logs": LOG_COLUMNS,
    "tasks": (
        "time", "key", "prefix", "span_ids", "worker", "thread", "start", "stop",
        "status", "nbytes", "compute_s", "transfer_s", "disk_read_s",
        "disk_write_s", "deserialize_s", "exception", "traceback",
    ),
    "metrics": ("time", "worker", "name", "value"),
    "events": ("time", "kind", "worker", "data"),
}  # fmt: skip


#: The fields of each kind of wire record after its kind, by table: what a
#: reader of records as they are pulled (the live export) names them by.
RECORD_FIELDS = _STORED


#: Most rows one INSERT statement carries (see ``insert_rows``).
_ROWS_PER_STATEMENT = 5_000


def insert_rows(
    conn: sqlite3.Connection,
    table: str,
    columns: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
) -> None:
    """Insert ``rows`` (values of ``columns``, in order) in a few statements
    of many rows each, not ``executemany``'s one a row.

    Python's sqlite3 lets go of the GIL for every step of a statement and must
    take it back after: ``executemany`` steps once a row. Beside a thread that
    holds the GIL all the time (the event loop of 200 workers in a kernel),
    each row then waited for its turn: 400 records (7,600 metric rows) took
    371 ms to write in a recording kernel, where one statement per 5,000 rows
    waits twice (``benchmarks/README.md``, "Writing beside a busy event loop").
    """
    width = len(columns)
    # SQLite's limit on bound values (32,766 since 3.32, 999 before).
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    per_statement = max(1, min(_ROWS_PER_STATEMENT, limit // width))
    head = f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
    row = "(" + ", ".join("?" * width) + ")"
    for start in range(0, len(rows), per_statement):
        part = rows[start : start + per_statement]
        values = [value for r in part for value in r]
        conn.execute(head + ", ".join([row] * len(part)), values)


def _bounded(text: str | None) -> str | None:
    return None if text is None else bounded(text)


def _json(data: Any) -> str:
    return json.dumps(data, default=str)


def _rows_of(raw: Sequence[Any]) -> int:
    """The rows a record becomes: one per metric of a metrics record."""
    if raw and raw[0] == "metrics":
        record = typed(raw)
        assert isinstance(record, MetricsRecord)
        return len(record.values)
    return 1


def ingest(
    conn: sqlite3.Connection,
    cluster: str,
    records: Sequence[tuple[int, Sequence[Any]]],
    lost: dict[str, int],
) -> int:
    """Insert pulled records (``(number, record)`` pairs, each record a wire
    record or its plain tuple) inside the caller's transaction; ``lost``
    counts records dropped before they could be read, by kind (log, task,
    metrics, event)."""
    drops = [(kind, count) for kind, count in lost.items() if count]
    # Numbers first (a metrics record becomes a row per metric), so that each row
    # is built once, numbered in the order the cluster produced it.
    total = len(drops) + sum(_rows_of(record) for _, record in records)
    if not total:
        return 0
    (last,) = conn.execute(
        "UPDATE sequence SET value = value + ? RETURNING value", (total,)
    ).fetchone()
    seq = count(last - total + 1)
    logs: list[tuple[Any, ...]] = []
    tasks: list[tuple[Any, ...]] = []
    metrics: list[tuple[Any, ...]] = []
    events: list[tuple[Any, ...]] = []
    for _, raw in records:
        # Read by name one at a time: a list of them all lived long enough to
        # reach the collector's oldest generation (see ``buffer.untracked``).
        # One this version does not know raises, and the caller's transaction
        # writes nothing.
        record = typed(raw)
        # The columns of logs and tasks are the records' fields, in order;
        # their texts bounded (a capture of another version may not have).
        if isinstance(record, TaskRecord):
            if record.traceback or record.exception:
                record = record._replace(
                    exception=_bounded(record.exception),
                    traceback=_bounded(record.traceback),
                )
            tasks.append((next(seq), cluster, *record[1:]))
        elif isinstance(record, LogRecord):
            if len(record.message) > MAX_TEXT_BYTES // 4:
                record = record._replace(message=bounded(record.message))
            logs.append((next(seq), cluster, *record[1:]))
        elif isinstance(record, MetricsRecord):
            metrics.extend(
                (next(seq), cluster, record.time, record.worker, name, value)
                for name, value in record.values.items()
            )
        else:
            events.append(
                (next(seq), cluster, record.time, record.kind, record.worker,
                 _json(record.data))
            )  # fmt: skip
    now = time.time()
    for kind, n in drops:
        data = _json({"kind": kind, "count": n})
        events.append((next(seq), cluster, now, "dropped", None, data))
    for table, inserts in (("logs", logs), ("tasks", tasks), ("metrics", metrics),
                           ("events", events)):  # fmt: skip
        if inserts:
            insert_rows(conn, table, ("seq", "cluster", *_STORED[table]), inserts)
    return total


def level_number(level: str | int) -> int:
    """``"warning"`` or ``30`` to 30; a clear error for anything else (a
    number past what SQLite can bind was an OverflowError, a 500)."""
    if isinstance(level, int):
        if not 0 <= level <= 1000:
            raise ValueError(f"a level number is from 0 to 1000, not {level}")
        return level
    number = logging.getLevelNamesMapping().get(level.upper())
    if number is None:
        raise ValueError(
            f"unknown log level {level!r}; use debug, info, warning, error"
        )
    return number


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class Window(NamedTuple):
    """Which rows a query reads: a cluster, a time range, and, for a run, the
    slice of the store's sequence in which its rows were written."""

    cluster: str | None = None
    since: float | None = None
    until: float | None = None
    seq_after: int | None = None
    seq_upto: int | None = None


def _window(table: str, window: Window) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    for condition, value in (
        (f"{table}.seq > ?", window.seq_after),
        (f"{table}.seq <= ?", window.seq_upto),
        (f"{table}.cluster = ?", window.cluster),
        (f"{table}.time >= ?", window.since),
        (f"{table}.time <= ?", window.until),
    ):
        if value is not None:
            where.append(condition)
            params.append(value)
    return where, params


def _source(table: str, window: Window) -> str:
    # A run's slice of the sequence is a range of the table's rowid: read it in
    # order rather than through the time index, which costs a lookup a row.
    return f"{table} NOT INDEXED" if window.seq_after is not None else table


class Several(tuple):  # type: ignore[type-arg]
    """The parameters of a WHERE term with more than one ``?``."""


def field_filters(fields: Mapping[str, Any] | None) -> list[tuple[str, Any]]:
    """WHERE terms of log lines whose ``extra`` fields hold each of
    ``fields`` (name to value: a text, number or boolean)."""
    where: list[tuple[str, Any]] = []
    for name, value in (fields or {}).items():
        if not isinstance(value, (str, int, float, bool)):
            raise ValueError(
                f"fields: {name!r} must be a text, a number or a boolean, "
                f"not {type(value).__name__}"
            )
        path = '$."' + str(name).replace("\\", "\\\\").replace('"', '\\"') + '"'
        where.append(("json_extract(fields, ?) = ?", Several((path, value))))
    return where


def prefix_filter(window: Window, prefix: str | None) -> list[tuple[str, Any]]:
    """The WHERE term of log lines written by the window's tasks of
    ``prefix`` (a line holds its task's key, the tasks table its prefix)."""
    if prefix is None:
        return []
    clauses, params = _window("tasks", window)
    among = " AND ".join(["tasks.prefix = ?", *clauses])
    return [
        (f"task IN (SELECT key FROM tasks WHERE {among})", Several((prefix, *params)))
    ]


def _select(
    table: str,
    columns: Sequence[str],
    window: Window,
    *,
    where: Sequence[tuple[str, Any]] = (),
    order: str = "time, seq",
    limit: int | None = None,
    null: Sequence[str] = (),
    **equal: Any,
) -> tuple[str, list[Any]]:
    """Rows of ``table`` in ``window`` that meet each ``(clause, value)`` of
    ``where``, whose ``null`` columns are NULL and whose columns equal the
    given values (None: any; a list: any of its values)."""
    # SQLite tests the terms in the order written: the filters, which reject most
    # rows, go before the window's, which most rows pass (measured: a text filter
    # over 1,000,000 lines took 203 ms behind the window terms).
    clauses = [clause for clause, _ in where] + [f"{c} IS NULL" for c in null]
    params = [
        item
        for _, value in where
        for item in (value if isinstance(value, Several) else (value,))
    ]
    window_clauses, window_params = _window(table, window)
    clauses += window_clauses
    params += window_params
    for column, value in equal.items():
        if isinstance(value, list):  # one of these
            marks = ", ".join("?" * len(value))
            clauses.append(f"{column} IN ({marks})" if value else "0")
            params += value
        elif value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    sql = f"SELECT {', '.join(columns)} FROM {_source(table, window)}"
    sql = f"{sql} WHERE {' AND '.join(clauses) or '1'} ORDER BY {order}"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return sql, params


def stream_query(
    table: str,
    window: Window,
    after: int,
    limit: int,
    *,
    logs: dict[str, Any] | None = None,
) -> tuple[str, list[Any]]:
    """Rows of ``table`` numbered above ``after`` in ``window``, oldest first, at
    most ``limit``: what a live view asks for next. ``logs`` holds log filters
    (contains, regex, level, worker, source, own, task, fields, prefix)."""
    columns = {
        "logs": ("seq", *LOG_COLUMNS),
        "metrics": ("seq", *METRIC_COLUMNS),
        "events": ("seq", *EVENT_COLUMNS),
    }[table]
    # A line's task may be stored before or after the page it is on, so
    # the tasks a prefix names are the window's from its start, unbounded.
    tasks = window._replace(seq_upto=None)
    after = max(after, window.seq_after or 0)
    window = window._replace(seq_after=after)
    if table != "logs":
        return _select(table, columns, window, order="seq", limit=limit)
    filters = dict(logs or {})
    where = log_filters(
        filters.pop("contains", None),
        bool(filters.pop("regex", False)),
        filters.pop("level", None),
        bool(filters.pop("own", False)),
    )
    where += field_filters(filters.pop("fields", None))
    where += prefix_filter(tasks, filters.pop("prefix", None))
    output, filters["source"] = source_filter(filters.get("source"))
    return _select(
        "logs", columns, window, where=where + output, order="seq", limit=limit,
        **filters,
    )  # fmt: skip


def log_query(
    window: Window,
    *,
    contains: str | None = None,
    regex: bool = False,
    level: str | int | None = None,
    worker: str | None = None,
    source: str | None = None,
    own: bool = False,
    task: str | None = None,
    fields: Mapping[str, Any] | None = None,
    prefix: str | None = None,
    output: bool = True,
) -> tuple[str, list[Any]]:
    """SQL and parameters for log lines; filters combine with AND. ``prefix``:
    lines of the tasks of that prefix in the window. Without ``output``, what
    tasks printed (OUTPUT_LOGGERS) is left out."""
    where = log_filters(contains, regex, level, own) + field_filters(fields)
    where += prefix_filter(window, prefix)
    if not output:
        where += [("logger <> ?", name) for name in OUTPUT_LOGGERS]
    said, source = source_filter(source)
    where += said
    columns = ("seq", *LOG_COLUMNS)
    return _select(
        "logs", columns, window, where=where, worker=worker, source=source, task=task
    )


#: The loggers of what tasks print, to stdout and to stderr (from Python or
#: below it): the user's code talking, not a diagnosis of distributed's that
#: a flag's rule reads. (Warnings come as ``py.warnings``, as logging names
#: them.)
OUTPUT_LOGGERS = ("stdout", "stderr")

#: What distributed logs of dask-observe's own plugins ("Starting Worker plugin
#: dask-observe-worker", "Registering Nanny plugin dask-observe-nanny"): kept in
#: the store, shown only on request (``own=True``), never among the user's lines.
OWN_PLUGIN_TEXT = " plugin dask-observe"

#: What tasks wrote, asked for as a source of its own (``source="stdout"``):
#: stored as their worker's lines, of these loggers.
OUTPUT_SOURCES = {"stdout": "stdout", "stderr": "stderr", "warning": "py.warnings"}


def source_filter(source: str | None) -> tuple[list[tuple[str, Any]], str | None]:
    """A ``source`` filter as clauses and the source column's value: one of
    OUTPUT_SOURCES is its logger's lines, any other the lines of that source."""
    logger = OUTPUT_SOURCES.get(source or "")
    if logger is None:
        return [], source
    return [("logger = ?", logger)], None


def log_filters(
    contains: str | None,
    regex: bool,
    level: str | int | None,
    own: bool = False,
) -> list[tuple[str, Any]]:
    """The WHERE terms of a text and level filter on log lines; without
    ``own``, the lines about dask-observe's own plugins left out."""
    where: list[tuple[str, Any]] = []
    if contains:
        patterns.check_text(contains)
        if regex:
            patterns.compile_pattern(contains)  # a bad pattern is said early
            literal = patterns.required_literal(contains)
            if literal:  # in C, before the pattern runs on what is left
                where.append(("instr(message, ?) > 0", literal))
            where.append(("message REGEXP ?", contains))
        else:
            where.append(("message LIKE ? ESCAPE '\\'", f"%{_escape_like(contains)}%"))
    if level is not None:
        where.append(("level >= ?", level_number(level)))
    if not own:  # (instr, not LIKE: a few ns a line; last: it rejects few)
        where.append(("instr(message, ?) = 0", OWN_PLUGIN_TEXT))
    return where


def metric_query(
    window: Window, name: str | Sequence[str] | None, worker: str | None
) -> tuple[str, list[Any]]:
    """Samples of metric ``name``, or of several names (one pass over a
    run's slice, where a query a name scans it each time); None: all."""
    names = name if name is None or isinstance(name, str) else list(name)
    return _select("metrics", METRIC_COLUMNS, window, name=names, worker=worker)


def cluster_metric_max_query(window: Window, name: str) -> tuple[str, list[Any]]:
    """The highest cluster-wide value (a row without a worker) of metric
    ``name`` in ``window``: NULL where there is none."""
    return _select(
        "metrics",
        ["MAX(value) AS value"],
        window,
        order="1",
        null=["worker"],
        name=name,
    )


#: How far back (rows of the metrics table) a gauge's last value before a run
#: is looked for: a few minutes of a large cluster's samples.
BEFORE_ROWS = 100_000


def metric_before_query(window: Window, name: str) -> tuple[str, list[Any]]:
    """The last value of metric ``name`` for each worker (None: cluster-wide)
    stored before ``window`` began, on its cluster, within BEFORE_ROWS rows:
    where a gauge stood as the run began. One range of the table's rowid
    (SQLite takes a bare column from the row of the MAX); nothing for a
    window without a slice."""
    if window.seq_after is None:
        return "SELECT NULL AS worker, NULL AS value WHERE 0", []
    sql = (
        "SELECT worker, value, MAX(seq) FROM metrics WHERE seq <= ? AND seq > ? "
        "AND name = ? AND cluster = ? GROUP BY worker"
    )
    after = window.seq_after
    return sql, [after, after - BEFORE_ROWS, name, window.cluster]


def event_query(window: Window, kind: str | None) -> tuple[str, list[Any]]:
    return _select("events", EVENT_COLUMNS, window, kind=kind)


def task_query(
    window: Window, span_id: str | None, columns: Sequence[str] | None = None
) -> tuple[str, list[Any], list[str]]:
    """Tasks of a run, in the order they ended: those of its span (and of spans
    opened inside it, whenever they ended), or, for a run without a span, all that
    ended in its window. ``columns``: only these (default: TASK_COLUMNS but the
    derived ``duration_s``)."""
    if columns is None:
        columns = [c for c in TASK_COLUMNS if c != "duration_s"]  # derived on reading
    columns = list(columns)
    selected = ["time AS ended" if c == "ended" else c for c in columns]
    if not span_id:
        sql, params = _select("tasks", selected, window, order="seq")
        return sql, params, columns
    sql, params = _select(
        "tasks",
        selected,
        window._replace(since=None, until=None),
        where=[("instr(span_ids, ?) > 0", span_id)],
        order="seq",
    )
    return sql, params, columns


def _row_kind(kind: str) -> str:
    """``kind`` where rows of it are streamed (logs, metrics, events): a
    table name put into SQL, never anything else."""
    if kind not in ("logs", "metrics", "events"):
        raise ValueError(f"no rows of kind {kind!r}")
    return kind


def first_seq_since(kind: str) -> str:
    """SQL for the first row of ``kind`` (logs, metrics, events) written at or
    after a time (its one parameter)."""
    return f"SELECT min(seq) AS seq FROM {_row_kind(kind)} WHERE time >= ?"


def newest(kind: str, *, of_cluster: bool = False) -> str:
    """SQL for the seq of the OFFSET-th newest row of ``kind`` (0: the
    newest) in a slice of the sequence; ``of_cluster``, of one cluster's.
    Parameters: the slice (above, at most), the cluster if asked, OFFSET.
    Read newest first until found: no index holds a cluster's rows in order
    (a (cluster, time) one slowed ingest by a quarter), so a caller asking
    for a cluster's bounds the slice first (with this, for any cluster's)."""
    cluster = " AND cluster = ?" if of_cluster else ""
    return (
        f"SELECT seq FROM {_row_kind(kind)} WHERE seq > ? AND seq <= ?{cluster}"
        " ORDER BY seq DESC LIMIT 1 OFFSET ?"
    )


def level_names(levels: Iterable[int]) -> list[str]:
    return [logging.getLevelName(level) for level in levels]

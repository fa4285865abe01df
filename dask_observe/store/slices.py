"""A run's slice of the store, as rows, and back: what an archive publishes of
a run and a reader of the archive puts into a store of its own.

A run's telemetry is the rows of its cluster between its two sequence
numbers (``seq_start`` < seq <= ``seq_end``). Taken out as they are stored
and put into another store under fresh numbers (shifted as one block, so
their order and the run's bounds hold), they read back exactly as they did:
every query, rule and figure works on the copy unchanged, whichever other
runs that store holds (two machines' LocalClusters share an address; their
runs' slices never overlap in the sequence).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from dask_observe.store.connection import StoreError
from dask_observe.store.redaction import columns as text_columns

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd

    from dask_observe.redact import Redactor
    from dask_observe.store.runs import Runs

#: The telemetry tables, each a run's rows between its sequence numbers.
TELEMETRY = ("logs", "tasks", "metrics", "events")
#: The tables kept by run id.
BY_RUN = ("fine_metrics", "profiles")
#: Columns of a run's row that are the store's own bookkeeping (not carried).
_LOCAL = ("id", "seq_start", "seq_end")


def take(store: Runs, run_id: int) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    """The run's row (JSON columns decoded, ``seq_start``/``seq_end`` kept)
    and its tables by name (:data:`TELEMETRY` with their ``seq``, then
    :data:`BY_RUN` without ``run_id``) plus ``verdict`` (version, flags)."""
    import pandas as pd

    rows = store.rows("SELECT * FROM runs WHERE id = ?", (run_id,))
    if not rows:
        raise StoreError(f"no run {run_id} in {store.path}")
    record = dict(rows[0])
    if record["status"] == "running" or record["seq_end"] is None:
        raise StoreError(f"run {run_id} is still running: publish it when it ends")
    for column in ("settings", "environment"):
        record[column] = json.loads(record[column]) if record[column] else None
    tables: dict[str, pd.DataFrame] = {}
    window = (record["cluster"], record["seq_start"] or 0, record["seq_end"])
    for table in TELEMETRY:
        tables[table] = _frame(
            store,
            f"SELECT * FROM {table} NOT INDEXED"
            " WHERE cluster IS ? AND seq > ? AND seq <= ? ORDER BY seq",
            window,
        )
    for table in BY_RUN:
        frame = _frame(store, f"SELECT * FROM {table} WHERE run_id = ?", (run_id,))
        tables[table] = frame.drop(columns="run_id")
    verdict = store.rows(
        "SELECT version, flags FROM verdicts WHERE run_id = ?", (run_id,)
    )
    tables["verdict"] = pd.DataFrame(
        [dict(row) for row in verdict], columns=["version", "flags"]
    )
    return record, tables


def _frame(store: Runs, sql: str, params: tuple[Any, ...]) -> pd.DataFrame:
    import pandas as pd

    with store.reading() as conn:
        cursor = conn.cursor()
        cursor.row_factory = None  # plain tuples: a million rows, no Row objects
        cursor.execute(sql, params)
        columns = [d[0] for d in cursor.description]
        return pd.DataFrame.from_records(cursor.fetchall(), columns=columns)


def put(store: Runs, record: dict[str, Any], tables: dict[str, pd.DataFrame]) -> int:
    """Insert a run taken with :func:`take` (from this store or another) as a
    new run of ``store``; its id. Its telemetry gets fresh sequence numbers,
    one block, in its order."""
    start, end = int(record.get("seq_start") or 0), int(record["seq_end"])
    with store._transaction() as conn:
        (last,) = conn.execute(
            "UPDATE sequence SET value = value + ? RETURNING value",
            (end - start,),
        ).fetchone()
        base = last - (end - start)
        row = {k: v for k, v in record.items() if k not in _LOCAL}
        row.update(seq_start=base, seq_end=last)
        for column in ("settings", "environment"):
            if row.get(column) is not None:
                row[column] = json.dumps(row[column])
        row = {k: v for k, v in row.items() if k in _columns(conn, "runs")}
        cursor = conn.execute(
            f"INSERT INTO runs ({', '.join(row)}) VALUES ({_marks(row)})",
            tuple(row.values()),
        )
        run_id = cursor.lastrowid
        assert run_id is not None
        for table in TELEMETRY:
            frame = tables.get(table)
            if frame is None or frame.empty:
                continue
            frame = frame.assign(seq=frame["seq"].astype("int64") - start + base)
            _insert(conn, table, frame)
        for table in BY_RUN:
            frame = tables.get(table)
            if frame is not None and not frame.empty:
                _insert(conn, table, frame.assign(run_id=run_id))
        verdict = tables.get("verdict")
        if verdict is not None and not verdict.empty:
            _insert(conn, "verdicts", verdict.head(1).assign(run_id=run_id))
    return run_id


def _columns(conn: Any, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def _marks(columns: Any) -> str:
    return ", ".join("?" * len(columns))


def _insert(conn: Any, table: str, frame: pd.DataFrame) -> None:
    """Insert the frame's columns that ``table`` has (a newer writer's extra
    columns are left out; an older one's missing ones take their defaults)."""
    columns = [c for c in frame.columns if c in _columns(conn, table)]
    values = frame[columns].astype(object).where(frame[columns].notna(), None)
    conn.executemany(
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({_marks(columns)})",
        values.itertuples(index=False, name=None),
    )


def redacted(
    record: dict[str, Any], tables: dict[str, pd.DataFrame], redactor: Redactor
) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    """A taken run with its text through ``redactor``: the columns the store's
    own redaction rewrites (a run recorded before a rule, or in a store
    redacted since, leaves the machine as the rules say now). Only the texts
    the redactor suspects are looked at."""
    if not redactor.enabled:
        return record, tables
    columns = text_columns(redactor)
    record = dict(record)
    for column in ("name", "partial"):
        record[column] = redactor.maybe(record.get(column))
    record["environment"] = redactor.data(record.get("environment"))
    out = {
        table: redacted_frame(
            frame, redactor, columns.get("verdicts" if table == "verdict" else table)
        )
        for table, frame in tables.items()
    }
    return record, out


def redacted_frame(
    frame: pd.DataFrame,
    redactor: Redactor,
    columns: dict[str, Callable[[Any], Any]] | None = None,
) -> pd.DataFrame:
    """``frame`` with the text of ``columns`` (each with how to redact it;
    default: every text column, as text) through ``redactor``, looking only at
    the texts it suspects."""
    if not redactor.enabled or frame.empty:
        return frame
    if columns is None:
        texts = frame.select_dtypes(include=["object", "string"]).columns
        columns = {str(c): redactor.maybe for c in texts}
    for column, redact in columns.items():
        if column not in frame:
            continue
        values = frame[column].tolist()
        suspects = redactor.suspects(["" if v is None else str(v) for v in values])
        if suspects:
            for i in suspects:
                values[i] = redact(values[i])
            frame = frame.assign(**{column: values})
    return frame

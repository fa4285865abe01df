"""Redacting what a store already holds (``dask-observe redact``): runs recorded
before redaction existed, or before a pattern was added to ``observe.redact``.

New records are redacted before they are written (``dask_observe.redact``);
this rewrites the stored text columns through the same rules, table by table in
batches of rows, and makes sure the old bytes are gone from the file: SQLite's
``secure_delete`` zeroes what an update frees, and a checkpoint that truncates
the write-ahead log drops the old versions of the pages kept there.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from dask_observe.redact import Redactor

#: Rows read and rewritten at once (one transaction each).
BATCH = 5_000


@dataclass
class Redacted:
    """What a redaction changed (or, with ``dry_run``, would change): rows by
    table, and whether the old bytes left the file (a reader holding the
    write-ahead log can keep its old pages until it closes)."""

    rows: dict[str, int] = field(default_factory=dict)
    dry_run: bool = False
    log_truncated: bool = True

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def _json_column(redactor: Redactor) -> Callable[[Any], Any]:
    def redact(value: Any) -> Any:
        if value is None:
            return None
        return json.dumps(redactor.data(json.loads(value)), default=str)

    return redact


def columns(redactor: Redactor) -> dict[str, dict[str, Callable[[Any], Any]]]:
    """Every stored column that holds text from the cluster or the user."""
    text, data = redactor.maybe, _json_column(redactor)
    return {
        "logs": {"message": text},
        "tasks": {"key": text, "prefix": text, "exception": text, "traceback": text},
        "events": {"data": data},
        "runs": {"name": text, "partial": text, "environment": data},
        "profiles": {"prefix": text, "tree": data},
        "fine_metrics": {"prefix": text},
        "verdicts": {"flags": data},
        "task_figures": {"figures": data},
    }


def redact(
    conn: sqlite3.Connection,
    transaction: Callable[[], AbstractContextManager[sqlite3.Connection]],
    redactor: Redactor,
    *,
    dry_run: bool = False,
) -> Redacted:
    """Rewrite the stored text of every table through ``redactor``, a batch
    of rows a ``transaction`` (the store's own)."""
    done = Redacted(dry_run=dry_run)
    if not dry_run:
        conn.execute("PRAGMA secure_delete = ON")
    for table, rewrite in columns(redactor).items():
        names = list(rewrite)
        changed = 0
        last = 0
        while True:
            rows = conn.execute(
                f"SELECT rowid, {', '.join(names)} FROM {table}"
                " WHERE rowid > ? ORDER BY rowid LIMIT ?",
                (last, BATCH),
            ).fetchall()
            if not rows:
                break
            last = rows[-1][0]
            updates = []
            for row in rows:
                old = tuple(row[1:])
                new = tuple(rewrite[n](v) for n, v in zip(names, old, strict=True))
                # JSON that only changed its spacing is no change.
                if any(
                    o != n and not _same_json(o, n)
                    for o, n in zip(old, new, strict=True)
                ):
                    updates.append((*new, row[0]))
            changed += len(updates)
            if updates and not dry_run:
                assignments = ", ".join(f"{n} = ?" for n in names)
                with transaction() as writing:
                    writing.executemany(
                        f"UPDATE {table} SET {assignments} WHERE rowid = ?", updates
                    )
        done.rows[table] = changed
    if not dry_run and done.total:
        busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        done.log_truncated = not busy
    return done


def _same_json(old: Any, new: Any) -> bool:
    if not isinstance(old, str) or not isinstance(new, str):
        return False
    try:
        return bool(json.loads(old) == json.loads(new))
    except ValueError:
        return False

"""The store's runs: written as they start and end (with their settings,
environment, judged flags, fine metrics and profiles), read as records."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from dask_observe.store import queries, redaction, retention
from dask_observe.store.connection import (
    HOST,
    RunNotFound,
    StoreConnection,
    StoreError,
    pid_alive,
)
from dask_observe.store.redaction import Redacted
from dask_observe.store.rundata import RUN_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

    from dask_observe.redact import Redactor

RUN_STATUSES = ("running", "finished", "failed", "interrupted")

#: Running runs' tasks counted so far in this process, by (span, cluster, the
#: run's first sequence number): (the sequence number counted up to, tasks,
#: erred). Rows are only ever stored above the numbers already given (one
#: transaction writes a pull's rows and the sequence), so a count reads only
#: what was stored since the last: the panel asks every 5 s, and a running
#: run of a million tasks took 205 ms each time.
_counted: dict[tuple[str, str, int], tuple[int, int, int]] = {}
_counted_lock = threading.Lock()  # the server reads from a pool of threads
#: Runs whose counts are kept (a few run at once; the oldest entry goes).
COUNTED_RUNS = 64


#: A run's columns that a listing never reads: JSON of its settings, its
#: environment (each worker's packages, changed config: kilobytes) and its
#: history figures. Decoding them was 45 ms of listing 1,000 runs, in every
#: poll of the panel, every `dask-observe runs` and every run end's pruning.
DETAIL_COLUMNS = ("settings", "environment", "pace")


def _run_row(row: sqlite3.Row) -> dict[str, Any]:
    record = dict(zip(row.keys(), row, strict=True))
    if (
        record["status"] == "running"
        and record["host"] == HOST
        and not pid_alive(record["pid"])
    ):
        # Its recording process is gone (killed, crashed): every reader says
        # so at once, the read-only ones too (a writer's next open stores it).
        record["status"] = "interrupted"
    for column in DETAIL_COLUMNS:  # JSON, where read
        if column in record:
            value = record[column]
            record[column] = json.loads(value) if value else None
    ended = record["ended"]
    record["duration_s"] = None if ended is None else ended - record["started"]
    return record


class Runs(StoreConnection):
    """The runs of a store (see :class:`BaseStore`)."""

    # -- runs: writing -----------------------------------------------------------
    def create_run(
        self,
        name: str,
        *,
        cluster: str | None = None,
        span_id: str | None = None,
        started: float | None = None,
    ) -> int:
        """Insert a new ``running`` run and return its id; ``started`` is
        when, on its cluster's clock (now by this process's, by default)."""
        # One statement (see ``_write``); ``_query`` runs it and reads its id.
        (row,) = self._query(
            "INSERT INTO runs"
            " (name, status, started, cluster, span_id, host, pid, seq_start)"
            " VALUES (?, 'running', ?, ?, ?, ?, ?, (SELECT value FROM sequence))"
            " RETURNING id",
            (name, started or time.time(), cluster, span_id, HOST, os.getpid()),
        )
        return int(row[0])

    def end_run(
        self,
        run_id: int,
        status: str,
        *,
        n_tasks: int = 0,
        n_failed: int = 0,
        ended: float | None = None,
        partial: str | None = None,
        n_running: int = 0,
    ) -> None:
        """Close a run with its final status and counts (``n_tasks`` counts
        the ``n_running`` still running as it ended); ``partial`` says why
        it was not kept whole (kept with the end: a store short of room may
        take one write and not two)."""
        if status not in RUN_STATUSES or status == "running":
            raise ValueError(f"a run cannot end as {status!r}")
        self._write(
            "UPDATE runs SET status = ?, ended = ?, n_tasks = ?, n_failed = ?,"
            " n_running = ?, seq_end = (SELECT value FROM sequence),"
            " partial = coalesce(?, partial) WHERE id = ?",
            (
                status, ended or time.time(), n_tasks, n_failed, n_running,
                partial, run_id,
            ),
        )  # fmt: skip

    def set_partial(self, run_id: int, why: str) -> None:
        """Mark a run as recorded partially, and say why."""
        self._write("UPDATE runs SET partial = ? WHERE id = ?", (why, run_id))

    def set_settings(
        self, run_id: int, settings: dict[str, Any], environment: dict[str, Any]
    ) -> None:
        """The settings a run is judged under (see ``Run.settings``) and the
        environment it ran in (``Run.environment``)."""
        self._write(
            "UPDATE runs SET settings = ?, environment = ? WHERE id = ?",
            (json.dumps(settings), json.dumps(environment), run_id),
        )

    def wall_times(self, name: str, before: int, limit: int) -> list[float]:
        """The wall times of the newest ``limit`` finished runs named ``name``
        before run ``before``, newest first: one indexed read, where the
        whole listing (every run's settings and environment decoded) was
        read for each comparison."""
        rows = self._query(
            "SELECT ended - started FROM runs WHERE name = ? AND id < ?"
            " AND status = 'finished' AND ended IS NOT NULL"
            " ORDER BY id DESC LIMIT ?",
            (name, before, limit),
        )
        return [float(row[0]) for row in rows]

    def set_environment(self, run_id: int, environment: dict[str, Any]) -> None:
        """The environment a run started in, kept until its end completes it
        (``set_settings``)."""
        self._write(
            "UPDATE runs SET environment = ? WHERE id = ?",
            (json.dumps(environment), run_id),
        )

    def set_fine_metrics(
        self, run_id: int, rows: Sequence[tuple[str, str, str, str, float]]
    ) -> None:
        """A run's fine performance metrics: (context, prefix, activity, unit,
        value) rows, replacing any stored before."""
        if not rows:  # one statement, not a transaction of three
            self._write("DELETE FROM fine_metrics WHERE run_id = ?", (run_id,))
            return
        with self._transaction(bulk=True) as conn:
            conn.execute("DELETE FROM fine_metrics WHERE run_id = ?", (run_id,))
            queries.insert_rows(
                conn,
                "fine_metrics",
                ("run_id", "context", "prefix", "activity", "unit", "value"),
                [(run_id, *row) for row in rows],
            )

    def set_profiles(self, run_id: int, trees: dict[str, Any]) -> None:
        """A run's profile trees by prefix ("" for the whole run), as JSON."""
        if not trees:  # one statement, not a transaction of three
            self._write("DELETE FROM profiles WHERE run_id = ?", (run_id,))
            return
        with self._transaction(bulk=True) as conn:
            conn.execute("DELETE FROM profiles WHERE run_id = ?", (run_id,))
            queries.insert_rows(
                conn,
                "profiles",
                ("run_id", "prefix", "tree"),
                [(run_id, p, json.dumps(tree)) for p, tree in trees.items()],
            )

    def profiles(self, run_id: int) -> dict[str, Any]:
        """A run's profile trees by prefix (see :meth:`set_profiles`)."""
        rows = self._query(
            "SELECT prefix, tree FROM profiles WHERE run_id = ? ORDER BY prefix",
            (run_id,),
        )
        return {row["prefix"]: json.loads(row["tree"]) for row in rows}

    def prune(
        self,
        policy: retention.Policy,
        *,
        dry_run: bool = False,
        keep: Collection[int] = (),
        compact: bool = True,
    ) -> retention.Pruned:
        """Remove the runs ``policy`` lets go, with their telemetry, and give
        the space back (see :mod:`dask_observe.store.retention`); a running run
        is never pruned, nor one in ``keep``. ``dry_run`` says what would go
        and changes nothing. Without ``compact`` the file shrinks only once a
        quarter of it is free (what a recorder does as each run ends)."""
        if self.readonly and not dry_run:
            raise StoreError(f"the store {self.path} is open read-only")
        with self._lock:
            return retention.prune(
                self._conn, self.path, self.run_records(brief=True), policy,
                dry_run=dry_run, keep=keep, compact=compact,
            )  # fmt: skip

    def redact(self, redactor: Redactor, *, dry_run: bool = False) -> Redacted:
        """Rewrite what the store holds through ``redactor`` (runs recorded
        before its rules; see :mod:`dask_observe.store.redaction`);
        ``dry_run`` counts what would change and changes nothing."""
        if self.readonly and not dry_run:
            raise StoreError(f"the store {self.path} is open read-only")
        with self._lock:
            return redaction.redact(
                self._conn, self._transaction, redactor, dry_run=dry_run
            )

    # -- runs: reading -----------------------------------------------------------
    def run_records(
        self, limit: int | None = None, *, brief: bool = False
    ) -> list[dict[str, Any]]:
        """All runs, newest first, as dicts with the columns of :meth:`runs`.
        A running run's ``n_tasks`` and ``n_failed`` count its tasks stored so
        far (a run's end stores them: "running · 0 tasks" showed on the card
        of a run whose cell had done hundreds). ``brief``: without
        DETAIL_COLUMNS, for listings."""
        columns = "*"
        if brief:
            columns = ", ".join(
                c for c in self._run_table_columns() if c not in DETAIL_COLUMNS
            )
        sql = f"SELECT {columns} FROM runs ORDER BY id DESC"
        params: tuple[Any, ...] = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (limit,)
        records = [_run_row(row) for row in self._query(sql, params)]
        for record in records:
            if record["status"] == "running" and record["span_id"]:
                record["n_tasks"], record["n_failed"] = self._tasks_so_far(record)
        return records

    def _run_table_columns(self) -> list[str]:
        return [str(r["name"]) for r in self._query("PRAGMA table_info(runs)")]

    def count_runs(self) -> int:
        """How many runs the store holds."""
        return int(self._query("SELECT count(*) AS n FROM runs")[0]["n"])

    def _tasks_so_far(self, record: dict[str, Any]) -> tuple[int, int]:
        """Tasks of a running run's span stored since it began, and those
        erred: those counted before (in this process), and those stored since."""
        began = int(record["seq_start"] or 0)
        key = (str(record["span_id"]), str(record["cluster"]), began)
        with _counted_lock:
            upto, n, erred = _counted.get(key, (began, 0, 0))
        last = self.last_seq()
        if last < upto:  # not the file counted before: count it all
            upto, n, erred = began, 0, 0
        (row,) = self._query(
            "SELECT count(*) AS n, coalesce(sum(status = 'erred'), 0) AS erred"
            " FROM tasks WHERE seq > ? AND seq <= ? AND cluster = ?"
            " AND instr(span_ids, ?) > 0",
            (upto, last, key[1], key[0]),
        )
        n, erred = n + int(row["n"]), erred + int(row["erred"])
        with _counted_lock:
            if key not in _counted and len(_counted) >= COUNTED_RUNS:
                del _counted[next(iter(_counted))]  # the oldest
            _counted[key] = (last, n, erred)
        return n, erred

    def runs(self) -> pd.DataFrame:
        """All runs, newest first.

        Columns: id, name, status, started, ended, duration_s, n_tasks, n_failed,
        n_flags, cluster. Times are timezone-aware UTC timestamps.
        """
        import pandas as pd

        frame = pd.DataFrame(self.run_records(), columns=list(RUN_COLUMNS))
        for column in ("started", "ended"):
            frame[column] = pd.to_datetime(frame[column], unit="s", utc=True)
        # Numbers, NaN while a run records: with every run still running the
        # column held only None, an object column no arithmetic takes.
        frame["duration_s"] = frame["duration_s"].astype("float64")
        return frame

    def run_record(self, run: int | str) -> dict[str, Any]:
        """One run as a dict; ``run`` is an id or ``"last"``."""
        if run == "last":
            rows = self._query("SELECT * FROM runs ORDER BY id DESC LIMIT 1")
            if not rows:
                raise RunNotFound(f"the store {self.path} holds no runs yet")
            return _run_row(rows[0])
        try:
            run_id = int(run)
            if isinstance(run, bool) or not 0 <= run_id < 2**63:
                raise ValueError(run)  # SQLite cannot even bind it
        except (TypeError, ValueError):
            raise RunNotFound(
                f"{run!r} is not a run id (a number, or 'last'); {self._latest_hint()}"
            ) from None
        rows = self._query("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise RunNotFound(f"no run {run_id} in {self.path}; {self._latest_hint()}")
        return _run_row(rows[0])

    def _latest_hint(self) -> str:
        latest = self.run_records(limit=5)
        if not latest:
            return "the store holds no runs yet"
        listed = ", ".join(f"{r['id']} ({r['name']})" for r in latest)
        return f"the latest runs are {listed}"

"""The durable store: one SQLite file in WAL mode, one writer, many readers.

This is the only module that speaks SQL. Kernels, the Jupyter server and the CLI all
open the same file; rows are plain dicts here and DataFrames at the public API.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from dask_observe.store import files, patterns, redaction, retention, telemetry
from dask_observe.store.redaction import Redacted
from dask_observe.store.run import RUN_COLUMNS, RunData
from dask_observe.store.schema import SchemaError, check_schema, migrate

if TYPE_CHECKING:
    import pandas as pd

    from dask_observe.redact import Redactor

RUN_STATUSES = ("running", "finished", "failed", "interrupted")


class StoreError(Exception):
    """The store cannot be used; the message names the file and why."""


class RunNotFound(StoreError, LookupError):
    """No run has the id that was asked for."""


class StoreMissing(StoreError, FileNotFoundError):
    """No store at the path (nothing recorded there yet): readers never create one."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"no dask-observe store at {path}")
        self.path = path


class QueryTooLong(StoreError):
    """A read ran past its deadline (see :meth:`Store.deadline`)."""


def _json_scalar(value: Any) -> Any:
    """JSON for numpy's scalars (a flag's evidence may hold them); text for
    anything else JSON cannot say (a verdict is kept, whatever a rule put in)."""
    return value.item() if hasattr(value, "item") else str(value)


def _run_row(row: sqlite3.Row) -> dict[str, Any]:
    record = dict(zip(row.keys(), row, strict=True))
    if (
        record["status"] == "running"
        and record["host"] == _HOST
        and not _pid_alive(record["pid"])
    ):
        # Its recording process is gone (killed, crashed): every reader says
        # so at once, the read-only ones too (a writer's next open stores it).
        record["status"] = "interrupted"
    for column in ("settings", "environment"):  # JSON
        value = record.get(column)
        record[column] = json.loads(value) if value else None
    ended = record["ended"]
    record["duration_s"] = None if ended is None else ended - record["started"]
    return record


#: This host's name, read once: runs recorded here have their process checked.
_HOST = socket.gethostname()


def _pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or not 0 < pid < 2**31:
        return False  # not a pid this host could have (a damaged row)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but someone else's
        return True
    return True


#: How recently a recorder must have reported a cluster for it to count as alive
#: (recorders report every few seconds while they run).
CLUSTER_ALIVE_S = 15.0


def cluster_id_of(address: str) -> str:
    """A short, stable, URL-safe name for a scheduler address."""
    return hashlib.sha256(address.encode()).hexdigest()[:12]


def _initialise(path: Path) -> None:
    """Give the new file at ``path`` its schema, in WAL mode (kept in the file)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        migrate(conn)
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()


class Store:
    """A dask-observe store at ``path``.

    Parameters
    ----------
    path
        The SQLite file. Created, owner-only, unless ``create`` is False.
    create
        Whether a missing file may be created. Readers that only show what exists
        pass False and get :class:`StoreMissing` instead.
    readonly
        Open without writing anything (SQLite ``mode=ro``): no migration, no
        runs marked interrupted. What the Jupyter server uses.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        readonly: bool = False,
    ) -> None:
        self.path = Path(path).expanduser()
        self.readonly = readonly
        # One connection shared by the threads of this process (the kernel's main
        # thread reading, the recorder's thread writing); the lock keeps it serial.
        self._lock = threading.RLock()
        self._conn = self._connect(create and not readonly, readonly)
        # A store dropped without close() closes its connection now. Left to
        # the collector, it would live on unseen: Python 3.11's connection is
        # in a reference cycle with its statement cache, so it waits for the
        # cyclic collector, holding its descriptors and locks meanwhile.
        self._closer = weakref.finalize(self, self._conn.close)
        if not readonly:  # a writer's duty (readers must not write)
            self._mark_interrupted_runs()

    # -- opening -----------------------------------------------------------------
    def _fail(self, why: object) -> StoreError:
        return StoreError(f"cannot open the dask-observe store {self.path}: {why}")

    def _check_existing(self) -> bool:
        """True for a store, False for an empty file (one being created); see
        :mod:`dask_observe.store.files` for what else is refused."""
        try:
            return files.check_existing(self.path)
        except FileNotFoundError:
            raise StoreMissing(self.path) from None
        except files.Refused as e:
            raise self._fail(e) from e

    def _create(self) -> None:
        blocker = next(
            (p for p in self.path.parents if p.exists() and not p.is_dir()), None
        )
        if blocker is not None:
            raise self._fail(f"{blocker} is a file, not a directory")
        try:
            files.check_directory(self.path)
        except files.Refused as e:
            raise self._fail(e) from e
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            # The store holds whatever the cluster logged: owner-only from birth;
            # never through a link, never over a file that appeared meanwhile.
            files.create_whole(self.path, _initialise)
        except OSError as e:
            raise self._fail(e.strerror or e) from e
        except sqlite3.DatabaseError as e:
            raise self._fail(e) from e

    def _connect(self, create: bool, readonly: bool) -> sqlite3.Connection:
        if create and not os.path.lexists(self.path):
            self._create()
        initialised = self._check_existing()
        if not initialised and (readonly or not create):
            # Empty: being created, or a file that is no store yet. A reader
            # never makes it one (`dask-observe runs` on it wrote a schema).
            raise StoreMissing(self.path)
        if not readonly and not os.access(self.path, os.R_OK | os.W_OK):
            if files.on_read_only_disk(self.path):
                raise self._fail("it is on a read-only file system")
            raise self._fail("permission denied (it must be readable and writable)")
        try:
            if readonly:
                conn = sqlite3.connect(
                    f"{self.path.resolve().as_uri()}?{self._readonly_mode()}",
                    uri=True, timeout=30, isolation_level=None,
                    check_same_thread=False,
                )  # fmt: skip
            else:
                conn = sqlite3.connect(
                    self.path, timeout=30, isolation_level=None, check_same_thread=False
                )
        except sqlite3.DatabaseError as e:
            raise self._fail(e) from e
        try:
            conn.row_factory = sqlite3.Row
            conn.create_function("REGEXP", 2, patterns.regexp, deterministic=True)
            if readonly:
                check_schema(conn)
                return conn
            # The schema first: a new file gets its application id in the same
            # transaction as its tables.
            migrate(conn)
            conn.execute("PRAGMA journal_mode = WAL")
            # NORMAL is durable across a crash of any process in WAL mode; only a
            # power loss may drop the last transactions.
            conn.execute("PRAGMA synchronous = NORMAL")
        except BaseException as e:
            conn.close()  # not left to live on in the traceback
            if isinstance(e, SchemaError):
                raise self._fail(f"not a dask-observe store: {e}") from e
            if isinstance(e, sqlite3.DatabaseError):
                # Locked, full, read-only, I/O: say what SQLite said; only a
                # file that is no database is "not a store".
                why = str(e)
                if "not a database" in why:
                    why = f"not a dask-observe store ({why})"
                raise self._fail(why) from e
            raise
        return conn

    def _readonly_mode(self) -> str:
        """How a reader opens the file. With no write-ahead log beside it, no
        writer has it open (a writer in WAL mode keeps its log while it
        lives), and it is read as ``immutable``: nothing is created beside it
        (a read-only connection made a ``-shm`` and ``-wal``, and could not
        read a store in a read-only directory at all). Else ``mode=ro``, which
        shares the writer's log."""
        if os.path.lexists(f"{self.path}-wal"):
            return "mode=ro"
        return "mode=ro&immutable=1"

    def _mark_interrupted_runs(self) -> None:
        """Runs whose recording process on this host is gone are ``interrupted``."""
        rows = self._query(
            "SELECT id, pid FROM runs WHERE status = 'running' AND host = ?", (_HOST,)
        )
        dead = [(row["id"],) for row in rows if not _pid_alive(row["pid"])]
        if dead:
            with self._transaction() as conn:
                conn.executemany(
                    "UPDATE runs SET status = 'interrupted' WHERE id = ?", dead
                )

    # -- plumbing ----------------------------------------------------------------
    @contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """Reads within the block stop after ``seconds`` with QueryTooLong
        (SQLite's progress handler, checked every few thousand steps: a slow
        pattern or a huge scan cannot hold a reader's thread for longer)."""
        end = time.monotonic() + seconds
        with self._lock:
            self._conn.set_progress_handler(lambda: time.monotonic() > end, 5_000)
            try:
                yield
            except sqlite3.OperationalError as e:
                if "interrupted" not in str(e):
                    raise
                raise QueryTooLong(
                    f"the query took longer than {seconds:g} s; narrow it (a "
                    "level, a worker, a shorter time window, a simpler pattern)"
                ) from None
            finally:
                self._conn.set_progress_handler(None, 0)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException:
                # SQLite rolls back by itself on some errors (a full disk, an
                # I/O error); rolling back again would raise "no transaction is
                # active" and hide the error that says what happened.
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def rows(self, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
        """The rows of a query (from :mod:`dask_observe.store.telemetry`)."""
        return self._query(sql, tuple(params))

    def last_seq(self) -> int:
        """The highest sequence number written so far."""
        return int(self._query("SELECT value FROM sequence")[0]["value"])

    def close(self) -> None:
        """Close the connection; the file stays as it is."""
        with self._lock:
            self._closer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<dask_observe.Store {str(self.path)!r}>"

    # -- runs: writing -----------------------------------------------------------
    def create_run(
        self, name: str, *, cluster: str | None = None, span_id: str | None = None
    ) -> int:
        """Insert a new ``running`` run and return its id."""
        with self._transaction() as conn:
            cursor = conn.execute(
                "INSERT INTO runs"
                " (name, status, started, cluster, span_id, host, pid, seq_start)"
                " VALUES (?, 'running', ?, ?, ?, ?, ?, (SELECT value FROM sequence))",
                (
                    name,
                    time.time(),
                    cluster,
                    span_id,
                    _HOST,
                    os.getpid(),
                ),
            )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def end_run(
        self,
        run_id: int,
        status: str,
        *,
        n_tasks: int = 0,
        n_failed: int = 0,
        ended: float | None = None,
        partial: str | None = None,
    ) -> None:
        """Close a run with its final status and counts; ``partial`` says why
        it was not kept whole (kept with the end: a store short of room may
        take one write and not two)."""
        if status not in RUN_STATUSES or status == "running":
            raise ValueError(f"a run cannot end as {status!r}")
        with self._transaction() as conn:
            conn.execute(
                "UPDATE runs SET status = ?, ended = ?, n_tasks = ?, n_failed = ?,"
                " seq_end = (SELECT value FROM sequence),"
                " partial = coalesce(?, partial) WHERE id = ?",
                (status, ended or time.time(), n_tasks, n_failed, partial, run_id),
            )

    def set_partial(self, run_id: int, why: str) -> None:
        """Mark a run as recorded partially, and say why."""
        with self._transaction() as conn:
            conn.execute("UPDATE runs SET partial = ? WHERE id = ?", (why, run_id))

    def set_settings(
        self, run_id: int, settings: dict[str, Any], environment: dict[str, Any]
    ) -> None:
        """The settings a run is judged under (see ``Run.settings``) and the
        environment it ran in (``Run.environment``)."""
        with self._transaction() as conn:
            conn.execute(
                "UPDATE runs SET settings = ?, environment = ? WHERE id = ?",
                (json.dumps(settings), json.dumps(environment), run_id),
            )

    def set_environment(self, run_id: int, environment: dict[str, Any]) -> None:
        """The environment a run started in, kept until its end completes it
        (``set_settings``)."""
        with self._transaction() as conn:
            conn.execute(
                "UPDATE runs SET environment = ? WHERE id = ?",
                (json.dumps(environment), run_id),
            )

    def set_verdict(
        self, run_id: int, flags: Sequence[dict[str, Any]], version: str
    ) -> None:
        """The flags a finished run raised (JSON-able dicts), judged by that
        version of dask-observe; their count goes in the run's row, for
        listings."""
        with self._transaction() as conn:
            conn.execute(
                "UPDATE runs SET n_flags = ? WHERE id = ?", (len(flags), run_id)
            )
            conn.execute(
                "INSERT OR REPLACE INTO verdicts (run_id, version, flags)"
                " VALUES (?, ?, ?)",
                (run_id, version, json.dumps(list(flags), default=_json_scalar)),
            )

    def verdict(self, run_id: int) -> tuple[str, list[dict[str, Any]]] | None:
        """The version that judged a run and the flags it raised (see
        :meth:`set_verdict`); None for a run never judged at its end."""
        rows = self._query(
            "SELECT version, flags FROM verdicts WHERE run_id = ?", (run_id,)
        )
        return (rows[0]["version"], json.loads(rows[0]["flags"])) if rows else None

    def set_fine_metrics(
        self, run_id: int, rows: Sequence[tuple[str, str, str, str, float]]
    ) -> None:
        """A run's fine performance metrics: (context, prefix, activity, unit,
        value) rows, replacing any stored before."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM fine_metrics WHERE run_id = ?", (run_id,))
            conn.executemany(
                "INSERT INTO fine_metrics"
                " (run_id, context, prefix, activity, unit, value)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(run_id, *row) for row in rows],
            )

    def set_profiles(self, run_id: int, trees: dict[str, Any]) -> None:
        """A run's profile trees by prefix ("" for the whole run), as JSON."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM profiles WHERE run_id = ?", (run_id,))
            conn.executemany(
                "INSERT INTO profiles (run_id, prefix, tree) VALUES (?, ?, ?)",
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
    ) -> retention.Pruned:
        """Remove the runs ``policy`` lets go, with their telemetry, and give
        the space back (see :mod:`dask_observe.store.retention`); a running run
        is never pruned, nor one in ``keep``. ``dry_run`` says what would go
        and changes nothing."""
        if self.readonly and not dry_run:
            raise StoreError(f"the store {self.path} is open read-only")
        with self._lock:
            return retention.prune(
                self._conn, self.path, self.run_records(), policy,
                dry_run=dry_run, keep=keep,
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

    # -- clusters ----------------------------------------------------------------
    def register_cluster(self, address: str, dashboard: str | None) -> str:
        """Record that a recorder watches the scheduler at ``address`` (whose
        dashboard, if any, is served at ``dashboard``); return the cluster's id."""
        cluster_id = cluster_id_of(address)
        now = time.time()
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO clusters (id, address, dashboard, first_seen, last_seen)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (address) DO UPDATE"
                " SET dashboard = excluded.dashboard, last_seen = excluded.last_seen",
                (cluster_id, address, dashboard, now, now),
            )
        return cluster_id

    def touch_cluster(self, address: str) -> None:
        """A recorder still watches this cluster."""
        with self._transaction() as conn:
            conn.execute(
                "UPDATE clusters SET last_seen = ? WHERE address = ?",
                (time.time(), address),
            )

    def clusters(self) -> list[dict[str, Any]]:
        """Every cluster recorders have watched, most recently seen first, with
        ``alive``: whether a recorder reported it within CLUSTER_ALIVE_S."""
        now = time.time()
        return [
            {**dict(row), "alive": now - row["last_seen"] < CLUSTER_ALIVE_S}
            for row in self._query("SELECT * FROM clusters ORDER BY last_seen DESC")
        ]

    def cluster(self, cluster_id: str) -> dict[str, Any] | None:
        """One cluster by its id, or None."""
        rows = self._query("SELECT * FROM clusters WHERE id = ?", (cluster_id,))
        return dict(rows[0]) if rows else None

    # -- telemetry ---------------------------------------------------------------
    def cursor(self, cluster: str) -> tuple[str | None, int]:
        """The scheduler plugin instance and record number the store holds up to."""
        rows = self._query(
            "SELECT instance, seq FROM cursors WHERE cluster = ?", (cluster,)
        )
        return (rows[0]["instance"], rows[0]["seq"]) if rows else (None, 0)

    def ingest(
        self,
        cluster: str,
        records: Sequence[tuple[int, Sequence[Any]]],
        *,
        read_at: tuple[str | None, int],
        instance: str,
        last: int,
        dropped: dict[str, int] | None = None,
    ) -> int | None:
        """Write a pulled batch and move the cursor to ``last``, atomically.

        ``read_at`` is the cursor the batch was pulled from. When another writer
        (a thread or process recording the same cluster) has moved the cursor
        since, nothing is written and None is returned: no record is stored twice.
        ``dropped`` is the plugin's running totals of records dropped unread, by
        kind; the store records what is new since the last batch.
        """
        dropped = dropped or {}
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT instance, seq, dropped FROM cursors WHERE cluster = ?",
                (cluster,),
            ).fetchone()
            current = (row["instance"], row["seq"]) if row else (None, 0)
            if current != read_at:
                return None
            before = (
                json.loads(row["dropped"])
                if row and row["instance"] == instance
                else {}
            )
            lost = {kind: n - before.get(kind, 0) for kind, n in dropped.items()}
            written = telemetry.ingest(conn, cluster, records, lost)
            conn.execute(
                "INSERT INTO cursors (cluster, instance, seq, dropped)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (cluster) DO UPDATE"
                " SET instance = excluded.instance, seq = excluded.seq,"
                " dropped = excluded.dropped",
                (cluster, instance, last, json.dumps(dropped)),
            )
        return written

    def append(self, cluster: str, records: Sequence[Sequence[Any]]) -> int:
        """Write records that came by another way than a pull (what a partial
        run read from distributed at its end), numbered after everything
        stored; the cursor of the cluster's pulls is left alone."""
        with self._transaction() as conn:
            return telemetry.ingest(conn, cluster, list(enumerate(records)), {})

    def frame(
        self, sql: str, params: Sequence[Any], columns: Sequence[str]
    ) -> pd.DataFrame:
        """The rows of a query as a DataFrame with these column names."""
        import pandas as pd

        with self._lock:
            # Plain tuples: sqlite3.Row objects cost a third more to fetch and
            # convert (a million tasks: 4.4 s against 3.2 s, and 0.6 s more).
            cursor = self._conn.cursor()
            cursor.row_factory = None
            rows = cursor.execute(sql, tuple(params)).fetchall()
        return pd.DataFrame(rows, columns=list(columns))

    # -- runs: reading -----------------------------------------------------------
    def run_records(self, limit: int | None = None) -> list[dict[str, Any]]:
        """All runs, newest first, as dicts with the columns of :meth:`runs`.
        A running run's ``n_tasks`` and ``n_failed`` count its tasks stored so
        far (a run's end stores them: "running · 0 tasks" showed on the card
        of a run whose cell had done hundreds)."""
        sql = "SELECT * FROM runs ORDER BY id DESC"
        params: tuple[Any, ...] = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (limit,)
        records = [_run_row(row) for row in self._query(sql, params)]
        for record in records:
            if record["status"] == "running" and record["span_id"]:
                record["n_tasks"], record["n_failed"] = self._tasks_so_far(record)
        return records

    def _tasks_so_far(self, record: dict[str, Any]) -> tuple[int, int]:
        """Tasks of a running run's span stored since it began, and those erred."""
        (row,) = self._query(
            "SELECT count(*) AS n, coalesce(sum(status = 'erred'), 0) AS erred"
            " FROM tasks WHERE seq > ? AND cluster = ? AND instr(span_ids, ?) > 0",
            (record["seq_start"] or 0, record["cluster"], record["span_id"]),
        )
        return int(row["n"]), int(row["erred"])

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

    def run(self, run: int | str = "last") -> RunData:
        """The run with this id, or the newest one for ``"last"``."""
        return RunData(self, self.run_record(run))

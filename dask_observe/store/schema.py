"""The store's schema and its migrations.

The schema version lives in SQLite's ``user_version`` and the file is marked as ours by
``application_id``, so a file that is some other SQLite database is recognised and left
untouched. Migrations only ever append: migration ``i`` brings version ``i`` to ``i+1``.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

#: "DOBS" in ASCII; written into the SQLite header of every store.
APPLICATION_ID = 0x444F4253

MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1: runs.
    """
    CREATE TABLE runs (
        id        INTEGER PRIMARY KEY AUTOINCREMENT,
        name      TEXT    NOT NULL,
        status    TEXT    NOT NULL
                  CHECK (status IN ('running', 'finished', 'failed', 'interrupted')),
        started   REAL    NOT NULL,
        ended     REAL,
        n_tasks   INTEGER NOT NULL DEFAULT 0,
        n_failed  INTEGER NOT NULL DEFAULT 0,
        n_flags   INTEGER NOT NULL DEFAULT 0,
        cluster   TEXT,
        span_id   TEXT,
        host      TEXT    NOT NULL,
        pid       INTEGER NOT NULL
    );
    CREATE INDEX runs_status ON runs (status);
    """,
    # 1 -> 2: telemetry. Every row that a UI streams carries ``seq``, one number
    # series across the tables, so a reader resumes from a single cursor. The
    # indexes are on time alone: queries narrow by time, then by cluster, and a
    # (cluster, time) index slowed task ingest by a quarter (measured).
    """
    CREATE TABLE sequence (value INTEGER NOT NULL);
    INSERT INTO sequence (value) VALUES (0);
    CREATE TABLE cursors (
        cluster   TEXT PRIMARY KEY,
        instance  TEXT NOT NULL,
        seq       INTEGER NOT NULL,
        dropped   TEXT    NOT NULL  -- running totals by kind, as JSON
    );
    CREATE TABLE logs (
        seq       INTEGER PRIMARY KEY,
        cluster   TEXT    NOT NULL,
        time      REAL    NOT NULL,
        level     INTEGER NOT NULL,
        source    TEXT    NOT NULL,
        worker    TEXT,
        logger    TEXT    NOT NULL,
        message   TEXT    NOT NULL
    );
    CREATE INDEX logs_time ON logs (time);
    CREATE TABLE tasks (
        seq       INTEGER PRIMARY KEY,
        cluster   TEXT    NOT NULL,
        time      REAL    NOT NULL,
        key       TEXT    NOT NULL,
        prefix    TEXT    NOT NULL,
        span_ids  TEXT    NOT NULL,
        worker    TEXT,
        thread    INTEGER,
        start     REAL,
        stop      REAL,
        status    TEXT    NOT NULL,
        nbytes    INTEGER,
        compute_s REAL,
        transfer_s REAL,
        disk_read_s REAL,
        disk_write_s REAL,
        deserialize_s REAL,
        exception TEXT,
        traceback TEXT
    );
    CREATE INDEX tasks_time ON tasks (time);
    CREATE TABLE metrics (
        seq       INTEGER PRIMARY KEY,
        cluster   TEXT    NOT NULL,
        time      REAL    NOT NULL,
        worker    TEXT,
        name      TEXT    NOT NULL,
        value     REAL    NOT NULL
    );
    CREATE INDEX metrics_time ON metrics (time);
    CREATE TABLE events (
        seq       INTEGER PRIMARY KEY,
        cluster   TEXT    NOT NULL,
        time      REAL    NOT NULL,
        kind      TEXT    NOT NULL,
        worker    TEXT,
        data      TEXT    NOT NULL
    );
    CREATE INDEX events_time ON events (time);
    -- The store's sequence number when a run started and ended: a run's rows lie
    -- between the two, so its queries read that slice, however large the store.
    ALTER TABLE runs ADD COLUMN seq_start INTEGER;
    ALTER TABLE runs ADD COLUMN seq_end INTEGER;
    """,
    # 2 -> 3: clusters that recorders have seen, with their dashboard: the only
    # addresses the Jupyter server's dashboard proxy will reach. ``id`` is a short
    # stable name for URLs; ``last_seen`` says whether a recorder still watches.
    """
    CREATE TABLE clusters (
        id         TEXT PRIMARY KEY,
        address    TEXT NOT NULL UNIQUE,
        dashboard  TEXT,
        first_seen REAL NOT NULL,
        last_seen  REAL NOT NULL
    );
    """,
    # 3 -> 4: distributed's fine performance metrics of a run's span, read once
    # when the run ends: where the tasks' time went (CPU, waiting, deserializing,
    # disk...) and exact spilled bytes, as the workers' own meters measured them.
    """
    CREATE TABLE fine_metrics (
        run_id    INTEGER NOT NULL REFERENCES runs (id),
        context   TEXT    NOT NULL,
        prefix    TEXT    NOT NULL,
        activity  TEXT    NOT NULL,
        unit      TEXT    NOT NULL,
        value     REAL    NOT NULL,
        PRIMARY KEY (run_id, context, prefix, activity, unit)
    );
    """,
    # 4 -> 5: why a run was recorded only partially (the capture plugins could
    # not run on its cluster); NULL for a run recorded fully.
    """
    ALTER TABLE runs ADD COLUMN partial TEXT;
    """,
    # 5 -> 6: distributed's statistical profile of a run's time window, read
    # when it ends, as a JSON tree (pruned) with the sampling interval; prefix
    # "" for the whole cluster (room for per-prefix profiles).
    """
    CREATE TABLE profiles (
        run_id    INTEGER NOT NULL REFERENCES runs (id),
        prefix    TEXT    NOT NULL,
        tree      TEXT    NOT NULL,
        PRIMARY KEY (run_id, prefix)
    );
    """,
    # 6 -> 7: the settings a run is judged under (JSON): the memory thresholds
    # its workers ran with and the recorder's ``observe.flags``, so that every
    # reader (kernel, CLI, server) raises the same flags; NULL for older runs.
    """
    ALTER TABLE runs ADD COLUMN settings TEXT;
    """,
    # 7 -> 8: the environment a run ran in (JSON, ``Run.environment``): package
    # versions by process, the cluster's shape, changed dask config, the code.
    """
    ALTER TABLE runs ADD COLUMN environment TEXT;
    """,
    # 8 -> 9: the flags a run raised, judged once when it ended (a JSON list),
    # with the version of dask-observe that judged them: a reader shows that
    # judgement rather than judging a million tasks again on every read.
    """
    CREATE TABLE verdicts (
        run_id    INTEGER PRIMARY KEY REFERENCES runs (id),
        version   TEXT    NOT NULL,
        flags     TEXT    NOT NULL
    );
    """,
    # 9 -> 10: runs published to an archive (``observe.archive``): the run's id
    # there (unique across machines, chosen at the first try, so that a retry
    # writes the same folder) and when it was published (NULL: tried, not yet
    # done; the next run's end tries again).
    """
    CREATE TABLE published (
        run_id    INTEGER NOT NULL REFERENCES runs (id),
        archive   TEXT    NOT NULL,
        uid       TEXT    NOT NULL,
        published REAL,
        PRIMARY KEY (run_id, archive)
    );
    """,
    # 10 -> 11: what a report shows of a run's tasks (prefix table, phase
    # totals, the task stream in pixel columns, the first failures), computed
    # at its end from the rows its verdict read: a report of a million tasks
    # then reads kilobytes, not the million rows (``report.tasks``).
    """
    CREATE TABLE task_figures (
        run_id    INTEGER PRIMARY KEY REFERENCES runs (id),
        version   TEXT    NOT NULL,
        figures   TEXT    NOT NULL
    );
    """,
    # 11 -> 12: a cluster whose scheduler stopped answering while its
    # connection held (a frozen process, a held event loop): when it last
    # answered, NULL while it answers. The panel says so, rather than show it
    # live and silent, or gone.
    """
    ALTER TABLE clusters ADD COLUMN silent_since REAL;
    """,
    # 12 -> 13: the workers a run lost (died, killed for memory or by a
    # signal, gone silent), counted from its verdict as it ends: a run that
    # finished with losses says so in every listing, not a green "finished".
    """
    ALTER TABLE runs ADD COLUMN n_lost INTEGER NOT NULL DEFAULT 0;
    """,
    # 13 -> 14: which task wrote a log line (its key; NULL outside tasks and
    # for older lines), and a logging call's ``extra`` fields (a JSON object).
    """
    ALTER TABLE logs ADD COLUMN task TEXT;
    ALTER TABLE logs ADD COLUMN fields TEXT;
    """,
    # 14 -> 15: the run's tasks still running when it ended (a hang stopped by
    # the user's timeout): counted in n_tasks, and said, not "0 tasks".
    """
    ALTER TABLE runs ADD COLUMN n_running INTEGER NOT NULL DEFAULT 0;
    """,
    # 15 -> 16: what a history reads of each run, kept by its end (or by the
    # first history that works it out, for runs recorded before): each
    # prefix's mean compute seconds a task (JSON; NULL: not worked out yet)
    # and its peak memory. A history of 400 runs read each one's tasks and
    # metrics again on every call.
    """
    ALTER TABLE runs ADD COLUMN pace TEXT;
    ALTER TABLE runs ADD COLUMN peak_memory REAL;
    """,
    # 16 -> 17: when a cluster's client or scheduler closed, as its recorder
    # saw it (NULL while watched): the panel said "live" for 15 s after a
    # client.close(), until the recorder's last touch grew old.
    """
    ALTER TABLE clusters ADD COLUMN closed_at REAL;
    """,
    # 17 -> 18: the processes whose clients watch each cluster, and where they
    # were made (a notebook's path in Jupyter, else the program): the panel
    # lists clusters by notebook, and one kernel closing its client no longer
    # marks closed a cluster another kernel still uses.
    """
    CREATE TABLE cluster_clients (
        address    TEXT    NOT NULL,
        host       TEXT    NOT NULL,
        pid        INTEGER NOT NULL,
        made_in    TEXT    NOT NULL,
        last_seen  REAL    NOT NULL,
        closed_at  REAL,
        PRIMARY KEY (address, host, pid)
    );
    """,
    # 18 -> 19: the wall-time verdicts of runs compared with the run of their
    # name before them (a history's first runs), kept by the version that
    # made them: a comparison reads both runs' tables, and each history of a
    # name made its first ones again (with pandas' import, half a second of
    # `dask-observe history`). Emptied whenever runs are deleted.
    """
    CREATE TABLE comparisons (
        earlier    INTEGER NOT NULL,
        later      INTEGER NOT NULL,
        threshold  REAL    NOT NULL,
        version    TEXT    NOT NULL,
        wall       TEXT    NOT NULL,
        PRIMARY KEY (earlier, later, threshold)
    );
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)


class SchemaError(Exception):
    """The file is not a dask-observe store this version can use."""


#: How long a header that looks torn is read again. A read without locks
#: (``immutable``) may catch a page half written: the first commit of a store
#: another process is creating, and, on a live store, every checkpoint that
#: copies the log's pages back into the file (the header's page among them).
#: Measured: 0.3 % of such reads of a store that took 20,000 lines a second
#: failed ("database disk image is malformed"); a moment later they read.
_TORN_HEADER_WAIT_S = 1.0
#: Seconds between two reads of a torn header.
_TORN_RETRY_S = 0.01


def _probe(path: Path) -> tuple[int, bool]:
    """The application id in the header of the SQLite file at ``path``, and
    whether it has tables.

    Read by SQLite itself, read-only and ``immutable`` (no locks taken, no
    ``-wal``/``-shm`` created, nothing written), never with ``open()``. POSIX
    locks belong to a process, and closing *any* descriptor of a file drops all
    of them: a header read with ``open()`` and ``close()`` while a connection of
    this process was alive released that connection's locks, so another process
    closing its last connection believed itself alone, checkpointed and deleted
    the write-ahead log this one still used ("disk I/O error", "database disk
    image is malformed" at the next open). SQLite keeps a descriptor open while
    other connections of the process hold locks on the same file, so a read
    through SQLite cannot do that, whoever else holds the file here.
    """
    uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
    probe = sqlite3.connect(uri, uri=True, isolation_level=None)
    try:
        application_id = int(probe.execute("PRAGMA application_id").fetchone()[0])
        tables = probe.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        return application_id, bool(tables)
    finally:
        probe.close()


def check_header(path: Path) -> bool:
    """Whether ``path`` holds a dask-observe store, read from the file's header
    before a connection that may write opens it (its first pragma would change
    another application's file): True for a store, False for an empty file (one
    being created). See :func:`_probe` for why SQLite reads it.

    Raises
    ------
    SchemaError
        For anything else: another application's database, not SQLite at all.
    """
    deadline = time.monotonic() + _TORN_HEADER_WAIT_S
    while True:
        size = path.stat().st_size
        if size == 0:
            return False
        try:
            application_id, has_tables = _probe(path)
        except sqlite3.DatabaseError:
            # Torn (a first page being written, a checkpoint under way), or not
            # SQLite at all: only a file that never reads is refused.
            if time.monotonic() < deadline:
                time.sleep(_TORN_RETRY_S)
                continue
            raise SchemaError("it is not an SQLite file") from None
        if application_id == APPLICATION_ID:
            return True
        # A store gets its id in the commit that makes its tables: tables
        # without it are another application's, at once.
        if not has_tables and time.monotonic() < deadline:
            time.sleep(0.05)
            continue
        raise SchemaError("it is an SQLite database of another application")


def refuse_code(conn: sqlite3.Connection) -> None:
    """Refuse a store that holds triggers or views, before any statement
    touches its tables. dask-observe's schema has none; SQLite runs a
    trigger when a row is written (a reading command marks dead recorders'
    runs interrupted: an ``AFTER UPDATE ON runs`` trigger planted in a store
    deleted every log row) and a view when read (a recursive one hung the
    command line). ``trusted_schema`` off also keeps functions of ours out of
    anything the schema holds."""
    conn.execute("PRAGMA trusted_schema = OFF")
    found = conn.execute(
        "SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'view')"
    ).fetchall()
    if found:
        listed = ", ".join(f"{kind} {name!r}" for kind, name in found[:5])
        raise SchemaError(
            f"it holds {listed}, which no dask-observe store has (someone added "
            "them): refused unread; drop them with the sqlite3 shell if you "
            "trust the file"
        )


def check_schema(conn: sqlite3.Connection) -> None:
    """For a reader that may not migrate: the schema is this version's."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"its schema version {version} is newer than this dask-observe "
            f"understands ({SCHEMA_VERSION}); upgrade dask-observe"
        )
    if version < SCHEMA_VERSION:
        raise SchemaError(
            f"it was written by an older dask-observe (schema {version}); run any "
            "dask-observe command on it once (dask-observe runs) to upgrade it"
        )


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema of ``conn`` up to :data:`SCHEMA_VERSION`.

    Raises
    ------
    SchemaError
        When the file belongs to another application or to a newer dask-observe.
    """
    application_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if application_id != APPLICATION_ID:
        has_tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if application_id != 0 or has_tables:
            raise SchemaError("it is an SQLite database of another application")
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"its schema version {version} is newer than this dask-observe "
            f"understands ({SCHEMA_VERSION}); upgrade dask-observe"
        )
    if version == SCHEMA_VERSION:
        return
    # BEGIN IMMEDIATE takes the write lock first, so two processes that open a new
    # store at once cannot both apply the same migration.
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for script in MIGRATIONS[version:]:
            for statement in script.split(";"):
                if statement.strip():
                    conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise

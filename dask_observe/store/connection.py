"""Opening the store's one SQLite file safely, and the plumbing every part of
the store reads and writes through: one connection per process and store,
serial under a lock, transactions, deadlines on reads."""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from dask_observe.store import files, patterns, room
from dask_observe.store.schema import SchemaError, check_schema, migrate, refuse_code

if TYPE_CHECKING:
    import pandas as pd


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


#: What a query past its deadline advises: what the user asked for can be
#: asked for narrower.
NARROW_IT = "narrow it (a level, a worker, a shorter time window, a simpler pattern)"


#: This host's name, read once: runs recorded here have their process checked.
HOST = socket.gethostname()


def pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or not 0 < pid < 2**31:
        return False  # not a pid this host could have (a damaged row)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but someone else's
        return True
    return True


def _initialise(path: Path) -> None:
    """Give the new file at ``path`` its schema, in WAL mode (kept in the file)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        migrate(conn)
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()


#: How long a close waits for a statement of another thread to end. Past it,
#: the connection is left open: the process is ending, and SQLite's journal
#: keeps the file whole without a close.
CLOSE_WAIT_S = 5.0


def _close_between(lock: threading.RLock, conn: sqlite3.Connection) -> None:
    """Close ``conn`` between statements, never under one: the finalizer runs
    at the interpreter's exit, on the main thread, while a daemon thread (a
    recorder marking its cluster closed) may be inside a statement on it, and
    a connection closed under a statement crashes the process."""
    if not lock.acquire(timeout=CLOSE_WAIT_S):
        return
    try:
        conn.close()
    finally:
        lock.release()


class StoreConnection:
    """A connection to the dask-observe store at ``path``.

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
        #: Each read stops after this many seconds with QueryTooLong (None:
        #: no limit). The command line sets one: a store is a file anyone
        #: could have handed over, and no read of it may hang a terminal.
        self.read_deadline_s: float | None = None
        self._within_deadline = False
        self._conn = self._connect(create and not readonly, readonly)
        # A store dropped without close() closes its connection now. Left to
        # the collector, it would live on unseen: Python 3.11's connection is
        # in a reference cycle with its statement cache, so it waits for the
        # cyclic collector, holding its descriptors and locks meanwhile.
        self._closer = weakref.finalize(self, _close_between, self._lock, self._conn)
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
            refuse_code(conn)
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
            "SELECT id, pid FROM runs WHERE status = 'running' AND host = ?", (HOST,)
        )
        dead = [(row["id"],) for row in rows if not pid_alive(row["pid"])]
        if dead:
            with self._transaction() as conn:
                conn.executemany(
                    "UPDATE runs SET status = 'interrupted' WHERE id = ?", dead
                )

    # -- plumbing ----------------------------------------------------------------
    @contextmanager
    def deadline(self, seconds: float, advice: str = NARROW_IT) -> Iterator[None]:
        """Reads within the block stop after ``seconds`` with QueryTooLong,
        which gives ``advice`` (SQLite's progress handler, checked every few
        thousand steps: a slow pattern or a huge scan cannot hold a reader's
        thread for longer)."""
        end = time.monotonic() + seconds
        with self._lock:
            self._conn.set_progress_handler(lambda: time.monotonic() > end, 5_000)
            self._within_deadline = True
            try:
                yield
            except sqlite3.OperationalError as e:
                if "interrupted" not in str(e):
                    raise
                raise QueryTooLong(
                    f"the query took longer than {seconds:g} s; {advice}"
                ) from None
            finally:
                self._conn.set_progress_handler(None, 0)
                self._within_deadline = False

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The connection for one read, under the lock and, where a
        :attr:`read_deadline_s` is set and no wider deadline holds, within it."""
        with self._lock:
            if self.read_deadline_s is None or self._within_deadline:
                yield self._conn
            else:
                with self.deadline(self.read_deadline_s):
                    yield self._conn

    @contextmanager
    def _transaction(self, bulk: bool = False) -> Iterator[sqlite3.Connection]:
        """A write transaction. ``bulk``, one that brings records in (a
        pulled batch, profiles), refuses to commit into the room kept for
        the ends of runs (:mod:`~dask_observe.store.room`)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                weigher = room.Weigher(self._conn, self.path) if bulk else None
                yield self._conn
                if weigher is not None:
                    weigher.check()
                self._conn.execute("COMMIT")
            except BaseException:
                # SQLite rolls back by itself on some errors (a full disk, an
                # I/O error); rolling back again would raise "no transaction is
                # active" and hide the error that says what happened.
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    def _write(self, sql: str, params: Sequence[Any]) -> None:
        """One statement that writes, as its own transaction (the connection
        is in autocommit mode: SQLite takes the write lock, waiting as
        ``BEGIN IMMEDIATE`` would, and rolls the statement back if it fails).
        One statement where a transaction around it made three: each lets go
        of the GIL and waits to take it back, up to 5 ms each beside a thread
        that computes (the in-process scheduler's event loop;
        ``benchmarks/busy_write.py``)."""
        with self._lock:
            self._conn.execute(sql, params)

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self.reading() as conn:
            return conn.execute(sql, params).fetchall()

    def rows(self, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
        """The rows of a query (from :mod:`dask_observe.store.queries`)."""
        return self._query(sql, tuple(params))

    def plain_rows(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """The rows of a query as plain tuples: sqlite3.Row objects cost a
        third more to fetch and convert (a million tasks: 4.4 s against 3.2 s,
        and 0.6 s more)."""
        with self.reading() as conn:
            cursor = conn.cursor()
            cursor.row_factory = None
            return cursor.execute(sql, tuple(params)).fetchall()

    def frame(
        self, sql: str, params: Sequence[Any], columns: Sequence[str]
    ) -> pd.DataFrame:
        """The rows of a query as a DataFrame with these column names."""
        import pandas as pd

        return pd.DataFrame(self.plain_rows(sql, params), columns=list(columns))

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

"""Opening a store touches nothing else: another application's database, a
file others may write, a link, a device. Real files, the real command line."""

from __future__ import annotations

import contextlib
import gc
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dask_observe.store import BaseStore, StoreError

from .conftest import dask_observe_cli

READING = (["runs"], ["logs", "last"], ["flags", "last"], ["report", "last"])


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """Another application's SQLite database, in WAL mode, closed cleanly."""
    path = tmp_path / "app" / "notes.sqlite"
    path.parent.mkdir()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE notes (text)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.close()
    os.chmod(path, 0o600)
    return path


def test_another_applications_database_is_left_byte_identical(foreign: Path) -> None:
    before = snapshot(foreign.parent)
    for readonly in (False, True):
        with pytest.raises(StoreError, match="SQLite database of another application"):
            BaseStore(foreign, readonly=readonly)
    for command in READING:
        done = dask_observe_cli(foreign, *command)
        assert done.returncode == 1, command
        assert "another application" in done.stderr
    assert snapshot(foreign.parent) == before  # no -wal, no -shm, same bytes


def test_a_store_others_may_write_is_refused_with_the_chmod_to_run(
    tmp_path: Path,
) -> None:
    path = tmp_path / "observe.sqlite"
    with BaseStore(path) as store:
        store.create_run("mine")
    os.chmod(path, 0o666)
    before = snapshot(tmp_path)
    with pytest.raises(StoreError, match=re.escape(f"chmod 600 {path}")):
        BaseStore(path)
    done = dask_observe_cli(path, "runs")
    assert done.returncode == 1 and f"chmod 600 {path}" in done.stderr
    assert snapshot(tmp_path) == before
    os.chmod(path, 0o600)
    with BaseStore(path) as store:
        assert [r["name"] for r in store.run_records()] == ["mine"]


def test_a_new_store_is_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "new" / "observe.sqlite"
    with BaseStore(path) as store:
        store.create_run("first")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(path.parent).st_mode & 0o777 == 0o700


def test_a_link_is_never_followed_nor_its_target_created(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "target.sqlite"
    link = tmp_path / "observe.sqlite"
    link.symlink_to(target)  # dangling
    with pytest.raises(StoreError, match="symbolic link"):
        BaseStore(link)
    assert not target.exists() and not target.parent.exists()


def test_a_device_is_not_a_store_and_gets_no_journal() -> None:
    journal = Path("/dev/null-journal")
    if journal.exists():  # left by an older dask-observe: what this test prevents
        journal.unlink()
    for readonly in (False, True):
        with pytest.raises(StoreError, match="not a regular file"):
            BaseStore("/dev/null", create=False, readonly=readonly)
    assert not journal.exists()


def test_a_readonly_store_reads_while_a_writer_writes(tmp_path: Path) -> None:
    path = tmp_path / "observe.sqlite"
    with BaseStore(path) as writer, BaseStore(path, readonly=True) as reader:
        writer.create_run("one")
        assert [r["name"] for r in reader.run_records()] == ["one"]
        writer.create_run("two")
        assert [r["name"] for r in reader.run_records()] == ["two", "one"]
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader.create_run("three")


def test_a_slow_read_stops_at_its_deadline(tmp_path: Path) -> None:
    path = tmp_path / "observe.sqlite"
    with BaseStore(path) as store:
        run_id = store.create_run("many lines", cluster="tcp://x:1")
        now = time.time()
        store.telemetry.append(
            "tcp://x:1",
            [
                ("log", now, 30, "worker", None, "l", f"line {i}")
                for i in range(100_000)
            ],
        )
        run = store.run(run_id)
        began = time.perf_counter()
        with (
            pytest.raises(StoreError, match=r"took longer than 0\.001 s"),
            store.deadline(0.001),
        ):
            run.logs(contains="nowhere", regex=True)
        assert time.perf_counter() - began < 1.0
        assert run.logs(contains="line 99999")["message"].tolist() == ["line 99999"]


WRITER = """
import sys, time
from dask_observe.store import BaseStore

# A recording holds two connections to the store: the session's and its recorder's.
session, recorder = BaseStore(sys.argv[1]), BaseStore(sys.argv[1])
for i in range(100_000):
    recorder.create_run(f"run {i}")
    print(i, flush=True)
    time.sleep(0.005)
"""


def test_a_second_connection_in_a_writer_keeps_its_wal_safe_from_other_readers(
    tmp_path: Path,
) -> None:
    """Another process opening and closing the store while a writer works (the
    panel, the CLI) must never take the writer's WAL away: whatever the writer
    committed before it was killed is there, and the file is sound."""
    path = tmp_path / "observe.sqlite"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writer = subprocess.Popen(
        [sys.executable, str(script), str(path)], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    try:
        committed = int(writer.stdout.readline())
        for _ in range(5):
            with BaseStore(path) as reader:
                reader.run_records()
            for _ in range(20):
                committed = int(writer.stdout.readline())
    finally:
        writer.kill()
        writer.wait()
    with BaseStore(path) as store:
        names = {run["name"] for run in store.run_records()}
        assert {f"run {i}" for i in range(committed + 1)} <= names
        (check,) = store.frame("PRAGMA integrity_check", (), ("result",))["result"]
        assert check == "ok"


def _close_in_another_process(path: Path) -> None:
    """What the CLI, a second notebook or the server does: open, read, close."""
    subprocess.run(
        [sys.executable, "-c", f"import sqlite3; sqlite3.connect({str(path)!r})"
         ".execute('SELECT count(*) FROM runs').fetchall()"],
        check=True,
    )  # fmt: skip


def test_opening_a_store_never_releases_another_connections_locks(
    tmp_path: Path,
) -> None:
    """A connection of this process that no BaseStore knows of (one a dropped store
    left to the garbage collector did exactly that) keeps its write-ahead log
    while a BaseStore opens and closes beside it and another process closes the
    last connection it knows of: the old header read (open() and close() of
    the file) dropped every lock of the process, and the other process then
    checkpointed and deleted the log under the live connection."""
    path = tmp_path / "observe.sqlite"
    BaseStore(path).close()
    unseen = sqlite3.connect(path, isolation_level=None)
    unseen.execute("INSERT INTO runs (name, status, started, host, pid)"
                   " VALUES ('kept', 'finished', 0, 'h', 1)")  # fmt: skip
    BaseStore(path).close()
    _close_in_another_process(path)
    assert Path(f"{path}-wal").exists()  # the old code: deleted under `unseen`
    unseen.execute("INSERT INTO runs (name, status, started, host, pid)"
                   " VALUES ('after', 'finished', 0, 'h', 1)")  # fmt: skip
    unseen.close()
    with BaseStore(path) as store:
        assert [r["name"] for r in store.run_records()] == ["after", "kept"]
        (check,) = store.frame("PRAGMA integrity_check", (), ("result",))["result"]
        assert check == "ok"


def test_a_store_dropped_without_close_lets_its_connection_go(tmp_path: Path) -> None:
    """Python 3.11 keeps a connection in a reference cycle (its statement cache):
    a dropped Store's connection waited for the cyclic collector, holding its
    descriptors and locks. Now it closes with the store."""
    path = tmp_path / "observe.sqlite"

    def descriptors() -> list[str]:
        found = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                found.append(os.readlink(f"/proc/self/fd/{fd}"))
        return [f for f in found if f.startswith(str(path))]

    gc.disable()  # as between two of the collector's passes
    try:
        BaseStore(path).run_records()
        assert descriptors() == []
    finally:
        gc.enable()


def test_a_store_in_a_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    """In a shared (sticky, world-writable) directory, another user can plant
    an observe.sqlite-wal beside the store, which SQLite then reads as part of
    it: `runs` listed only the attacker's run."""
    shared = tmp_path / "shared"
    shared.mkdir()
    path = shared / "observe.sqlite"
    with BaseStore(path) as store:
        store.create_run("mine")
    shared.chmod(0o1777)
    for readonly in (False, True):
        with pytest.raises(StoreError, match="others may write to its directory"):
            BaseStore(path, readonly=readonly)
    done = dask_observe_cli(path, "runs")
    assert done.returncode == 1 and "chmod 700" in done.stderr


def test_a_planted_sidecar_is_refused_before_sqlite_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "observe.sqlite"
    with BaseStore(path) as store:
        store.create_run("mine")
    wal = Path(f"{path}-wal")
    wal.write_bytes(b"planted")
    wal.chmod(0o666)
    for readonly in (False, True):
        with pytest.raises(
            StoreError, match=r"others may write to its observe\.sqlite-wal"
        ):
            BaseStore(path, readonly=readonly)
    assert wal.read_bytes() == b"planted"  # nothing of it was read as the store
    wal.unlink()
    with BaseStore(path) as store:
        assert [r["name"] for r in store.run_records()] == ["mine"]


def test_reading_commands_never_make_an_empty_file_a_store(tmp_path: Path) -> None:
    path = tmp_path / "observe.sqlite"
    path.touch(mode=0o600)
    for command in READING:
        done = dask_observe_cli(path, *command)
        assert "no dask-observe store" in (done.stdout + done.stderr).lower(), command
    assert path.stat().st_size == 0 and sorted(os.listdir(tmp_path)) == [path.name]


CREATE_STORES = """
import sys
from pathlib import Path
from dask_observe.store import BaseStore

for i in range(int(sys.argv[2])):
    BaseStore(Path(sys.argv[1]) / f"s{i}" / "observe.sqlite").close()
"""


def test_a_reader_never_sees_a_store_half_made(tmp_path: Path) -> None:
    """A panel opened while a kernel makes its store: the server's reads found
    the file mid-way through its first commit and said "not a dask-observe
    store: it is not an SQLite file". A store now appears whole, or not at all."""
    from dask_observe.store import StoreMissing

    n = 40
    maker = subprocess.Popen(
        [sys.executable, "-c", CREATE_STORES, str(tmp_path), str(n)]
    )
    try:
        for i in range(n):
            path = tmp_path / f"s{i}" / "observe.sqlite"
            while True:  # as fast as a reader can: every moment of its birth
                try:
                    BaseStore(path, readonly=True).close()
                    break
                except StoreMissing:
                    assert maker.poll() in (None, 0), "the maker failed"
    finally:
        maker.wait(timeout=60)
    assert maker.returncode == 0
    leftovers = [p.name for p in tmp_path.glob("s*/.*")]
    assert leftovers == [], leftovers  # no temporary file stays behind


@pytest.mark.parametrize(
    "planted",
    [
        # Fired by a reading command's one write (a dead recorder's run
        # marked interrupted): it deleted every log row.
        "CREATE TRIGGER wipe AFTER UPDATE ON runs BEGIN DELETE FROM logs; END",
        # A table replaced by a view that never ends: the command line hung.
        "ALTER TABLE events RENAME TO events_kept; CREATE VIEW events AS "
        "WITH RECURSIVE r(seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM r) "
        "SELECT seq, 0.0 AS time, '' AS kind, NULL AS worker, '{}' AS data, "
        "'' AS cluster FROM r",
    ],
    ids=["trigger", "recursive-view"],
)
def test_a_store_holding_code_is_refused_before_it_runs(
    tmp_path: Path, planted: str
) -> None:
    from dask_observe.capture.wire import LogRecord

    from .conftest import DASK_OBSERVE, subprocess_env

    path = tmp_path / "observe.sqlite"
    with BaseStore(path) as store:
        store.create_run("dead recorder")
        store.telemetry.append("tcp://s:1", [
            LogRecord("log", 1.0, 30, "worker", "w", "user", "kept line"),
        ])  # fmt: skip
    raw = sqlite3.connect(path)
    # A recorder on this host that died: a reader's open marks its run.
    raw.execute("UPDATE runs SET status = 'running', pid = 2147483646")
    raw.executescript(planted)
    raw.close()
    for command in (["runs"], ["logs", "last"], ["flags", "last"]):
        done = subprocess.run(
            [DASK_OBSERVE, *command], env=subprocess_env(path),
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 1, (command, done.stdout)
        assert "which no dask-observe store has" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT count(*) FROM logs").fetchone()[0] == 1
    assert raw.execute("SELECT status FROM runs").fetchone()[0] == "running"
    raw.close()
    with pytest.raises(StoreError, match="which no dask-observe store has"):
        BaseStore(path, create=False, readonly=True)


def test_a_read_past_the_command_lines_deadline_stops_with_a_message(
    tmp_path: Path,
) -> None:
    """A store is a file anyone may hand over; whatever its reads cost, the
    command line stops any one of them at ``--deadline`` and says what to do
    instead of hanging the terminal."""
    from dask_observe.capture.wire import LogRecord

    from .conftest import dask_observe_cli

    path = tmp_path / "observe.sqlite"
    with BaseStore(path) as store:
        run = store.create_run("many lines", cluster="tcp://s:1")
        now = time.time()
        store.telemetry.append("tcp://s:1", [
            LogRecord("log", now + i * 1e-6, 30, "worker", "w", "user", f"line {i}")
            for i in range(200_000)
        ])  # fmt: skip
        store.end_run(run, "finished")
    slow = dask_observe_cli(
        path, "--deadline", "0.001", "logs", "last", "--filter", "nothing", "--regex"
    )
    assert slow.returncode == 1, slow.stdout[-300:]
    assert "took longer than 0.001 s" in slow.stderr, slow.stderr
    assert "Traceback" not in slow.stderr
    # Within the default deadline, the same read answers.
    done = dask_observe_cli(path, "logs", "last", "--regex", "--filter", "line 199999$")
    assert done.returncode == 0 and done.stdout.count("line 199999") == 1, done.stdout
    bad = dask_observe_cli(path, "--deadline", "0", "runs")
    assert bad.returncode == 2 and "above 0" in bad.stderr, bad.stderr

"""The store never fails its users: concurrent processes, killed ones, a full
disk, a read-only file system. Real processes, real files, real mounts (a
tmpfs of the test's own, in a mount namespace made with ``unshare``)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from distributed import Client

import dask_observe
from dask_observe.recording.block import NotRecorded
from dask_observe.store import BaseStore, StoreError

from . import torture
from .conftest import NO_GIL_MONITOR


def test_many_processes_recording_reading_and_killed_leave_every_run_whole(
    tmp_path: Path,
) -> None:
    """Two recorders (a LocalCluster each block, as a notebook re-running its
    cells), a recorder killed mid-block, and short-lived readers of every kind
    (API, CLI, the server's read-only view, export, prune), some of them killed
    mid-read. Every block ran, every ended run is whole, the killed run reads
    interrupted, no open failed, and the file is sound. The old code lost a
    recorder's block to "disk I/O error" at its next open."""
    path = tmp_path / "observe.sqlite"
    outcome = torture.run(path, recorders=2, blocks=3, seconds=60, seed=0)
    assert outcome["readers"], "no reader ran beside the recorders"
    assert torture.check(path, outcome, blocks=3) == []


READ_BETWEEN = """
import sys
import dask_observe
store = dask_observe.open_store(sys.argv[1], create=False)
run = store.run("last")
run.flags(); run.report().html
"""


def test_blocks_recorded_in_turn_with_a_reader_between_all_run(
    tmp_path: Path,
) -> None:
    """The issue's plain case: one process records blocks in turn, each on a
    new cluster, without keeping the run; a short-lived process reads the last
    run's flags and report between them. The old code failed the second block."""
    from distributed import LocalCluster

    path = tmp_path / "observe.sqlite"
    for i in range(3):
        cluster = LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
        )
        with (
            cluster,
            Client(cluster) as client,
            dask_observe.record(f"block {i}", client=client, store=path),
        ):
            assert client.submit(sum, [i, 1]).result() == i + 1
        subprocess.run([sys.executable, "-c", READ_BETWEEN, str(path)], check=True)
    with BaseStore(path) as store:
        assert [r["name"] for r in store.run_records()] == [
            "block 2", "block 1", "block 0",
        ]  # fmt: skip
        assert {r["status"] for r in store.run_records()} == {"finished"}


WRITE_FAST = """
import sys, time
from dask_observe.store import BaseStore

cluster = "tcp://busy:8786"
with BaseStore(sys.argv[1]) as store:
    store.telemetry.register_cluster(cluster, None)
    instance, cursor = store.telemetry.cursor(cluster)
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:  # ~20,000 lines a second, 50 ms batches
        lines = [
            (cursor + i + 1, ("log", time.time(), 30, "worker", "w", "x", "line " * 9))
            for i in range(1000)
        ]
        store.telemetry.ingest(
            cluster, lines, read_at=(instance, cursor), instance="busy",
            last=cursor + 1000, dropped={},
        )
        instance, cursor = "busy", cursor + 1000
        time.sleep(0.05)
"""


def test_a_reader_opens_a_store_that_a_busy_recorder_writes_every_time(
    tmp_path: Path,
) -> None:
    """The Jupyter server opens the store for each read while a recorder
    commits 20,000 lines a second. The old code refused about 0.5 % of those
    opens ("not a dask-observe store: it is not an SQLite file", and the
    panel's stream failed): the header check before the open reads the file
    without locks, and each checkpoint rewrites the page it reads."""
    path = tmp_path / "observe.sqlite"
    BaseStore(path).close()
    writer = subprocess.Popen([sys.executable, "-c", WRITE_FAST, str(path), "6"])
    failed: list[str] = []
    opened = 0
    try:
        while writer.poll() is None:
            try:
                with BaseStore(path, create=False, readonly=True) as store:
                    store.last_seq()
                opened += 1
            except StoreError as e:
                failed.append(str(e))
    finally:
        writer.wait(timeout=60)
    assert writer.returncode == 0
    assert failed == [], f"{len(failed)} of {opened + len(failed)}: {failed[0]}"
    with BaseStore(path, create=False, readonly=True) as store:
        assert store.last_seq() >= 20_000  # it wrote while they read
    assert opened > 1000


def test_a_store_that_cannot_be_opened_never_stops_the_block(
    client: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another application's database where the store should be: the block runs,
    one warning says why, and what is yielded says it when asked for a run."""
    path = tmp_path / "notes.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (text)")
    conn.close()
    path.chmod(0o600)
    ran = False
    with (
        caplog.at_level(logging.WARNING, logger="dask_observe"),
        dask_observe.record("etl", client=client, store=path) as run,
    ):
        ran = client.submit(sum, [1, 2]).result() == 3
    assert ran
    assert isinstance(run, NotRecorded)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("dask_obs")]
    assert said == [
        "dask-observe: run 'etl' was not recorded (the block ran): cannot open the "
        f"dask-observe store {path}: not a dask-observe store: it is an SQLite "
        "database of another application"
    ]
    with pytest.raises(StoreError, match="was not recorded"):
        run.report()


def test_an_error_in_a_block_whose_store_failed_is_the_blocks_own(
    client: Client, tmp_path: Path
) -> None:
    (tmp_path / "dir.sqlite").mkdir()
    store = tmp_path / "dir.sqlite"
    with (
        pytest.raises(ZeroDivisionError) as raised,
        dask_observe.record("etl", client=client, store=store),
    ):
        1 / 0  # noqa: B018
    assert raised.value.__context__ is None  # no store error chained to it


ON_A_SMALL_DISK = """
import json, logging, sys, warnings
warnings.simplefilter("ignore")
from distributed import Client, LocalCluster
import dask_observe
path, readonly = sys.argv[1], sys.argv[2] == "readonly"
said = []
class Keep(logging.Handler):
    def emit(self, record):
        said.append(record.getMessage())
logging.getLogger("dask_observe").addHandler(Keep())

def chatty(i):
    log = logging.getLogger("distributed.worker")
    for j in range(50):
        log.warning("line %d %d %s", i, j, "x" * 1000)
    return i

with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                  dashboard_address=":0") as cluster, Client(cluster) as client:
    with dask_observe.record("big", client=client, store=path):
        total = sum(client.gather(client.map(chatty, range(80))))
out = {"ran": total == sum(range(80)), "said": said}
if not readonly:
    with dask_observe.open_store(path, create=False) as store:
        row = store.run_record("last")
        out["run"] = {k: row[k] for k in ("status", "partial", "n_tasks")}
print(json.dumps(out))
"""


#: Lines of 1 kB logged one commit each into a store on a 1.2 MB disk until
#: it refuses them, then the run's end: what a long run's pulls do, without
#: the cluster's timing.
LINE_BY_LINE = """
import json, sqlite3, sys, time
from dask_observe.store import BaseStore
from dask_observe.store.room import END_ROOM_BYTES, free_bytes
path = sys.argv[1]
with BaseStore(path) as store:
    run = store.create_run("lines", cluster="tcp://x:1")
    kept, refused = 0, None
    while refused is None:
        line = ("log", time.time(), 30, "worker", None, "u", f"{kept} " + "x" * 1000)
        try:
            store.telemetry.append("tcp://x:1", [line])
            kept += 1
        except sqlite3.Error as e:
            refused = str(e)
    free = free_bytes(store.path)
    store.end_run(run, "finished", n_tasks=0, partial=refused)
    row = store.run_record(run)
print(json.dumps({"kept": kept, "refused": refused, "free": free,
                  "room": END_ROOM_BYTES, "status": row["status"]}))
"""


def _on_a_small_disk(
    tmp_path: Path, readonly: bool, code: str = ON_A_SMALL_DISK
) -> dict[str, object]:
    """Run ``code`` with the store on a 1.2 MB tmpfs of its own (made
    read-only, after the store was created, with ``readonly``)."""
    unshare = shutil.which("unshare")
    assert unshare is not None, "util-linux's unshare is part of every Debian"
    script = tmp_path / "small_disk.py"
    script.write_text(code)
    mount = tmp_path / "disk"
    mount.mkdir()
    path = mount / "observe.sqlite"
    make = (
        "from dask_observe.store import BaseStore; import sys; BaseStore(sys.argv[1])"
    )
    mode = "readonly" if readonly else "rw"
    shell = (
        f"mount -t tmpfs -o size=1200k,mode=700 tmpfs {mount}"
        f" && {sys.executable} -c '{make}' {path}"
        + (f" && mount -o remount,ro {mount}" if readonly else "")
        + f" && exec {sys.executable} {script} {path} {mode}"
    )
    done = subprocess.run(
        [unshare, "--map-root-user", "--mount", "sh", "-c", shell],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, **NO_GIL_MONITOR},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_a_full_disk_is_said_in_the_runs_status_with_counts(tmp_path: Path) -> None:
    """80 tasks logging 4 MB on a 1.2 MB disk: the block runs, the run ends
    marked partial with the error and what it holds. The old code said
    "cannot rollback - no transaction is active" and left the run whole-looking."""
    out = _on_a_small_disk(tmp_path, readonly=False)
    assert out["ran"] is True
    run = out["run"]
    assert isinstance(run, dict)
    assert (run["status"], run["n_tasks"]) == ("finished", 80), out
    assert "database or disk is full" in run["partial"]
    assert " of 80 tasks stored" in run["partial"]
    said = " ".join(map(str, out["said"]))  # type: ignore[call-overload]
    assert "database or disk is full" in said
    assert "no transaction is active" not in said


def test_records_stop_short_of_the_room_a_runs_end_needs(tmp_path: Path) -> None:
    """Commit after commit takes the disk's last bytes into the write-ahead
    log: the run's end then found none and stayed "running" (3 of 30 runs of
    the test above on a busy host). Records are refused while the room kept
    for the ends of runs is free, and the end is written in it."""
    out = _on_a_small_disk(tmp_path, readonly=False, code=LINE_BY_LINE)
    kept, free, room = out["kept"], out["free"], out["room"]
    assert isinstance(kept, int) and isinstance(free, int) and isinstance(room, int)
    assert kept > 20, out
    assert out["refused"] == (
        f"database or disk is full ({free / 1024:,.0f} KiB free on its disk;"
        " 256 KiB are kept for the ends of runs)"
    ), out
    assert free >= room, out
    assert out["status"] == "finished", out


def test_a_store_on_a_read_only_file_system_never_stops_the_block(
    tmp_path: Path,
) -> None:
    out = _on_a_small_disk(tmp_path, readonly=True)
    assert out["ran"] is True
    said = out["said"]
    assert isinstance(said, list) and len(said) == 1, said
    assert said[0].startswith("dask-observe: run 'big' was not recorded")
    assert said[0].endswith("it is on a read-only file system")


def test_reading_commands_read_a_store_on_a_read_only_file_system(
    tmp_path: Path,
) -> None:
    """A store on a read-only disk (or one the user may not write) is read,
    not refused ("attempt to write a readonly database")."""
    mount = tmp_path / "disk"
    mount.mkdir()
    path = mount / "observe.sqlite"
    make = (
        "from dask_observe.store import BaseStore; import sys; "
        "s = BaseStore(sys.argv[1]); r = s.create_run('kept'); s.end_run(r, 'finished')"
    )
    cli = f"{sys.executable} -m dask_observe.cli --store {path}"
    shell = (
        f"mount -t tmpfs -o size=1200k,mode=700 tmpfs {mount}"
        f' && {sys.executable} -c "{make}" {path}'
        f" && mount -o remount,ro {mount}"
        f" && {cli} runs && {cli} logs last && {cli} flags last"
    )
    done = subprocess.run(
        ["unshare", "--map-root-user", "--mount", "sh", "-c", shell],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "kept" in done.stdout and "finished" in done.stdout

"""The store on its own: a real SQLite file, created, migrated and refused."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import dask.config
import pytest

import dask_observe
from dask_observe.store import BaseStore, RunNotFound, StoreError
from dask_observe.store.schema import SCHEMA_VERSION

from .synthetic import SyntheticRun


def test_open_store_defaults_to_the_configured_path(store_path: Path) -> None:
    with dask_observe.open_store() as store:
        assert store.path == store_path
    assert store_path.exists()


def test_default_path_is_under_the_users_data_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    from dask_observe.config import default_store_path

    with dask.config.set({"observe.store": None}):
        assert default_store_path() == tmp_path / "dask-observe" / "observe.sqlite"


def test_the_environment_variable_sets_the_path_in_a_new_process(
    tmp_path: Path,
) -> None:
    path = tmp_path / "from-env.sqlite"
    code = "import dask_observe; print(dask_observe.open_store().path)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "DASK_OBSERVE__STORE": str(path)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == str(path)
    assert path.exists()


def test_store_file_is_owner_only_and_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "new" / "observe.sqlite"
    with BaseStore(path):
        pass
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_runs_are_listed_newest_first_with_the_documented_columns(
    tmp_path: Path,
) -> None:
    with BaseStore(tmp_path / "s.sqlite") as store:
        first = store.create_run("first", cluster="tcp://a:1")
        second = store.create_run("second")
        store.end_run(first, "finished", n_tasks=10, n_failed=1)
        runs = store.runs()
    assert list(runs.columns) == [
        "id",
        "name",
        "status",
        "started",
        "ended",
        "duration_s",
        "n_tasks",
        "n_failed",
        "n_flags",
        "cluster",
        "partial",  # added: why a run was recorded partially
        "n_lost",  # added: workers it lost (store.outcome)
        "n_running",  # added: tasks still running as it ended
    ]
    assert list(runs["name"]) == ["second", "first"]
    done = runs.set_index("id").loc[first]
    assert (done["status"], done["n_tasks"], done["n_failed"]) == ("finished", 10, 1)
    assert done["duration_s"] >= 0
    assert str(runs["started"].dt.tz) == "UTC"
    assert runs.set_index("id").loc[second]["status"] == "running"


def test_run_last_and_by_id(tmp_path: Path) -> None:
    with BaseStore(tmp_path / "s.sqlite") as store:
        a = store.create_run("a")
        b = store.create_run("b")
        assert store.run("last").id == b
        assert store.run(a).name == "a"
        assert store.run(str(a)).name == "a"


def test_a_runs_fine_metrics_and_profiles_replace_what_was_stored(
    tmp_path: Path,
) -> None:
    """Stored in one statement of many rows (more than SQLite binds in one:
    split), each write replaces the last, and nothing stored clears them."""
    rows = [
        ("execute", f"p{i}", "thread-cpu", "seconds", float(i)) for i in range(6000)
    ]
    tree = {"interval": 0.01, "root": {"name": "", "count": 1, "children": []}}
    with BaseStore(tmp_path / "s.sqlite") as store:
        run_id = store.create_run("a")
        store.set_fine_metrics(run_id, rows)
        store.set_profiles(run_id, {"": tree, "p1": tree})
        store.end_run(run_id, "finished")
        run = store.run(run_id)
        fine = run.fine_metrics()
        assert len(fine) == 6000 and fine["value"].sum() == sum(range(6000))
        assert sorted(store.profiles(run_id)) == ["", "p1"]
        store.set_fine_metrics(run_id, rows[:1])
        store.set_profiles(run_id, {"": tree})
        assert list(run.fine_metrics()["prefix"]) == ["p0"]
        assert list(store.profiles(run_id)) == [""]
        store.set_fine_metrics(run_id, [])
        store.set_profiles(run_id, {})
        assert run.fine_metrics().empty and store.profiles(run_id) == {}
        assert run.refresh().status == "finished"


def test_unknown_run_id_names_the_latest_runs(tmp_path: Path) -> None:
    with BaseStore(tmp_path / "s.sqlite") as store:
        store.create_run("etl")
        with pytest.raises(
            RunNotFound, match=r"no run 99 .* latest runs are 1 \(etl\)"
        ):
            store.run(99)
        with pytest.raises(RunNotFound, match="not a run id"):
            store.run("yesterday")


def test_last_in_an_empty_store_says_so(tmp_path: Path) -> None:
    with (
        BaseStore(tmp_path / "s.sqlite") as store,
        pytest.raises(RunNotFound, match="holds no runs yet"),
    ):
        store.run("last")


def test_a_path_that_cannot_be_created_names_the_path_and_why(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    path = blocker / "observe.sqlite"
    with pytest.raises(StoreError) as info:
        BaseStore(path)
    assert str(path) in str(info.value)
    assert f"{blocker} is a file, not a directory" in str(info.value)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="it is a directory"):
        BaseStore(tmp_path)


def test_a_file_that_is_not_sqlite_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("my precious notes\n" * 100)
    with pytest.raises(StoreError, match="not a dask-observe store") as info:
        BaseStore(path)
    assert str(path) in str(info.value)
    assert path.read_text() == "my precious notes\n" * 100


def test_another_applications_sqlite_file_is_refused_and_left_alone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE photos (id INTEGER)")
    with pytest.raises(StoreError, match="another application"):
        BaseStore(path)
    with sqlite3.connect(path) as conn:
        tables = conn.execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == [("photos",)]


def test_a_store_from_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite"
    with BaseStore(path):
        pass
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer than this dask-observe understands"):
        BaseStore(path)


def test_a_missing_store_is_not_created_when_creation_is_off(tmp_path: Path) -> None:
    path = tmp_path / "absent.sqlite"
    with pytest.raises(StoreError, match="no dask-observe store at"):
        BaseStore(path, create=False)
    with pytest.raises(StoreError, match="no dask-observe store at"):
        BaseStore(path, readonly=True)
    assert not path.exists()


def test_a_run_whose_recording_process_died_is_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    # A real process creates a run and dies without ending it.
    code = (
        "import os, sys; from dask_observe.store import BaseStore; "
        "BaseStore(sys.argv[1]).create_run('doomed'); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    with BaseStore(path) as store:
        assert store.run("last").status == "interrupted"


#: A process that ends while its daemon thread is inside a statement on the
#: store (as a recorder's thread marks its cluster closed while the notebook's
#: process exits). The statement naps in a SQL function so that the exit
#: always meets it.
EXIT_DURING_A_WRITE = """
import sys, threading, time
from dask_observe.store import BaseStore

store = BaseStore(sys.argv[1])
inside = threading.Event()

def nap():
    inside.set()
    time.sleep(0.3)
    return 1

store._conn.create_function("nap", 0, nap)

def write():
    with store._transaction() as conn:
        conn.execute("UPDATE sequence SET value = value + 41 + nap()")

threading.Thread(target=write, daemon=True).start()
inside.wait()
"""


def test_a_process_that_exits_during_another_threads_write_ends_cleanly(
    tmp_path: Path,
) -> None:
    """The store's connection is closed at exit between statements: closed
    under a daemon thread's statement, the process died of SIGSEGV (seen in
    the suite at a recorded cluster's close; here every time before the fix)."""
    path = tmp_path / "s.sqlite"
    with BaseStore(path) as store:
        before = store.last_seq()
    done = subprocess.run(
        [sys.executable, "-c", EXIT_DURING_A_WRITE, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with BaseStore(path) as store:  # the write under way when it exited is kept
        assert store.last_seq() == before + 42


def test_a_running_run_of_a_live_process_stays_running(tmp_path: Path) -> None:
    with BaseStore(tmp_path / "s.sqlite") as store:
        store.create_run("alive")
    with BaseStore(tmp_path / "s.sqlite") as store:
        assert store.run("last").status == "running"


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION))
def test_a_store_of_every_earlier_schema_is_migrated_and_its_runs_stay_readable(
    tmp_path: Path, version: int
) -> None:
    """A store as each earlier dask-observe left it (its schema, in WAL mode as
    they all set it) opens, migrates, and keeps its runs."""
    from dask_observe.store.schema import APPLICATION_ID, MIGRATIONS

    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:
        for script in MIGRATIONS[:version]:
            conn.executescript(script)
        conn.execute(
            "INSERT INTO runs (name, status, started, ended, n_tasks, host, pid)"
            f" VALUES ('from v{version}', 'finished', 100.0, 160.0, 7, 'h', 1)"
        )
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {version}")
    conn.close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.close()
    os.chmod(path, 0o600)
    with BaseStore(path) as store:
        run = store.run("last")
        assert (run.name, run.summary()["n_tasks"]) == (f"from v{version}", 7)
        assert run.logs().empty and run.tasks().empty
        new = store.create_run("after the migration")
        assert store.run(new).status == "running"
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_runs_cluster_wide_peak_is_read_from_its_own_window(tmp_path: Path) -> None:
    store = dask_observe.open_store(tmp_path / "s.sqlite")
    before = SyntheticRun(store, "before", span="s1")
    before.metrics(0.5, None, memory_spilled=9e9).end(1.0)
    run = SyntheticRun(store, "spilled", span="s2")
    run.metrics(1.0, None, workers=2.0, memory_spilled=1e6)
    run.metrics(2.0, None, workers=3.0, memory_spilled=5e6)
    # A worker's own reading is not the cluster's.
    run.metrics(2.5, "tcp://w:1", memory_spilled=7e9, workers=40.0)
    finished = run.end(3.0)
    assert finished.cluster_metric_max("workers") == 3.0
    assert finished.cluster_metric_max("memory_spilled") == 5e6
    assert finished.cluster_metric_max("nthreads") is None


def test_the_light_readers_give_what_the_frames_hold(tmp_path: Path) -> None:
    """``metrics`` of several names, ``event_rows``, ``log_lines`` and
    ``fine_rows`` (for readers that only walk rows) hold what the DataFrame
    readers do, in the same order."""
    store = dask_observe.open_store(tmp_path / "s.sqlite")
    run = SyntheticRun(store, "light")
    run.metrics(1.0, "tcp://w:1", memory_managed=10.0, memory_limit=100.0, x=1.0)
    run.metrics(2.0, "tcp://w:2", memory_managed=20.0, memory_rss=30.0)
    run.metrics(3.0, None, memory_managed=15.0)
    run.event(1.5, "worker-removed", "tcp://w:2", stimulus_id="s-1")
    run.event(2.5, "stall", None, span="x")
    run.log(1.2, "Event loop was unresponsive in Worker for 3.1s", "tcp://w:1")
    run.log(1.3, "something else", None, source="scheduler")
    run.log(1.4, "event loop was unresponsive in Scheduler", None, source="scheduler")
    run.meter("execute", "work", "thread-cpu", "seconds", 1.5)
    finished = run.end(4.0)

    names = ("memory_managed", "memory_rss", "memory_limit")
    several = finished.metrics(names, epoch=True)
    one_by_one = (
        finished.metrics(epoch=True).query("name in @names").reset_index(drop=True)
    )
    assert several.to_dict("records") == one_by_one.to_dict("records")
    assert sorted(set(several["name"])) == sorted(names)
    assert finished.metrics([], epoch=True).empty

    frame = finished.events(epoch=True)
    rows = finished.event_rows()
    assert [(t, k, w, d) for t, k, w, d in rows] == [
        (t, k, w if isinstance(w, str) else None, d)
        for t, k, w, d in zip(
            frame["time"], frame["kind"], frame["worker"], frame["data"], strict=True
        )
    ]
    assert [k for _, k, _, _ in finished.event_rows("stall")] == ["stall"]

    lines = finished.log_lines("loop was unresponsive")  # as logs(contains=) finds
    assert [(w, m[:10]) for _, w, m in lines] == [
        ("tcp://w:1", "Event loop"),
        (None, "event loop"),
    ]
    assert finished.fine_rows() == [("execute", "work", "thread-cpu", "seconds", 1.5)]


def test_a_cluster_two_notebooks_use_is_listed_by_both_and_live_until_both_close(
    tmp_path: Path,
) -> None:
    """Two kernels' clients on one cluster: listed by both notebooks; one
    closing its client leaves it live for the other (it was marked closed
    until the other's next touch, 3 s later); both closed, not live, and
    listed by the notebooks that used it last."""
    from dask_observe.store.clusters import ClientOf

    address = "tcp://10.0.0.1:8786"
    etl = ClientOf("login-1", 101, "work/etl.ipynb")
    plots = ClientOf("login-1", 202, "plots.ipynb")
    with BaseStore(tmp_path / "observe.sqlite") as store:

        def listed() -> tuple[bool, list[str]]:
            (found,) = store.telemetry.clusters()
            return bool(found["alive"]), found["notebooks"]

        store.telemetry.register_cluster(address, None, client=etl)
        store.telemetry.register_cluster(address, None, client=plots)
        assert listed() == (True, ["plots.ipynb", "work/etl.ipynb"])
        store.telemetry.close_cluster(address, client=etl, scheduler=False)
        assert listed() == (True, ["plots.ipynb"])
        store.telemetry.touch_cluster(address, client=plots)
        store.telemetry.close_cluster(address, client=plots, scheduler=False)
        assert listed() == (False, ["plots.ipynb", "work/etl.ipynb"])
        # A scheduler that closed closes the cluster for everyone.
        store.telemetry.register_cluster(address, None, client=etl)
        store.telemetry.register_cluster(address, None, client=plots)
        store.telemetry.close_cluster(address, client=etl, scheduler=True)
        assert listed()[0] is False
        # A week on, a process that stopped watching is forgotten as the next
        # one registers: a row a kernel, not a year of kernels.
        store.rows(
            "UPDATE cluster_clients SET last_seen = last_seen - 8 * 86400"
            " WHERE pid = ?",
            (etl.pid,),
        )
        store.telemetry.register_cluster(
            address, None, client=ClientOf("login-2", 7, "x.py")
        )
        made = [
            r["made_in"] for r in store.rows("SELECT made_in FROM cluster_clients", ())
        ]
        assert sorted(made) == ["plots.ipynb", "x.py"]


def test_a_cluster_seen_closing_is_not_live_until_watched_again(tmp_path: Path) -> None:
    """A recorder that saw its client or scheduler close says so at once: the
    cluster is not live from then (it was for 15 s more), until a recorder
    watches it again."""
    address = "tcp://10.0.0.1:8786"
    with BaseStore(tmp_path / "observe.sqlite") as store:

        def alive() -> bool:
            (found,) = store.telemetry.clusters()
            return bool(found["alive"])

        store.telemetry.register_cluster(address, None)
        assert alive()
        store.telemetry.close_cluster(address)
        assert not alive()
        store.telemetry.touch_cluster(address)  # another kernel's recorder watches it
        assert alive()
        store.telemetry.close_cluster(address)
        store.telemetry.register_cluster(address, "http://127.0.0.1:8787/status")
        assert alive()


def test_a_brief_listing_is_the_listing_without_each_run_s_details(
    store_path: Path,
) -> None:
    # Listings (the panel's poll, `runs`, pruning) never read a run's
    # settings and environment: decoding them was most of listing 1,000 runs.
    from dask_observe.store.rundata import RUN_COLUMNS
    from dask_observe.store.runs import DETAIL_COLUMNS

    with BaseStore(store_path) as store:
        run_id = store.create_run("nightly", cluster="tcp://x:1")
        store.set_environment(run_id, {"packages": {"dask": "2026.7.1"}})
        store.end_run(run_id, "finished", n_tasks=3)
        (full,) = store.run_records()
        (brief,) = store.run_records(brief=True)
    assert full["environment"] == {"packages": {"dask": "2026.7.1"}}
    assert not set(DETAIL_COLUMNS) & set(brief)
    assert {c: brief[c] for c in RUN_COLUMNS} == {c: full[c] for c in RUN_COLUMNS}

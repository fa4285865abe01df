"""The ``dask-observe`` command, run as a user would run it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from dask_observe.store import Store

from .conftest import DASK_OBSERVE, subprocess_env


def dask_observe(store_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DASK_OBSERVE, *args],
        env=subprocess_env(store_path),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_demo_records_a_run_and_says_where_to_look(store_path: Path) -> None:
    done = dask_observe(store_path, "demo")
    assert done.returncode == 0, done.stderr
    assert "Recorded run 1 'demo': finished" in done.stdout
    assert str(store_path) in done.stdout
    assert "dask-observe runs" in done.stdout
    with Store(store_path) as store:
        run = store.run("last")
        assert (run.name, run.status) == ("demo", "finished")
        # 200 mapped tasks and their sum, plus the array computation.
        assert run.summary()["n_tasks"] > 201


def test_runs_lists_the_recorded_runs(store_path: Path) -> None:
    with Store(store_path) as store:
        run_id = store.create_run("nightly etl", cluster="tcp://10.0.0.1:8786")
        store.end_run(run_id, "failed", n_tasks=42, n_failed=2)
    done = dask_observe(store_path, "runs")
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.splitlines()
    assert header.split()[:3] == ["id", "name", "status"]
    assert "nightly etl" in row
    assert "failed" in row and "42" in row and "tcp://10.0.0.1:8786" in row


def test_runs_on_an_empty_store_says_how_to_record_one(store_path: Path) -> None:
    done = dask_observe(store_path, "runs")
    assert done.returncode == 0
    assert "No runs in" in done.stdout
    assert "dask-observe demo" in done.stdout


def test_a_store_that_is_not_ours_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    done = dask_observe(path, "runs")
    assert done.returncode == 1
    assert done.stderr.startswith("dask-observe: error: cannot open")
    assert str(path) in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unknown_command_shows_usage(store_path: Path) -> None:
    done = dask_observe(store_path, "frobnicate")
    assert done.returncode == 2
    assert "usage: dask-observe" in done.stderr

"""Retention: ``dask-observe prune`` and ``observe.retention``, on a real store
with runs recorded from a real cluster."""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import time
from pathlib import Path

import dask.config
from distributed import Client

import dask_observe
from dask_observe.api import Run, Store
from dask_observe.recording.lifecycle import Recording
from dask_observe.store import BaseStore
from dask_observe.store.retention import Policy, file_bytes

from .conftest import dask_observe_cli


def chatty(i: int) -> int:
    log = logging.getLogger("user.chatty")
    for j in range(200):
        log.warning("run line %d.%d %s", i, j, "x" * 200)
    return i


def record(client: Client, name: str) -> Run:
    with dask_observe.record(name, client=client) as run:
        client.gather(client.map(chatty, range(10)))
    return run


def lines_stored(path: Path) -> int:
    """Log lines in the file, whichever run they belong to."""
    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT count(*) FROM logs").fetchone()[0])


def digest(path: Path) -> str:
    return "".join(
        hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (path, Path(f"{path}-wal"))
        if p.exists()
    )


def test_prune_keeps_the_newest_run_and_gives_the_space_back(
    client: Client, store_path: Path
) -> None:
    runs = [record(client, f"night-{i}") for i in range(3)]
    newest = runs[-1]
    kept_lines = len(newest.logs(contains="run line"))
    assert kept_lines == 2000 and lines_stored(store_path) >= 3 * 2000

    # The end of the newest run (its settings, its verdict) is written by this
    # process after its block returned: wait for it before looking at bytes.
    newest.summary()
    before = digest(store_path)
    dry = dask_observe_cli(store_path, "prune", "--keep-last", "1", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"Would prune 2 runs ({runs[0].id}, {runs[1].id})" in dry.stdout
    assert "Nothing changed" in dry.stdout
    assert digest(store_path) == before  # not a byte

    size = file_bytes(store_path)
    done = dask_observe_cli(store_path, "prune", "--keep-last", "1")
    assert done.returncode == 0, done.stderr
    assert f"Pruned 2 runs ({runs[0].id}, {runs[1].id})" in done.stdout
    after = file_bytes(store_path)
    assert after < size * 0.6, (size, after)

    listed = dask_observe_cli(store_path, "runs")
    assert "night-2" in listed.stdout and "night-0" not in listed.stdout
    with Store(store_path) as store:
        assert list(store.runs()["id"]) == [newest.id]
        # The kept run whole; the others' lines gone from the file.
        run = store.run(newest.id)
        assert len(run.logs(contains="run line")) == kept_lines
        assert len(run.tasks()) == 10
    assert lines_stored(store_path) < 2 * kept_lines
    gone = dask_observe_cli(store_path, "logs", str(runs[0].id))
    assert gone.returncode == 1 and f"no run {runs[0].id}" in gone.stderr


def test_a_running_run_is_never_pruned(client: Client, store_path: Path) -> None:
    finished = record(client, "done")
    with Store(store_path) as store:
        recording = Recording("ongoing", client, store)
        running = recording.start()
        try:
            pruned = store.prune(Policy(keep_last=0))
            assert [r["id"] for r in pruned.runs] == [finished.id]
            assert list(store.runs()["id"]) == [running.id]
            client.submit(chatty, 99).result()
        finally:
            recording.stop()
        # What it recorded while the other run was pruned is all there.
        assert len(store.run(running.id).logs(contains="run line 99.")) == 200


def test_recorders_apply_observe_retention(client: Client, store_path: Path) -> None:
    with dask.config.set({"observe.retention.keep-last": 2}):
        runs = [record(client, f"kept-{i}") for i in range(3)]
    with Store(store_path) as store:
        assert list(store.runs()["id"]) == [runs[2].id, runs[1].id]


def test_prune_says_what_it_needs(store_path: Path, client: Client) -> None:
    record(client, "one")
    bare = dask_observe_cli(store_path, "prune")
    assert bare.returncode == 1 and "--keep-last N" in bare.stderr
    bad = dask_observe_cli(store_path, "prune", "--older-than", "soon")
    assert bad.returncode == 1 and "not a duration" in bad.stderr
    young = dask_observe_cli(store_path, "prune", "--older-than", "30d")
    assert young.returncode == 0 and "Nothing to prune" in young.stdout
    # Durations as dask config writes them too (one parser for every one).
    words = dask_observe_cli(store_path, "prune", "--older-than", "30 days")
    assert words.returncode == 0 and "Nothing to prune" in words.stdout


def test_max_size_lets_the_oldest_runs_go_first(
    client: Client, store_path: Path, tmp_path: Path
) -> None:
    # The cluster logged into another store first: this store starts with
    # those recent lines, copied before its first run and in no run's slice.
    # They go with the oldest run (the estimate once counted them nowhere,
    # and every run went while the store stayed too large).
    with dask_observe.record("elsewhere", client=client, store=tmp_path / "o.sqlite"):
        client.gather(client.map(chatty, range(80)))  # eight runs' worth
    runs = [record(client, f"big-{i}") for i in range(3)]
    dask_observe.open_store().runs()  # waits for the runs' ends to be written
    # The size below counts the write-ahead log, which open connections (a
    # recorder lingering for the next run) keep: fold it into the file first.
    with sqlite3.connect(store_path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    # Room for about two runs of three: the oldest goes.
    limit = int(file_bytes(store_path) * 0.7)
    done = dask_observe_cli(store_path, "prune", "--max-size", str(limit))
    assert done.returncode == 0, done.stderr
    with Store(store_path) as store:
        left = list(store.runs()["id"])
    assert left[0] == runs[-1].id and runs[0].id not in left
    assert file_bytes(store_path) <= limit


def run_of_lines(store: BaseStore, name: str, cluster: str) -> int:
    """A run that holds 2,000 lines of 200 characters, ended."""
    run_id = store.create_run(name, cluster=cluster)
    now = time.time()
    store.telemetry.append(cluster, [
        ("log", now, 30, "worker", "w", "u", f"{name} {i} {'x' * 200}")
        for i in range(2000)
    ])  # fmt: skip
    store.end_run(run_id, "finished")
    return run_id


def test_max_size_lets_no_run_go_whose_rows_a_running_run_holds(
    store_path: Path,
) -> None:
    # Two notebooks record into one store: a run still running began before
    # the last two ended, and its slice holds their rows. Letting them go
    # would free nothing: the estimate once counted them, let them go and
    # left the store as large.
    with BaseStore(store_path) as store:
        oldest = run_of_lines(store, "oldest", "tcp://x:1")
        running = store.create_run("still running", cluster="tcp://y:1")
        later = [run_of_lines(store, name, "tcp://x:1") for name in ("b", "c")]
    with sqlite3.connect(store_path) as conn:  # the size counts the log: fold it
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    limit = int(file_bytes(store_path) * 0.5)  # the oldest run's room is not enough
    done = dask_observe_cli(store_path, "prune", "--max-size", str(limit))
    assert done.returncode == 0, done.stderr
    assert f"Pruned 1 run ({oldest}): 2,000 rows" in done.stdout
    assert (
        f"run {running}, still running, holds every row stored since it began"
        in done.stdout
    )
    with Store(store_path) as store:
        assert sorted(store.runs()["id"]) == [running, *later]
        assert len(store.run(later[0]).logs(contains="b ")) == 2000


def test_keep_last_0_with_a_max_size_keeps_the_run_that_just_ended(
    store_path: Path,
) -> None:
    # observe.retention with keep-last 0 and a max-size, applied as a run
    # ends (that run kept): the size's sum once looked the kept run up among
    # those it may let go, and failed.
    with BaseStore(store_path) as store:
        older = run_of_lines(store, "older", "tcp://x:1")
        ended = run_of_lines(store, "just ended", "tcp://x:1")
        pruned = store.prune(Policy(keep_last=0, max_bytes=1), keep=[ended])
        assert [r["id"] for r in pruned.runs] == [older]
        assert [r["id"] for r in store.run_records()] == [ended]


def test_pruning_forgets_the_comparisons_kept_of_runs(store_path: Path) -> None:
    # A kept comparison judged a run against the earlier runs of its name:
    # with one of them gone, it is made again when a history reads it.
    with BaseStore(store_path) as store:
        older, newer, newest = (
            run_of_lines(store, "nightly", "tcp://x:1") for _ in range(3)
        )
        store.kept.keep_comparisons(
            {(older, newer, 0.1): "", (newer, newest, 0.1): "x"}, "v"
        )
        assert len(store.kept.kept_comparisons("v")) == 2
        assert store.kept.kept_comparisons("another version") == {}
        store.prune(Policy(keep_last=2))
        assert store.kept.kept_comparisons("v") == {}


def _free_pages(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA freelist_count").fetchone()[0])


def _pages(path: Path) -> int:
    """The pages of the store's file, its log folded in."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return int(conn.execute("PRAGMA page_count").fetchone()[0])


def test_a_recorder_s_pruning_reuses_freed_pages_before_it_rewrites_the_file(
    store_path: Path,
) -> None:
    # A recorder prunes as each run ends (observe.retention): rewriting the
    # whole file each time (VACUUM) took 0.65 s at 1,000 runs, under the
    # store's write lock. The pages a pruned run frees take the next run's
    # rows; the file shrinks once a quarter of it is free.
    with BaseStore(store_path) as store:
        for i in range(10):
            run_of_lines(store, f"night-{i}", "tcp://x:1")
        pruned = store.prune(Policy(keep_last=9), compact=False)
        assert len(pruned.runs) == 1
        freed = _free_pages(store_path)
        assert freed > 0  # not rewritten: its pages wait for the next run
        pages = _pages(store_path)
        run_of_lines(store, "night-10", "tcp://x:1")
        assert _free_pages(store_path) < freed / 4  # ... which took them
        assert _pages(store_path) < pages * 1.05
        # Half the runs gone: more than a quarter of the file free, rewritten.
        pruned = store.prune(Policy(keep_last=5), compact=False)
        assert len(pruned.runs) == 5
        assert _free_pages(store_path) == 0
        assert pruned.bytes_after < pruned.bytes_before * 0.75

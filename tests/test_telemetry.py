"""What a run holds, read through the Python API: logs, tasks, metrics."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dask.config
import pytest
from distributed import Client, LocalCluster

import dask_observe
from dask_observe import Run

from .conftest import wait_until


def chatty(x: int) -> int:
    log = logging.getLogger("user.etl")
    log.warning("Loaded PARTITION %d of <table>", x)
    log.error("partition %d: checksum mismatch", x) if x == 3 else None
    log.info("not captured: user loggers default to WARNING")
    time.sleep(0.3)
    return x


def broken(x: int) -> int:
    raise RuntimeError(f"cannot parse row {x}")


@pytest.fixture(scope="module")
def run(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Run]:
    """One run, in a store of its own, that this module's tests only read
    (recorded for each of them, it took 1-3 s a test)."""
    path = tmp_path_factory.mktemp("telemetry") / "observe.sqlite"
    with (
        Client(cluster, set_as_default=False) as client,
        dask_observe.open_store(path) as store,
    ):
        with dask_observe.record("telemetry", client=client, store=store) as run:
            keys = [f"chatty-{i}" for i in range(6)]
            client.gather(client.map(chatty, range(6), key=keys))
            with pytest.raises(RuntimeError):
                client.submit(broken, 7, key="broken-7").result()
            wait_until(
                lambda: len(run.refresh().metrics("memory_rss")), "a metrics sample"
            )
        yield run


def test_logs_have_the_documented_columns_and_every_workers_lines(run: Run) -> None:
    logs = run.logs(contains="loaded partition")  # any case
    assert list(logs.columns) == [
        "time",
        "level",
        "source",
        "worker",
        "logger",
        "message",
        "task",
        "fields",
    ]
    assert sorted(logs["message"]) == [
        f"Loaded PARTITION {i} of <table>" for i in range(6)
    ]
    # Each line is its task's: chatty(i) ran as "chatty-i".
    assert {
        m.split()[2]: t for m, t in zip(logs["message"], logs["task"], strict=True)
    } == {str(i): f"chatty-{i}" for i in range(6)}
    assert set(logs["source"]) == {"worker"} and set(logs["level"]) == {"WARNING"}
    assert set(logs["worker"]) <= set(run.tasks()["worker"])
    assert str(logs["time"].dt.tz) == "UTC"
    assert run.logs(contains="not captured").empty


def test_logs_filter_by_level_worker_source_regex_and_time(run: Run) -> None:
    errors = run.logs(level="error", source="worker")
    assert set(errors["logger"]) == {"user.etl", "distributed.worker"}
    ours = errors[errors["logger"] == "user.etl"]
    assert list(ours["message"]) == ["partition 3: checksum mismatch"]
    (failed,) = errors[errors["logger"] == "distributed.worker"]["message"]
    assert failed.startswith("Compute Failed\nKey:       broken-7")
    worker = ours["worker"].iloc[0]
    assert set(run.logs(worker=worker)["worker"]) == {worker}
    assert len(run.logs(contains=r"PARTITION [0-2] ", regex=True)) == 3
    # RE2's POSIX classes: Python's parser reads "[[:upper:]]" otherwise, and
    # its literal ("]") filtered every line out before RE2 saw one.
    posix = run.logs(contains=r"[[:upper:]]{9} [[:digit:]]", regex=True)
    assert len(posix) == 6
    assert run.logs(contains="loaded partition", since=time.time() + 60).empty
    with pytest.raises(ValueError, match="unknown log level"):
        run.logs(level="loud")


def test_tasks_hold_every_task_with_its_phases_and_errors(run: Run) -> None:
    tasks = run.tasks().set_index("key")
    assert set(tasks.index) == {*(f"chatty-{i}" for i in range(6)), "broken-7"}
    assert list(run.tasks().columns[:8]) == [
        "key", "prefix", "worker", "start", "stop", "duration_s", "status", "nbytes",
    ]  # fmt: skip
    chatty_rows = tasks.loc[[f"chatty-{i}" for i in range(6)]]
    assert (chatty_rows["status"] == "memory").all()
    assert (chatty_rows["duration_s"] >= 0.3).all()
    assert (chatty_rows["compute_s"] >= 0.3).all()
    assert (chatty_rows["prefix"] == "chatty").all()
    failed = tasks.loc["broken-7"]
    assert failed["status"] == "erred"
    assert "cannot parse row 7" in failed["exception"]
    assert "broken" in failed["traceback"]
    assert run.summary()["n_failed"] == 1


def test_metrics_are_long_form_per_worker_and_for_the_cluster(run: Run) -> None:
    metrics = run.metrics()
    assert list(metrics.columns) == ["time", "worker", "name", "value"]
    per_worker = metrics.dropna(subset=["worker"])
    assert {"memory_managed", "memory_limit", "cpu", "tasks_processing"} <= set(
        per_worker["name"]
    )
    assert per_worker["worker"].nunique() == 2
    cluster = metrics[metrics["worker"].isna()]
    assert (cluster[cluster["name"] == "workers"]["value"] == 2).all()
    # Cluster-wide series for the panel's sparklines: mean CPU and the host's
    # network rate counted once (both workers run on this one host).
    assert {"cpu", "net_bps", "memory_managed"} <= set(cluster["name"])
    # The cluster's last sample, against each worker's values as they stood
    # then: a worker is sampled when it has news, its values hold until then.
    net = cluster[cluster["name"] == "net_bps"]
    last_time = net["time"].max()
    cluster_rate = net[net["time"] == last_time]["value"]
    rates = per_worker[
        per_worker["name"].isin(["net_read_bps", "net_write_bps"])
        & (per_worker["time"] <= last_time)
    ]
    held = rates.sort_values("time").groupby(["worker", "name"])["value"].last()
    per_worker_rate = held.groupby(level="worker").sum()
    assert len(per_worker_rate) == 2 and len(cluster_rate) == 1
    assert cluster_rate.iloc[0] == pytest.approx(per_worker_rate.max())
    limits = run.metrics(name="memory_limit")
    assert set(limits["name"]) == {"memory_limit"} and (limits["value"] > 0).all()


def test_nothing_was_dropped_in_a_quiet_run(run: Run) -> None:
    assert run.summary()["dropped"] == 0


def test_three_capture_buffers_of_tasks_are_all_in_run_tasks(
    store_path: Path, make_client: Callable[..., Client]
) -> None:
    # Dask's default queuing sends a task per free thread per round trip: about
    # 1.6 ms a tiny task on these two cores. Without queuing the workers take
    # tasks in bulk; what is tested here is the capture: three times what its
    # buffer holds must go through it while the run records, nothing dropped
    # (150,000 through the default buffer took 99 s of the suite, 30,000 through
    # a buffer of 10,000 took 20 s; the scale benchmark records a million).
    n = 9_000
    with dask.config.set(
        {
            "distributed.scheduler.worker-saturation": float("inf"),
            "observe.capture.buffer-size": n // 3,  # registered with the plugins
        }
    ):
        client = make_client(n_workers=2, threads_per_worker=2)
        with dask_observe.record("many tasks", client=client) as run:
            futures = client.map(abs, range(n), pure=False)
            client.gather(futures)
            del futures
    tasks = run.tasks()
    assert len(tasks) == n == run.summary()["n_tasks"]
    assert tasks["key"].is_unique
    assert (tasks["status"] == "memory").all()
    assert run.summary()["dropped"] == 0


def shout(size: int) -> int:
    logging.getLogger("user.huge").warning("HEAD" + "x" * size + "TAIL")
    return size


def test_a_huge_line_is_kept_as_its_head_and_tail_with_what_was_cut(
    client: Client, store_path: Path
) -> None:
    """Forty 10 MB lines were stored whole; a line is now at most 64 KiB."""
    from dask_observe.capture.text import MAX_TEXT_BYTES

    with dask_observe.record("huge", client=client) as run:
        client.submit(shout, 10_000_000, pure=False).result()
    (line,) = run.logs(contains="bytes cut")["message"]
    assert line.startswith("HEADxxx") and line.endswith("xxxTAIL")
    assert len(line.encode()) <= MAX_TEXT_BYTES
    assert "[... 9,934,5" in line  # how much went, in bytes


def test_the_store_bounds_texts_whatever_wrote_them(tmp_path: Path) -> None:
    """A record from a capture of another version, or one read from
    distributed at a run's end, is bounded at the store's door too."""
    from dask_observe.capture.text import MAX_TEXT_BYTES
    from dask_observe.capture.wire import LogRecord
    from dask_observe.store import BaseStore

    with BaseStore(tmp_path / "s.sqlite") as store:
        store.telemetry.append("tcp://x:1", [
            LogRecord("log", 1.0, 30, "worker", "w", "u", "☃" * 1_000_000),
            LogRecord("log", 1.0, 30, "worker", "w", "u", "small"),
        ])  # fmt: skip
        messages = store.frame("SELECT message FROM logs ORDER BY seq", (), ("m",))
    big, small = messages["m"]
    assert len(big.encode()) <= MAX_TEXT_BYTES and "bytes cut" in big
    assert small == "small"

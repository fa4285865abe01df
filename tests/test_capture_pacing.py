"""Workers sharing one process (``processes=False``) share one ticker and one
shipping callback: each still keeps its memory samples, stalls and lines."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask.config
import pytest
from distributed import Client, Nanny, Scheduler, Worker, get_worker

import dask_observe
from dask_observe.capture.pacer import Pacer

from .conftest import wait_until


def say_hello() -> str:
    address = get_worker().address
    logging.getLogger("user.pacing").warning("hello from %s", address)
    return address


@pytest.mark.timing  # judged against the machine's load
def test_workers_of_one_process_each_keep_samples_stalls_and_lines(
    store_path: Path, make_client: Callable[..., Client]
) -> None:
    client = make_client(n_workers=6, threads_per_worker=1, processes=False)
    with dask_observe.record("shared", client=client) as run:
        # All of them: before distributed 2026.8 scheduler_info() listed five.
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        said = [
            client.submit(say_hello, workers=[w], pure=False).result() for w in workers
        ]
        # Runs on the event loop that all six share: every one of them stalls.
        client.run(time.sleep, 1.2, workers=workers[:1])

        def every_loop_stalled() -> bool:
            stalled = run.refresh().events("event-loop-stall")["worker"]
            return set(stalled.dropna()) >= set(workers) and bool(stalled.isna().any())

        wait_until(every_loop_stalled, "the stall of each worker and the scheduler")
    assert said == workers
    lines = run.logs(contains="hello from")
    assert sorted(lines["worker"]) == workers
    assert all(w in m for w, m in zip(lines["worker"], lines["message"], strict=True))
    rss = run.metrics("memory_rss")
    assert sorted(rss["worker"].unique()) == workers
    # The scheduler's loop too (worker None): it is the same one.
    stalls = run.events("event-loop-stall")
    named = stalls["worker"].dropna()
    assert sorted(named.unique()) == workers and len(named) < len(stalls)
    assert all(d["seconds"] >= 1.0 for d in stalls["data"])


def test_a_failing_member_does_not_stop_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[float] = []
    others: list[float] = []
    after_leaving: list[int] = []

    def failing(now: float) -> None:
        raise RuntimeError("broken plugin")

    async def main() -> None:
        leaves = [
            Pacer.join(20, failing), Pacer.join(20, seen.append),
            Pacer.join(20, others.append),
        ]  # fmt: skip
        await asyncio.sleep(0.2)
        for leave in leaves:
            leave()
        after_leaving.append(len(seen))
        await asyncio.sleep(0.1)

    asyncio.run(main())
    # Called together, with one time for all, and no more once they left.
    assert len(seen) >= 3 and seen == others
    assert after_leaving == [len(seen)]
    logged = [r for r in caplog.records if "periodic capture call failed" in r.message]
    assert len(logged) == 1  # once, not ten times a second


@pytest.mark.timing  # judged against the machine's load
def test_a_run_start_reads_package_metadata_off_the_workers_loop(
    store_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    make_client: Callable[..., Client],
) -> None:
    """A run's start asks the workers for their package versions while its
    tasks run. Read on the worker's loop, hundreds of file reads each waited
    for the GIL behind the task threads: the loop (its heartbeats, distributed's
    profile and GIL measure) stood still 3-4 s. Here the read is made slow and
    greedy (0.1 s holding the GIL a package), and the loop must not notice."""
    import importlib.metadata

    from distributed import Worker

    real = importlib.metadata.version

    def slow_version(name: str) -> str:
        spin_until = time.perf_counter() + 0.1
        while time.perf_counter() < spin_until:
            pass
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", slow_version)
    # Read once a process (kept on the class): forget what earlier tests read.
    monkeypatch.delattr(Worker, "_dask_observe_environment", raising=False)
    client = make_client(n_workers=1, threads_per_worker=1, processes=False)
    with dask_observe.record("metadata", client=client) as run:
        time.sleep(3.0)  # the start's read (0.5 s in, ~1.5 s long) happens now
    assert run.environment()["packages"]["workers"]["dask"] == real("dask")
    stalls = run.events("event-loop-stall")
    assert stalls.empty, stalls.to_string()


def stop_heartbeats(dask_worker: Worker) -> None:
    dask_worker.periodic_callbacks["heartbeat"].stop()


def test_a_worker_is_sampled_again_only_when_something_changed(
    store_path: Path, make_client: Callable[..., Client]
) -> None:
    """A large cluster spaces its heartbeats (2 s at 200 workers, 11 s at
    2,000): a worker whose heartbeat did not come has nothing new but its task
    count, which is all it is sampled for meanwhile."""
    client = make_client(n_workers=2, threads_per_worker=1, processes=False)
    quiet, beating = sorted(client.nthreads())
    client.run(stop_heartbeats, workers=[quiet])
    with dask_observe.record("sparse", client=client) as run:
        task = client.submit(time.sleep, 1.5, workers=[quiet], pure=False)
        task.result()

        def sampled_idle_again() -> bool:
            processing = run.refresh().metrics("tasks_processing", worker=quiet)
            return list(processing["value"])[-1:] == [0.0] and len(processing) > 1

        wait_until(sampled_idle_again, "the quiet worker's count back at 0")
        time.sleep(1.0)  # one more sampling interval, with nothing new
        quiet_rows = run.refresh().metrics(worker=quiet)
        beating_rows = run.refresh().metrics("cpu", worker=beating)
    # Its whole row once, as the run began; then its count as it changed.
    assert len(quiet_rows[quiet_rows["name"] == "cpu"]) == 1
    processing = quiet_rows[quiet_rows["name"] == "tasks_processing"]
    assert list(processing["value"]) == [0.0, 1.0, 0.0]
    # The worker whose heartbeats came: a row a second, each with news.
    assert len(beating_rows) >= 3


def monitor_readings(dask_worker: Worker) -> int:
    return int(dask_worker.monitor.count)


def test_a_reading_of_the_system_monitor_is_stored_once(
    store_path: Path, make_client: Callable[..., Client]
) -> None:
    """distributed's system monitor takes CPU and GIL contention over the
    time since its last update; heartbeats send its newest readings. Where
    heartbeats come more often than it reads, each heartbeat's row repeated
    the reading, and the gil-contention rule (which weighs each sample by the
    seconds it stands for) counted one high second twice: on CI, a flag for
    pandas on four threads. Here the monitor reads every 10 s and heartbeats
    come every 0.5 s."""
    with dask.config.set({"distributed.admin.system-monitor.interval": "10s"}):
        client = make_client(n_workers=1, threads_per_worker=2, processes=False)
    (worker,) = client.nthreads()
    before = client.run(monitor_readings)[worker]
    with dask_observe.record("monitored", client=client) as run:
        client.submit(time.sleep, 3.0, pure=False).result()
    readings = client.run(monitor_readings)[worker] - before
    rows = run.metrics(worker=worker)
    named = rows.groupby("name").size()
    # The reading the run began with, and each the monitor took since.
    assert named["cpu"] <= 1 + readings, (named, readings)
    assert named.get("gil_contention", 0) <= 1 + readings, (named, readings)
    # The heartbeats' other news still came, a row a second.
    assert named["memory_managed"] >= 3, named


def slow_heartbeats(dask_scheduler: Scheduler) -> None:
    """The scheduler takes in each worker's heartbeat a second late."""
    answer = dask_scheduler.handlers["heartbeat_worker"]

    async def late(**kwargs: Any) -> Any:
        await asyncio.sleep(1.0)
        return answer(**kwargs)

    dask_scheduler.handlers["heartbeat_worker"] = late


async def send_heartbeat(dask_worker: Worker) -> None:
    """Start a heartbeat and return once it took the worker's metrics."""
    dask_worker.loop.add_callback(dask_worker.heartbeat)
    await asyncio.sleep(0.2)


def test_a_heartbeat_in_flight_as_the_run_ends_still_brings_its_fine_metrics(
    store_path: Path, make_client: Callable[..., Client]
) -> None:
    """A heartbeat takes the worker's fine metrics as it starts: one still in
    flight as the run ends holds all its tasks' time. The run's end waits for
    it (a run of 40 tasks on two workers read half its waiting time, in CI)."""
    client = make_client(n_workers=1, threads_per_worker=1, processes=False)
    client.run(stop_heartbeats)
    client.run_on_scheduler(slow_heartbeats)
    with dask_observe.record("in flight", client=client) as run:
        client.gather(client.map(time.sleep, [0.1] * 4, pure=False))
        client.run(send_heartbeat)
    fine = run.fine_metrics()
    waiting = fine[(fine["activity"] == "thread-noncpu") & (fine["unit"] == "seconds")]
    assert waiting["value"].sum() >= 0.35, fine.to_string()


def say_last_words(dask_worker: Worker) -> str:
    logging.getLogger("user.last").warning("last words from %s", dask_worker.address)
    return str(dask_worker.address)


def nanny_says(dask_worker: Nanny) -> None:
    # A nanny's own logger: its lines go to its capture.
    logging.getLogger("distributed.nanny.test").warning(
        "a nanny speaks for %s", dask_worker.worker_address
    )


@pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
def test_a_runs_end_brings_the_last_lines_of_every_worker_and_nanny(
    processes: bool, store_path: Path, make_client: Callable[..., Client]
) -> None:
    """Shipping waits an hour here: only the run's end can bring these lines
    (workers and nannies of this process are flushed by a call, the others by
    a message)."""
    with dask.config.set({"observe.capture.flush-interval": "1h"}):
        client = make_client(n_workers=2, threads_per_worker=1, processes=processes)
        with dask_observe.record("last words", client=client) as run:
            said = sorted(client.run(say_last_words).values())
            if processes:
                client.run(nanny_says, nanny=True)
    assert sorted(run.logs(contains="last words from")["worker"]) == said
    if processes:
        assert sorted(run.logs(contains="a nanny speaks")["worker"]) == said

"""What watching for hangs costs: the worker's stack sampler and the
scheduler's no-progress check, timed where they run.

    .venv/bin/python benchmarks/hangs.py --workers 16 --tasks 64

- sampler, idle: the worker's tick with its running tasks all in time (the
  common case: one pass over them);
- sampler, a sample: one long task's stack taken, hashed and counted;
- check, moving: the scheduler's check while runs finish tasks (every
  ``metrics-interval``, 1 s);
- describe: the picture of a stalled run (per stall, then each time the stall
  doubles), with ``--tasks`` tasks processing on ``--workers`` workers.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from distributed import Client, LocalCluster

from dask_observe.capture.progress import describe, pace, work_remains
from dask_observe.capture.stacks import StackSampler


def per_call(fn: Callable[[], object], n: int) -> float:
    """Median over 5 rounds of the seconds one call takes."""
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - start) / n)
    return statistics.median(rounds)


def nested(depth: int, until: threading.Event) -> None:
    """A thread whose stack is ``depth`` frames deep, waiting."""
    if depth:
        nested(depth - 1, until)
    else:
        until.wait()


def sampler_costs() -> dict[str, float]:
    release = threading.Event()
    thread = threading.Thread(target=nested, args=(30, release), daemon=True)
    thread.start()
    time.sleep(0.1)
    assert thread.ident is not None
    now = time.time()
    threads = {thread.ident: "long-1"}
    shipped: list[dict[str, Any]] = []
    in_time = StackSampler(after_s=10.0)
    running_in_time = {f"task-{i}": now for i in range(4)}
    idle = per_call(
        lambda: in_time.sample(now, running_in_time, threads, shipped.append), 100_000
    )
    overdue = StackSampler(after_s=0.0)
    overdue_running = {"long-1": now - 60}

    def one_sample() -> None:
        overdue._next_at.clear()  # due every call: time the sample itself
        overdue.sample(now, overdue_running, threads, shipped.append)

    sample = per_call(one_sample, 2_000)
    release.set()
    return {"sampler, idle (4 tasks in time)": idle, "sampler, a sample": sample}


def waits(x: int, release: Any) -> int:
    release.wait()
    return x


def scheduler_costs(workers: int, tasks: int) -> dict[str, float]:
    with (
        LocalCluster(
            n_workers=workers,
            threads_per_worker=max(1, tasks // workers),
            processes=False,
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        from distributed import Event

        release = Event()
        futures = client.map(waits, range(tasks), release=release, pure=False)
        states = cluster.scheduler.workers.values()
        while sum(len(ws.processing) for ws in states) < tasks:
            time.sleep(0.05)

        def on_scheduler(dask_scheduler: Any) -> dict[str, float]:
            scheduler = dask_scheduler
            return {
                "check, moving (work_remains)": per_call(
                    lambda: work_remains(scheduler), 20_000
                ),
                "check, past the bar (pace)": per_call(lambda: pace(scheduler), 2_000),
                f"describe ({workers} workers, {tasks} tasks processing)": per_call(
                    lambda: describe(scheduler, "span", time.time() - 60), 500
                ),
            }

        costs: dict[str, float] = client.run_on_scheduler(on_scheduler)
        client.sync(release.set)
        client.gather(futures)
        return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--tasks", type=int, default=64)
    args = parser.parse_args()
    costs = {**sampler_costs(), **scheduler_costs(args.workers, args.tasks)}
    for name, seconds in costs.items():
        print(f"{name:<48} {seconds * 1e6:10.2f} us")


if __name__ == "__main__":
    main()

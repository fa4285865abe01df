"""Recording overhead: paired runs of one workload, unrecorded, recorded by
dask-observe, and under distributed.performance_report, on one LocalCluster.

    .venv/bin/python benchmarks/overhead.py --tasks 20000 --pairs 5

Prints the median ratio of each to the unrecorded run measured just before it
(pairs taken side by side, because these machines are noisy).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from distributed import Client, LocalCluster, performance_report

import dask_observe


def inc(x: int) -> int:
    return x + 1


def workload(client: Client, n: int) -> float:
    started = time.perf_counter()
    futures = client.map(inc, range(n), pure=False)
    client.gather(futures)
    del futures
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as lc,
        Client(lc) as client,
        dask_observe.open_store(tmp / "bench.sqlite") as store,
    ):
        workload(client, 1000)  # warm up
        ours, theirs = [], []
        for i in range(args.pairs):
            base = workload(client, args.tasks)
            with dask_observe.record(f"bench {i}", client=client, store=store):
                recorded = workload(client, args.tasks)
            ours.append(recorded / base)
            base = workload(client, args.tasks)
            with performance_report(filename=str(tmp / f"report-{i}.html")):
                reported = workload(client, args.tasks)
            theirs.append(reported / base)
            print(
                f"pair {i}: base {base:.2f} s, dask-observe x{ours[-1]:.3f}, "
                f"performance_report x{theirs[-1]:.3f}",
                flush=True,
            )
        run = store.run("last")
        print(f"stored tasks of last run: {len(run.tasks())} of {args.tasks}")
    print(f"median ratio dask-observe/unrecorded: {statistics.median(ours):.3f}")
    print(
        f"median ratio performance_report/unrecorded: {statistics.median(theirs):.3f}"
    )


if __name__ == "__main__":
    main()

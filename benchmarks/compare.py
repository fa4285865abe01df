"""What a comparison of two large runs costs: ``dask_observe.compare(a, b)`` of
two runs of ``--tasks`` tasks each (four prefixes on eight workers, b's
tasks 1.3x slower, a profile per prefix), written into a store of its own,
the median of
``--rounds`` comparisons. Run it with another checkout first on
``PYTHONPATH`` to compare two versions side by side:

    .venv/bin/python benchmarks/compare.py --tasks 100000 --rounds 5
    PYTHONPATH=../other .venv/bin/python benchmarks/compare.py --tasks 100000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import dask_observe
from dask_observe.store import BaseStore

CLUSTER = "tcp://10.0.0.1:8786"
WORKERS = [f"tcp://10.0.0.{i}:40001" for i in range(2, 10)]
PREFIXES = ("read", "parse", "join", "write")


def write_run(store: BaseStore, name: str, n: int, pace: float) -> int:
    """A finished run of ``n`` tasks of ``pace`` seconds on eight workers."""
    span = f"span-{name}"
    run_id = store.create_run("job", cluster=CLUSTER, span_id=span)
    start = store.run(run_id).started
    records: list[tuple[Any, ...]] = [
        ("metrics", start, None, {"nthreads": 8.0, "workers": 8.0})
    ]
    for i in range(n):
        prefix = PREFIXES[i % len(PREFIXES)]
        begin = start + (i // 8) * pace
        seconds = pace * (1 + (i % 7) / 10)
        records.append(
            ("task", begin + seconds, f"('{prefix}-abc', {i})", prefix, span,
             WORKERS[i % 8], 1, begin, begin + seconds, "memory", 8, seconds,
             0.0, 0.0, 0.0, 0.0, None, None)
        )  # fmt: skip
    store.telemetry.append(CLUSTER, records)
    # A profile per prefix, as a run of this size has: a function a prefix,
    # sampled every 10 ms of its compute.
    total = n / len(PREFIXES) * pace * 1.3
    store.set_profiles(run_id, {
        prefix: {"interval": 0.01, "root": {
            "name": "", "filename": "", "line": 0, "count": int(total / 0.01),
            "children": [{"name": f"do_{prefix}", "filename": "job.py", "line": 1,
                          "count": int(total / 0.01), "children": []}],
        }}
        for prefix in PREFIXES
    })  # fmt: skip
    store.end_run(run_id, "finished", n_tasks=n, n_failed=0,
                  ended=start + n / 8 * pace)  # fmt: skip
    return run_id


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "observe.sqlite"
        with BaseStore(path) as store:
            a = write_run(store, "a", args.tasks, 0.001)
            b = write_run(store, "b", args.tasks, 0.0013)
        with dask_observe.Store(path) as store:
            dask_observe.compare(a, b, store=store)  # imports, caches
            seconds = []
            for _ in range(args.rounds):
                began = time.perf_counter()
                dask_observe.compare(a, b, store=store)
                seconds.append(time.perf_counter() - began)
    print(
        f"compare() of two runs of {args.tasks:,} tasks: median "
        f"{statistics.median(seconds):.3f} s of {args.rounds} "
        f"({min(seconds):.3f}-{max(seconds):.3f} s)"
    )


if __name__ == "__main__":
    main()

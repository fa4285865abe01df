"""What the runs list costs while a very large run records.

    .venv/bin/python benchmarks/running_count.py --tasks 1000000 \
        --variant old=../old --variant new=.

The side panel polls the run list every 5 s (``/runs``: ``run_records()``),
and a running run's card counts its tasks stored so far. This stores a running
run of ``--tasks`` tasks through the store's ingest (as pulls write them), then,
for each variant in a process of its own with its ``PATH`` first on
``PYTHONPATH`` and a copy of that store, reads the list through a read-only
connection as the Jupyter server does: the first read, then a read after each
of five pulls of 1,000 more tasks (the median shown).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

CLUSTER = "tcp://10.0.0.1:8786"
SPAN = "0123456789abcdef"


def tasks(first: int, n: int) -> Sequence[tuple[object, ...]]:
    from dask_observe.capture.wire import TaskRecord

    made = []
    for i in range(first, first + n):
        status = "erred" if i % 97 == 0 else "memory"
        record = TaskRecord(
            "task", 1000.0 + i, f"abs-{i:x}", "abs", SPAN, "tcp://10.0.0.2:1", 1,
            1000.0 + i, 1000.0 + i + 0.001, status, 28, 0.001, 0.0, 0.0, 0.0,
            0.0, None, None,
        )  # fmt: skip
        made.append(record)
    return made


def build(path: Path, n: int) -> None:
    from dask_observe import Store

    with Store(path) as store:
        store.create_run("big", cluster=CLUSTER, span_id=SPAN)
        for first in range(0, n, 50_000):
            store.telemetry.append(CLUSTER, tasks(first, min(50_000, n - first)))


def one(path: Path, n: int) -> dict[str, float]:
    from dask_observe import Store
    from dask_observe.store import BaseStore

    def listed() -> tuple[float, int]:
        with BaseStore(path, create=False, readonly=True) as reader:
            started = time.perf_counter()
            (record,) = reader.run_records()
            return time.perf_counter() - started, int(record["n_tasks"])

    first, counted = listed()
    assert counted == n, (counted, n)
    later = []
    with Store(path) as writer:
        for pull in range(5):
            writer.telemetry.append(CLUSTER, tasks(n + pull * 1000, 1000))
            took, counted = listed()
            assert counted == n + (pull + 1) * 1000, counted
            later.append(took)
    return {"first_ms": 1000 * first, "later_ms": 1000 * statistics.median(later)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(Path(args.one), args.tasks)))
        return
    folder = Path(tempfile.mkdtemp(prefix="running-count-"))
    built = folder / "built.sqlite"
    started = time.perf_counter()
    build(built, args.tasks)
    print(f"stored a running run of {args.tasks:,} tasks in "
          f"{time.perf_counter() - started:.0f} s\n")  # fmt: skip
    print("| variant | first read | after each pull of 1,000 more (median) |")
    print("| --- | --- | --- |")
    for name, where in (v.split("=", 1) for v in args.variant or ["this=."]):
        copy = folder / f"{name}.sqlite"
        shutil.copy(built, copy)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(where).resolve()), env.get("PYTHONPATH", "")]
        )
        command = [sys.executable, __file__, "--one", str(copy), "--tasks",
                   str(args.tasks)]  # fmt: skip
        out = subprocess.run(
            command, env=env, capture_output=True, text=True, check=True
        )
        found = json.loads(out.stdout.splitlines()[-1])
        print(f"| {name} | {found['first_ms']:.0f} ms | {found['later_ms']:.1f} ms |")
    shutil.rmtree(folder)


if __name__ == "__main__":
    main()

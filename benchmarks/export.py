"""Store bytes per task and per log line; export throughput (Chrome trace,
Parquet, OTLP to a local receiver); prune time.

    .venv/bin/python benchmarks/export.py --tasks 100000 --lines 200000

Records are made in the scheduler plugin's format (``store.py``'s) and
written as the recorder writes them. Sizes are measured after a VACUUM, each
kind in a store of its own, so that they are bytes on disk per record.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import dask.config
from store import CLUSTER, ingest, log_records, task_records

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dask_observe
from dask_observe.store.retention import Policy, file_bytes
from tests.otlp import Collector  # the repository's root, above


def vacuumed_bytes(path: Path) -> int:
    with dask_observe.open_store(path) as store:
        store.rows("VACUUM", ())
        store.rows("PRAGMA wal_checkpoint(TRUNCATE)", ())
    return file_bytes(path)


def per_record(kind: str, n: int, folder: Path) -> float:
    """Bytes on disk per record of this kind, beyond an empty store's."""
    path = folder / f"{kind}.sqlite"
    with dask_observe.open_store(path) as store:
        store.create_run("size", cluster=CLUSTER, span_id="span-1")
    empty = vacuumed_bytes(path)
    records = task_records(n, "span-1") if kind == "task" else log_records(n)
    with dask_observe.open_store(path) as store:
        ingest(store, records, n)
    return (vacuumed_bytes(path) - empty) / n


def send(run: Any, collector: Collector) -> Any:
    return lambda: run.to_otlp(collector.url)


def timed(what: str, n: int, fn: Any) -> Any:
    started = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - started
    print(f"{what}: {seconds:.2f} s ({n / seconds:,.0f} records/s)")
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--lines", type=int, default=200_000)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    print(f"store bytes per task: {per_record('task', args.tasks, folder):.0f}")
    print(f"store bytes per log line: {per_record('log', args.lines, folder):.0f}")

    path = folder / "run.sqlite"
    with dask_observe.open_store(path) as store:
        run_id = store.create_run("bench", cluster=CLUSTER, span_id="span-1")
        ingest(store, task_records(args.tasks, "span-1"), args.tasks)
        ingest(store, log_records(args.lines), args.lines)
        store.end_run(run_id, "finished", n_tasks=args.tasks)
        run = store.run(run_id)
        n = args.tasks + args.lines
        timed(
            "chrome trace", args.tasks, lambda: run.to_chrome_trace(folder / "t.json")
        )
        size = (folder / "t.json").stat().st_size
        print(f"  {size / 2**20:.1f} MiB, {size / args.tasks:.0f} bytes a task")
        timed("parquet", n, lambda: run.to_parquet(folder / "pq"))
        size = sum(p.stat().st_size for p in (folder / "pq").iterdir())
        print(f"  {size / 2**20:.1f} MiB")
        collector = Collector(decode=False)
        for spans in (args.tasks, 1000):
            with dask.config.set({"observe.export.otlp.max-task-spans": spans}):
                sent = timed(
                    f"otlp (max-task-spans {spans:,})", n, send(run, collector)
                )
            print(f"  {sent}, {collector.bytes / 2**20:.1f} MiB received")
            collector.bytes = 0
    with dask_observe.open_store(path) as store:
        second = store.create_run("second", cluster=CLUSTER, span_id="span-2")
        ingest(store, task_records(1000, "span-2"), 1000)
        store.end_run(second, "finished", n_tasks=1000)
        before = file_bytes(path)
        pruned = timed(
            "prune --keep-last 1", n, lambda: store.prune(Policy(keep_last=1))
        )
        print(f"  {before / 2**20:.1f} MiB -> {pruned.bytes_after / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()

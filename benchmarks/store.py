"""Store speed: task-event ingest rate, and a text filter over 1,000,000 log lines.

    .venv/bin/python benchmarks/store.py --tasks 200000 --lines 1000000

Records are made in the scheduler plugin's format and written the way the recorder
writes them (batches of 10,000, each with its cursor, in one transaction).
"""

from __future__ import annotations

import argparse
import logging
import re
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask_observe
from dask_observe.store import patterns

BATCH = 10_000
CLUSTER = "tcp://bench:8786"


def task_records(n: int, span_id: str) -> Iterator[tuple[str, ...] | tuple[Any, ...]]:
    now = time.time()
    for i in range(n):
        yield (
            "task", now, f"('inc-{i // 1000:x}', {i})", "inc", span_id,
            f"tcp://10.0.0.{i % 50}:4000", 140000 + i % 4, now, now + 0.001, "memory",
            28, 0.001, 0.0, 0.0, 0.0, 0.0, None, None,
        )  # fmt: skip


def log_records(n: int) -> Iterator[tuple[Any, ...]]:
    now = time.time()
    for i in range(n):
        message = f"Finished partition {i} of table events in {i % 97} ms"
        if i % 100_000 == 0:
            message += " NeedleInTheHaystack"
        yield ("log", now, logging.INFO, "worker", f"tcp://10.0.0.{i % 50}:4000",
               "user.etl", message)  # fmt: skip


def ingest(store: dask_observe.Store, records: Iterator[Any], n: int) -> float:
    """Seconds to write ``n`` records in recorder-sized batches."""
    started = time.perf_counter()
    instance, cursor = store.telemetry.cursor(CLUSTER)
    batch: list[tuple[int, Any]] = []

    def write() -> None:
        store.telemetry.ingest(
            CLUSTER,
            batch,
            read_at=(instance, cursor - len(batch)),
            instance="bench",
            last=cursor,
        )

    for record in records:
        cursor += 1
        batch.append((cursor, record))
        if len(batch) == BATCH:
            write()
            instance, batch = "bench", []
    if batch:
        write()
    return time.perf_counter() - started


def python_regexp(pattern: str, text: str | None) -> bool:
    """The REGEXP operator as it was before RE2."""
    return text is not None and re.search(pattern, text) is not None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=200_000)
    parser.add_argument("--lines", type=int, default=1_000_000)
    args = parser.parse_args()
    path = Path(tempfile.mkdtemp()) / "bench.sqlite"
    with dask_observe.open_store(path) as store:
        run_id = store.create_run("bench", cluster=CLUSTER, span_id="span-1")
        seconds = ingest(store, task_records(args.tasks, "span-1"), args.tasks)
        print(f"ingest: {args.tasks} task events in {seconds:.2f} s "
              f"= {args.tasks / seconds:,.0f} /s")  # fmt: skip
        seconds = ingest(store, log_records(args.lines), args.lines)
        print(f"ingest: {args.lines} log lines in {seconds:.2f} s "
              f"= {args.lines / seconds:,.0f} /s")  # fmt: skip
        store.end_run(run_id, "finished", n_tasks=args.tasks)
        run = store.run(run_id)
        assert len(run.tasks()) == args.tasks
        timings = []
        for _ in range(5):
            started = time.perf_counter()
            found = run.logs(contains="needleinthehaystack")
            timings.append(time.perf_counter() - started)
        expected = len(range(0, args.lines, 100_000))
        assert len(found) == expected, (len(found), expected)
        print(
            f"filter: text over {args.lines} lines, median of 5: "
            f"{1000 * statistics.median(timings):.0f} ms ({len(found)} found)"
        )
        # Patterns as the store runs them now (RE2 after a filter on the
        # pattern's required literal), as before (Python's re on every row),
        # and RE2 on every row; alternating on the same connection. The second
        # pattern's literal is in every line: the worst case for the filter.
        engines = {
            "now": (patterns.regexp, patterns.required_literal),
            "before (re)": (python_regexp, lambda _: None),
            "RE2 alone": (patterns.regexp, lambda _: None),
        }
        literal = patterns.required_literal
        cases = ((r"Needle\w+$", expected), (r"in 9\d ms$", None), (r"\d{2} ms$", None))
        for pattern, hits in cases:
            spent: dict[str, list[float]] = {name: [] for name in engines}
            for _ in range(5):
                for name, (function, prefilter) in engines.items():
                    store._conn.create_function("REGEXP", 2, function)
                    patterns.required_literal = prefilter  # type: ignore[assignment]
                    started = time.perf_counter()
                    found = run.logs(contains=pattern, regex=True)
                    spent[name].append(time.perf_counter() - started)
                    assert hits is None or len(found) == hits
            patterns.required_literal = literal
            print(
                f"filter: pattern {pattern!r} over {args.lines} lines, median of 5: "
                + ", ".join(
                    f"{name} {1000 * statistics.median(t):.0f} ms"
                    for name, t in spent.items()
                )
            )
        store._conn.create_function("REGEXP", 2, patterns.regexp, deterministic=True)
    print(f"store size: {path.stat().st_size / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()

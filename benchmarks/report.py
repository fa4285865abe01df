"""Report size and render time, beside performance_report's size on the same runs;
and what the live widget would send at 100,000 tasks.

    .venv/bin/python benchmarks/report.py --tasks 1000 10000 100000

Each workload runs once, recorded by dask-observe and under
``distributed.performance_report`` at the same time (so both see the same tasks):
``--prefixes`` task prefixes of equal size, each task trivial and fed by the
one before it on the other worker (so that every task's input is transferred),
and four CPU-bound tasks (a second of pure Python each): every section of the
report has something to show, the profile and the transfers included. While the largest
run records, a live-progress poller runs as under a ``%%dask_record`` cell, with
a view that counts the widget messages (one per changed part) and their bytes.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import dask.config
from distributed import Client, LocalCluster, performance_report

import dask_observe
from dask_observe.notebook.polling import LiveProgress
from dask_observe.notebook.progress import Snapshot, widget_values
from dask_observe.recording.lifecycle import Recording


def inc(x: int) -> int:
    return x + 1


class CountingView:
    """What WidgetView would send: a message per part whose HTML changed."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.messages = 0
        self.payload = 0
        self.lock = threading.Lock()

    def show(self, snapshot: Snapshot) -> None:
        with self.lock:
            for key, value in widget_values(snapshot, "bench").items():
                if self.values.get(key) != value:
                    self.values[key] = value
                    self.messages += 1
                    self.payload += len(value.encode())

    def close(self) -> None:
        pass


def crunch(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def workload(client: Client, n: int, prefixes: int) -> None:
    per = max(n // prefixes, 1)
    workers = list(client.nthreads())
    futures = client.map(
        inc, range(per), key=[f"step0-{i}" for i in range(per)], workers=workers[:1]
    )
    for p in range(1, prefixes):
        futures = client.map(
            inc,
            futures,
            key=[f"step{p}-{i}" for i in range(per)],
            workers=[workers[p % len(workers)]],
        )
    cpu = client.map(crunch, [8_000_000] * 4, pure=False)
    client.gather(futures + cpu)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--prefixes", type=int, default=50)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    rows = []
    # Queued tiny tasks cost ~1.6 ms each here; the benchmark measures reports.
    with (
        dask.config.set({"distributed.scheduler.worker-saturation": float("inf")}),
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as lc,
        Client(lc) as client,
        dask_observe.open_store(tmp / "bench.sqlite") as store,
    ):
        for n in args.tasks:
            theirs = tmp / f"performance-report-{n}.html"
            recording = Recording(f"report {n}", client, store)
            recording.start()
            view = CountingView()
            live = LiveProgress(recording, view).start()
            started = time.perf_counter()
            with performance_report(filename=str(theirs)):
                workload(client, n, args.prefixes)
            elapsed = time.perf_counter() - started
            live.stop()
            run = recording.stop()
            began = time.perf_counter()
            report = run.report()
            inline = report.inline_html
            full = report.html
            rendered = time.perf_counter() - began
            # Both new sections have something to show, or the sizes say nothing.
            moved = int(run.transfers()["count"].sum())
            functions = len(run.profile())
            assert moved and functions and "Transfers between" in inline
            rows.append(
                (
                    run.summary()["n_tasks"],
                    len(inline.encode()),
                    len(full.encode()),
                    rendered,
                    theirs.stat().st_size,
                    view.messages / elapsed,
                    view.payload / elapsed,
                    moved,
                    functions,
                )
            )
            print(
                f"{rows[-1][0]:>7} tasks: inline {rows[-1][1] / 1024:.0f} KiB, "
                f"full {rows[-1][2] / 1024:.0f} KiB, rendered in {rendered:.2f} s; "
                f"performance_report {rows[-1][4] / 2**20:.2f} MiB; widget "
                f"{rows[-1][5]:.1f} msg/s, {rows[-1][6] / 1024:.1f} KiB/s "
                f"over {elapsed:.1f} s; {moved:,} transfers, {functions} profile rows",
                flush=True,
            )
    print()
    print("| tasks | inline report | full report | render time | performance_report "
          "| widget msg/s | widget payload/s | transfers | profile rows |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n, inline_b, full_b, t, theirs_b, rate, payload, moved, functions in rows:
        print(
            f"| {n:,} | {inline_b / 1024:.0f} KiB | {full_b / 1024:.0f} KiB "
            f"| {t:.2f} s | {theirs_b / 2**20:.2f} MiB | {rate:.1f} "
            f"| {payload / 1024:.1f} KiB | {moved:,} | {functions} |"
        )


if __name__ == "__main__":
    main()

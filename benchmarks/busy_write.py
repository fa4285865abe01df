"""Writing pulled records beside a busy event loop, as a recording kernel does.

    .venv/bin/python benchmarks/busy_write.py --variant old=../old --variant new=.

A kernel with a LocalCluster of many workers in it (``processes=False``) runs
their event loop in a thread that holds the GIL nearly all the time, and the
recorder writes what it pulls from another thread. This writes the records of
a 200-worker run's edge (400 metrics records of 19 values: 7,600 rows) into a
real store through ``Store.append`` (the path a pull's ``ingest`` takes), alone
and then beside a thread that only computes (the worst such loop), five times
each; the median is shown. Then a run's own rows, as a recorded block writes
them on its path: the run created, its fine metrics (``--fine`` rows) and
profile stored, the run ended; alone and beside the busy thread, median of
``--repeat`` runs. Each variant runs in a process of its own with its
``PATH`` first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def run_rows(store: Any, repeat: int, fine: int) -> float:
    """Median milliseconds of a run's own rows (see the module)."""
    rows = [
        ("compute", f"prefix-{i}", "thread-cpu", "seconds", 0.5) for i in range(fine)
    ]
    tree = {"count": 10, "children": {}}
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run_id = store.create_run("edge", cluster="busy")
        store.set_fine_metrics(run_id, rows)
        store.set_profiles(run_id, {"": tree, "prefix-0": tree})
        store.end_run(run_id, "finished", n_tasks=1)
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def beside_busy_thread(measure: Callable[[], T]) -> T:
    """``measure()`` while another thread only computes (the worst event loop
    beside the writes)."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        return measure()
    finally:
        stop.set()
        spinner.join()


def one(repeat: int, fine: int) -> dict[str, float]:
    from dask_observe import Store
    from dask_observe.capture.wire import MetricsRecord

    names = [f"metric_{i}" for i in range(19)]
    folder = Path(tempfile.mkdtemp(prefix="busy-write-"))
    folder.chmod(0o700)
    store = Store(folder / "store.sqlite")

    def batch(t: float) -> list[MetricsRecord]:
        return [
            MetricsRecord(
                "metrics", t, f"tcp://10.0.0.{w}:4000", dict.fromkeys(names, 1.0)
            )
            for w in range(200)
            for _ in range(2)
        ]

    def timed() -> float:
        times = []
        for i in range(repeat):
            records = batch(1000.0 + i)
            started = time.perf_counter()
            store.telemetry.append("busy", records)
            times.append(time.perf_counter() - started)
        return 1000 * statistics.median(times)

    alone = timed()
    run_alone = run_rows(store, repeat, fine)
    beside, run_beside = beside_busy_thread(
        lambda: (timed(), run_rows(store, repeat, fine))
    )
    store.close()
    return {
        "alone_ms": alone,
        "beside_ms": beside,
        "run_alone_ms": run_alone,
        "run_beside_ms": run_beside,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--fine", type=int, default=40, help="a run's fine metrics")
    parser.add_argument("--one", action="store_true")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.repeat, args.fine)))
        return
    print(
        "| variant | 7,600 rows alone | beside a busy thread "
        "| a run's own rows alone | beside a busy thread |"
    )
    print("| --- | --- | --- | --- | --- |")
    for name, path in (v.split("=", 1) for v in args.variant or ["this=."]):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(path).resolve()), env.get("PYTHONPATH", "")]
        )
        command = [sys.executable, __file__, "--one", "--repeat", str(args.repeat)]
        command += ["--fine", str(args.fine)]
        out = subprocess.run(
            command, env=env, capture_output=True, text=True, check=True
        )
        found = json.loads(out.stdout.splitlines()[-1])
        cells = [
            f"{found[k]:.1f} ms"
            for k in ("alone_ms", "beside_ms", "run_alone_ms", "run_beside_ms")
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

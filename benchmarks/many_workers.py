"""What the capture must carry per second on a cluster of many workers,
simulated where this machine cannot hold the processes (issue 36, item 4).

    .venv/bin/python benchmarks/many_workers.py --workers 200 2000 --seconds 60
    .venv/bin/python benchmarks/many_workers.py --variant new=. --variant old=../old
    .venv/bin/python benchmarks/many_workers.py --seconds 20 --loads idle --edges 5

For each worker count and load, the scheduler plugin of the code on
``PYTHONPATH`` runs on a stand-in scheduler holding that many real
``distributed.scheduler.WorkerState`` objects. Simulated seconds go by: each
worker's heartbeat arrives at distributed's own interval for that cluster size
(``heartbeat_interval``: 0.5 s up to 10 workers, 2 s at 200, 11 s at 2,000),
staggered, with fresh numbers (memory, CPU, event loop); under ``busy`` load
every worker's count of tasks processing also changes every second. The
plugin's periodic ``sample()`` runs once a simulated second, as its
``metrics-interval`` has it. Measured per second of cluster time:

- metric records and values (a value is a row in the store) the sample made,
  and its CPU time on the scheduler's event loop;
- the bytes of those records as a pull carries them (msgpack, as distributed's
  comms send them);
- the time to write them into a real store, and what they add to its file;
- each worker's own fast memory samples (``MemorySampler``, 10 a second, on an
  idle worker whose memory does not move): rows a second for the cluster.

With ``--edges N``, then a run's edge on that cluster, a run each heartbeat
interval: the run's first sample (its start), those rows written into the
store, and the run's end closed; median of N runs, alone and beside a thread
that only computes (as the 200 in-process workers' event loop of
``fixed_cost.py`` takes turns for the GIL with the writes). It checks that
each run has every worker's memory limit.

With several ``--variant NAME=PATH``, each variant runs in a process of its
own with ``PATH`` first on ``PYTHONPATH``, one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

GiB = 2**30


def make_workers(n: int) -> dict[str, Any]:
    from distributed.core import Status
    from distributed.scheduler import WorkerState

    workers = {}
    for i in range(n):
        address = f"tcp://10.0.{i // 250}.{i % 250}:4000"
        workers[address] = WorkerState(
            address=address,
            status=Status.running,
            pid=1000 + i,
            name=i,
            nthreads=4,
            memory_limit=8 * GiB,
            local_directory="/tmp",
            nanny=None,
            server_id=f"worker-{i}",
        )
    return workers


def heartbeat(ws: Any, now: float, rng: random.Random) -> None:
    """What a heartbeat changes on the scheduler's WorkerState."""
    ws.last_seen = now
    ws.metrics = {
        "memory": int(rng.uniform(0.5, 2.0) * GiB),
        "managed_bytes": int(rng.uniform(0.1, 0.4) * GiB),
        "spilled_bytes": {"memory": 0, "disk": 0},
        "cpu": rng.uniform(0, 400),
        "task_counts": {"executing": rng.randint(0, 4), "ready": rng.randint(0, 8)},
        "bandwidth": {"total": 100e6, "workers": {}, "types": {}},
        "transfer": {"incoming_bytes": 0, "outgoing_bytes": 0},
        "host_net_io": {"read_bps": rng.uniform(0, 1e6), "write_bps": 1e5},
        "host_disk_io": {"read_bps": 0.0, "write_bps": 0.0},
        "event_loop_interval": rng.uniform(0.019, 0.025),
        "gil_contention": rng.uniform(0, 0.2),
    }


def run_edges(
    plugin: Any, store: Any, n: int, edges: int, between: Any, pull: Any
) -> dict[str, Any]:
    """A run's edge (see the module), ``edges`` times, ``between()`` before
    each: its rows and the median milliseconds of its start's sample, their
    write (``pull()``: rows and seconds) and its end."""
    import statistics

    rows, sample, write, end = [], [], [], []
    for i in range(edges):
        between()
        run_id = store.create_run(f"edge {i}", cluster="sim")
        started = time.perf_counter()
        plugin.runs.begin(f"span-{i}")
        sample.append(time.perf_counter() - started)
        written, seconds = pull()
        rows.append(written)
        write.append(seconds)
        started = time.perf_counter()
        store.end_run(run_id, "finished")
        end.append(time.perf_counter() - started)
        limits = store.run(run_id).metrics("memory_limit")
        assert limits["worker"].nunique() == n, f"{limits['worker'].nunique()} of {n}"
        plugin.runs.unwatch(f"span-{i}")

    def ms(times: list[float]) -> float:
        return 1000 * statistics.median(times)

    total = [a + b + c for a, b, c in zip(sample, write, end, strict=True)]
    return {
        "edge_rows": statistics.median(rows),
        "edge_sample_ms": ms(sample),
        "edge_write_ms": ms(write),
        "edge_end_ms": ms(end),
        "edge_ms": ms(total),
    }


def simulate(n: int, seconds: int, load: str, edges: int = 0) -> dict[str, Any]:
    """One cluster size and load, in this process (``--one``)."""
    import asyncio

    import msgpack
    from distributed.scheduler import heartbeat_interval

    import dask_observe
    from dask_observe import Store
    from dask_observe.capture.scheduler import ObserveSchedulerPlugin
    from dask_observe.capture.worker import MemorySampler
    from dask_observe.recording.plugins import capture_settings

    rng = random.Random(0)
    workers = make_workers(n)
    scheduler = SimpleNamespace(
        workers=workers, task_prefixes={}, tasks={}, handlers={}, services={},
        cumulative_worker_metrics={}, extensions={}, queued=[], unrunnable={},
    )  # fmt: skip
    interval = heartbeat_interval(n)
    phase = {a: rng.uniform(0, interval) for a in workers}
    plugin = ObserveSchedulerPlugin(capture_settings(time.time()))
    samplers = [
        MemorySampler(
            SimpleNamespace(  # type: ignore[arg-type]  # what it reads of a Worker
                address=a,
                memory_manager=SimpleNamespace(memory_limit=8 * GiB),
                periodic_callbacks={
                    "heartbeat": SimpleNamespace(callback_time=interval * 1000)
                },
            ),
            SimpleNamespace(samples=[]),  # type: ignore[arg-type]
        )
        for a in workers
    ]
    folder = Path(tempfile.mkdtemp(prefix="many-workers-"))
    folder.chmod(0o700)
    store = Store(folder / "store.sqlite")
    empty = sum(p.stat().st_size for p in folder.iterdir())
    records = values = wire = 0
    sample_s = write_s = 0.0
    memory_rows = 0
    edge: dict[str, Any] = {}
    writing = store

    async def main() -> None:
        nonlocal records, values, wire, sample_s, write_s, memory_rows, writing
        await plugin.start(scheduler)  # type: ignore[arg-type]
        plugin._sampler.stop()  # driven by simulated time below
        plugin._ticker.stop()
        for ws in workers.values():  # every worker has sent one heartbeat
            heartbeat(ws, 0.0, rng)
        plugin.sample()  # the cluster as a recording finds it: not counted
        cursor = plugin.buffer.last

        def pull() -> tuple[int, float]:
            """What the plugin buffered since the last pull, written to the
            store: its metric values and the seconds the write took."""
            nonlocal records, values, wire, write_s, cursor
            batch = plugin.buffer.after(cursor, 10**9)
            cursor = plugin.buffer.last
            metrics = [r for _, r in batch if r[0] == "metrics"]
            records += len(metrics)
            written = sum(len(r[3]) for r in metrics)
            values += written
            wire += len(msgpack.packb([list(r) for _, r in batch], default=str))
            started = time.perf_counter()
            writing.telemetry.append("sim", [r for _, r in batch])
            took = time.perf_counter() - started
            write_s += took
            return written, took

        def advance(second: int) -> None:
            """One simulated second: the heartbeats due, the plugin's sample,
            its records written to the store."""
            nonlocal sample_s
            for address, ws in workers.items():
                # Heartbeats due in this second, at the cluster's interval.
                beats = int((second - phase[address]) // interval)
                before = int((second - 1 - phase[address]) // interval)
                if beats > before:
                    heartbeat(ws, float(second), rng)
                if load == "busy":
                    ws.processing = set(range(rng.randint(0, 8)))
            started = time.process_time()
            plugin.sample()
            sample_s += time.process_time() - started
            pull()

        for second in range(1, seconds + 1):
            advance(second)
            for tick in range(10):
                now = second + tick / 10
                for sampler in samplers:
                    sampler.sample(now)
        memory_rows = sum(len(s.shipper.samples) for s in samplers)
        if edges:
            # The per-second figures above are of the simulated seconds alone.
            counted = records, values, wire, sample_s, write_s
            # Into a store of their own: the one above is measured for size.
            edges_folder = Path(tempfile.mkdtemp(prefix="many-workers-edges-"))
            edges_folder.chmod(0o700)
            writing = Store(edges_folder / "store.sqlite")
            # A run each heartbeat interval: between two, every worker's
            # heartbeat came and was sampled, as on a cluster between cells.
            clock = iter(range(seconds + 1, 10**9))

            def between() -> None:
                for _ in range(int(interval + 0.999)):
                    advance(next(clock))

            edge.update(run_edges(plugin, writing, n, edges, between, pull))
            from busy_write import beside_busy_thread  # this script's folder

            busy = beside_busy_thread(
                lambda: run_edges(plugin, writing, n, edges, between, pull)
            )
            edge["edge_busy_ms"] = busy["edge_ms"]
            records, values, wire, sample_s, write_s = counted
            writing.close()
        await plugin.close()

    asyncio.run(main())
    store.close()
    size = sum(p.stat().st_size for p in folder.iterdir())
    return {
        "version": dask_observe.__version__,
        "workers": n,
        "load": load,
        "heartbeat_s": interval,
        "records_per_s": records / seconds,
        "values_per_s": values / seconds,
        "sample_ms_per_s": 1000 * sample_s / seconds,
        "wire_kib_per_s": wire / seconds / 1024,
        "store_write_ms_per_s": 1000 * write_s / seconds,
        "store_kib_per_s": (size - empty) / seconds / 1024,
        "memory_samples_per_s": memory_rows / seconds,
        **edge,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[200, 2000])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--loads", nargs="+", default=["idle", "busy"])
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--edges", type=int, default=0, help="runs' edges to time")
    parser.add_argument("--one", nargs=3, metavar=("WORKERS", "SECONDS", "LOAD"))
    args = parser.parse_args()
    if args.one:
        n, seconds, load = args.one
        print(json.dumps(simulate(int(n), int(seconds), load, args.edges)))
        return
    variants = [v.split("=", 1) for v in args.variant] or [["this", "."]]
    rows = []
    for n in args.workers:
        for load in args.loads:
            for name, path in variants:
                env = dict(os.environ)
                env["PYTHONPATH"] = os.pathsep.join(
                    [str(Path(path).resolve()), env.get("PYTHONPATH", "")]
                )
                one = ["--one", str(n), str(args.seconds), load]
                one += ["--edges", str(args.edges)]
                out = subprocess.run(
                    [sys.executable, __file__, *one],
                    env=env, capture_output=True, text=True, check=True,
                )  # fmt: skip
                row = {"variant": name, **json.loads(out.stdout.splitlines()[-1])}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
    columns = [
        ("variant", "{}"), ("workers", "{:,}"), ("load", "{}"),
        ("heartbeat_s", "{:g} s"), ("records_per_s", "{:,.0f}"),
        ("values_per_s", "{:,.0f}"), ("sample_ms_per_s", "{:.1f} ms"),
        ("wire_kib_per_s", "{:,.0f} KiB"), ("store_write_ms_per_s", "{:.0f} ms"),
        ("store_kib_per_s", "{:,.0f} KiB"), ("memory_samples_per_s", "{:,.0f}"),
    ]  # fmt: skip
    print("| " + " | ".join(c for c, _ in columns) + " |")
    print("|" + " --- |" * len(columns))
    for row in rows:
        print("| " + " | ".join(f.format(row[c]) for c, f in columns) + " |")
    if args.edges:
        edge_columns = [
            ("variant", "{}"), ("workers", "{:,}"), ("load", "{}"),
            ("edge_rows", "{:,.0f}"), ("edge_sample_ms", "{:.1f} ms"),
            ("edge_write_ms", "{:.1f} ms"), ("edge_end_ms", "{:.1f} ms"),
            ("edge_ms", "{:.1f} ms"), ("edge_busy_ms", "{:.1f} ms"),
        ]  # fmt: skip
        print()
        print("| " + " | ".join(c for c, _ in edge_columns) + " |")
        print("|" + " --- |" * len(edge_columns))
        for row in rows:
            cells = (f.format(row[c]) for c, f in edge_columns)
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

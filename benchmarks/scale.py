"""Scale: many workers and many tasks, recorded and not, side by side.

    .venv/bin/python benchmarks/scale.py --cluster 16 --tasks 20000 --rounds 3
    .venv/bin/python benchmarks/scale.py --cluster 200-threads --tasks 20000
    .venv/bin/python benchmarks/scale.py --cluster 2-subprocess --tasks 1000000 \
        --rounds 1 --workload batches

``--cluster``: ``2`` or ``16`` worker processes of one thread (1 GiB each), or
``200-threads``: 200 workers in this process (``processes=False``), which is as
close to a 200-worker cluster as two cores allow (one event loop for all, so it
measures the scheduler's and the recorder's side, not 200 separate machines).

Each round runs the workload unrecorded and recorded, in an order alternating from
round to round. The workload (``--workload array``) is a 1-D dask array of
one-element chunks, incremented and summed: ``--tasks`` is about how many tasks it
makes (the exact count is the recorded run's). ``--workload map`` is ``--tasks``
independent futures (``client.map``, gathered at once) with queuing off, as a
scheduler of that many tiny tasks is best run: the way to a million tasks on two
cores in about half an hour rather than hours; ``--workload batches`` the same
in batches of 50,000 futures, each gathered and released before the next.
``--cluster 2-subprocess``: the scheduler and 2 workers each in a process of
their own (distributed's ``SubprocessCluster``), nothing shared with the client
and recorder's process. Per run it prints:

- ``wall``: seconds of the compute (the recorded run's ``record`` block included);
- ``end``: seconds from the compute's return to the end of the ``record`` block
  (what the recorder had left to pull, and its end-of-run round trip);
- ``ping``: the scheduler's answer to a small request sent every 0.25 s during
  the run (median and worst): whether its event loop stayed responsive;
- ``rss``: the largest resident memory of this process (client and scheduler)
  during the run, sampled with the pings.

For the recorded runs it then times what users do next on the biggest run: the
store's size per task, judging flags (``run.flags()``), a report
(``run.report().html()``), and the side panel's reads of the run (its tasks page
and the run list, through the server's own store API).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import dask.array as da
import dask.config
import psutil
from distributed import Client, LocalCluster

import dask_observe
from dask_observe.server import routes
from dask_observe.store import BaseStore
from dask_observe.store.retention import file_bytes

CLUSTERS: dict[str, dict[str, Any]] = {
    "2": {"n_workers": 2, "threads_per_worker": 1, "memory_limit": "4GiB"},
    "16": {"n_workers": 16, "threads_per_worker": 1, "memory_limit": "1GiB"},
    # Workers in one process each measure the whole process's memory: with a
    # limit (its share of the machine, 120 MiB) all 200 would pause at once.
    "200-threads": {
        "n_workers": 200,
        "threads_per_worker": 1,
        "processes": False,
        "memory_limit": 0,
    },
}
#: Clusters whose scheduler runs in a process of its own (distributed's
#: SubprocessCluster), as on a real cluster: the client's and the recorder's
#: work in this process does not share the scheduler's event loop or GIL.
SUBPROCESS_CLUSTERS: dict[str, dict[str, Any]] = {
    "2-subprocess": {
        "n_workers": 2,
        "threads_per_worker": 1,
        "worker_kwargs": {"memory_limit": "4GiB"},
    },
}


def start_cluster(name: str) -> Any:
    if name in SUBPROCESS_CLUSTERS:
        from distributed.deploy.subprocess import SubprocessCluster

        # SubprocessCluster never reads its scheduler's stderr pipe: a scheduler
        # logging INFO (the pings' "Run out-of-band function" lines) blocks on
        # it for good after ~190 kB (it did, 13 min into a million tasks).
        os.environ["DASK_LOGGING__DISTRIBUTED"] = "warning"

        return SubprocessCluster(dashboard_address=":0", **SUBPROCESS_CLUSTERS[name])
    return LocalCluster(dashboard_address=":0", **CLUSTERS[name])


def noop() -> None:
    return None


class Pinger:
    """Asks the scheduler for a trivial answer every 0.25 s from a thread of its
    own, and samples this process's memory at the same time."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.pings: list[float] = []
        self.rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.25):
            started = time.perf_counter()
            self.client.run_on_scheduler(noop)
            self.pings.append(time.perf_counter() - started)
            self.rss = max(self.rss, me.memory_info().rss)

    def __enter__(self) -> Pinger:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def array_sum(client: Client, tasks: int) -> None:
    """About ``tasks`` tasks: one-element chunks incremented, then summed."""
    chunks = max(1, round(tasks * 0.75))  # the sum's tree adds about a third
    assert (da.ones((chunks,), chunks=1) + 1).sum().compute() == 2 * chunks


def mapped(client: Client, tasks: int) -> None:
    """``tasks`` independent tiny tasks, submitted and gathered at once."""
    futures = client.map(abs, range(tasks), pure=False)
    assert client.gather(futures)[-1] == tasks - 1
    del futures


#: Futures a batch of ``--workload batches`` holds at once.
BATCH = 50_000


def batched(client: Client, tasks: int) -> None:
    """``tasks`` independent tiny tasks in batches of BATCH, each submitted,
    gathered and released before the next: the way a million futures are
    best sent (one gather of a million holds the client's loop for a minute)."""
    for first in range(0, tasks, BATCH):
        numbers = range(first, min(first + BATCH, tasks))
        futures = client.map(abs, numbers, pure=False)
        assert client.gather(futures)[-1] == numbers[-1]
        del futures


WORKLOADS = {"array": array_sum, "map": mapped, "batches": batched}


def one_run(
    client: Client, tasks: int, name: str | None, workload: str = "array"
) -> dict[str, Any]:
    """One compute of about ``tasks`` tasks; recorded as ``name`` unless None."""
    gc.collect()
    recording = dask_observe.record(name, client=client) if name else nullcontext()
    with Pinger(client) as pinger:
        started = time.perf_counter()
        with recording:
            WORKLOADS[workload](client, tasks)
            computed = time.perf_counter()
        ended = time.perf_counter()
    pings = pinger.pings or [float("nan")]
    return {
        "wall": ended - started,
        "end": ended - computed,
        "ping": statistics.median(pings),
        "worst ping": max(pings),
        "rss": pinger.rss / 2**20,
    }


def timed(what: str, action: Any) -> Any:
    started = time.perf_counter()
    result = action()
    print(f"  {what}: {time.perf_counter() - started:.2f} s", flush=True)
    return result


def after_the_run(path: Path) -> None:
    """What a user does next with the last recorded run, timed."""
    with dask_observe.open_store(path) as store:
        store.rows("PRAGMA wal_checkpoint(TRUNCATE)", ())
        run = store.run("last")
        n = len(run.tasks())
        print(f"the last recorded run: {n} tasks stored", flush=True)
        every = sum(r["n_tasks"] or 0 for r in store.run_records())
        print(
            f"  store file: {file_bytes(path) / 2**20:.0f} MiB, "
            f"{file_bytes(path) / every:.0f} bytes per task recorded "
            f"({every} tasks; with the metrics and logs of every run)"
        )
        flags = timed("flags (run.flags())", run.flags)
        print(f"    {list(flags['kind'])}")
        report = timed("report (run.report().html)", lambda: run.report().html)
        print(f"    {len(report) / 2**20:.2f} MiB of HTML")
    # The side panel's reads, as the server makes them (a read-only store).
    with BaseStore(path, readonly=True) as store:
        timed("panel: the run list", store.run_records)
        timed("panel: the run (summary, flags)", lambda: routes.read_run(store, "last"))
        timed("panel: the run's report", lambda: routes.read_report(store, "last"))
        page: dict[str, Any] = {"after": 0, "limit": 500, "upto": None, "filters": {}}
        lines = lambda: routes.read_logs(store, "last", page)  # noqa: E731
        timed("panel: a page of log lines", lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--cluster", choices=[*CLUSTERS, *SUBPROCESS_CLUSTERS], default="16"
    )
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--recorded-only", action="store_true",
        help="no unrecorded runs (for runs too long to make twice)",
    )  # fmt: skip
    parser.add_argument("--workload", choices=list(WORKLOADS), default="array")
    args = parser.parse_args()

    path = Path(tempfile.mkdtemp()) / "scale.sqlite"
    # Queuing sends a task per free thread per round trip (~1.6 ms a tiny task
    # here); independent futures are sent in bulk without it.
    saturation = 1.1 if args.workload == "array" else float("inf")
    # (The environment too: a scheduler in a process of its own reads it.)
    os.environ["DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION"] = str(saturation)
    with (
        dask.config.set({"observe.store": str(path)}),
        dask.config.set({"distributed.scheduler.worker-saturation": saturation}),
        start_cluster(args.cluster) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(len(cluster.workers))
        one_run(client, 1000, None, args.workload)  # warm up
        rows: dict[str, list[dict[str, Any]]] = {"unrecorded": [], "recorded": []}
        for i in range(args.rounds):
            order = ["unrecorded", "recorded"][:: 1 if i % 2 == 0 else -1]
            if args.recorded_only:
                order = ["recorded"]
            for kind in order:
                name = f"scale {i}" if kind == "recorded" else None
                row = one_run(client, args.tasks, name, args.workload)
                rows[kind].append(row)
                print(
                    f"round {i} {kind}: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in row.items()),
                    flush=True,
                )
        ratios = [
            r["wall"] / u["wall"]
            for r, u in zip(rows["recorded"], rows["unrecorded"], strict=True)
        ]
        if ratios:
            print(
                f"{args.cluster} workers, ~{args.tasks} tasks: recorded/unrecorded "
                f"wall median x{statistics.median(ratios):.3f} "
                f"(rounds {min(ratios):.3f}-{max(ratios):.3f})"
            )
        for kind, table in rows.items():
            if not table:
                continue
            print(
                f"  {kind}: median end {statistics.median(r['end'] for r in table):.2f}"
                f" s, worst ping {max(r['worst ping'] for r in table):.2f} s"
                f", largest rss {max(r['rss'] for r in table):.0f} MiB"
            )
    after_the_run(path)


if __name__ == "__main__":
    main()

"""Recording overhead: one workload run unrecorded, recorded by dask-observe, and
under distributed.performance_report, side by side on one LocalCluster.

    .venv/bin/python benchmarks/overhead.py --tasks 20000 --rounds 6
    .venv/bin/python benchmarks/overhead.py --workload mixed --tasks 6000 --rounds 16

Each round runs the three once, in an order rotated from round to round, so that
each comes first, second and third equally often: whatever a run leaves behind
for the next one (garbage, a backlog, a warm cache) weighs on all three alike.
Prints, per round and as the median over rounds, the ratio of the recorded and
of the reported run to the unrecorded run of the same round: in wall time, and in
CPU time of every process of the cluster (steadier where other work shares the
machine).

``--order fixed`` runs the older design instead: pairs (unrecorded, recorded) and
(unrecorded, reported), always in that order.

``--workload mixed``: an array reduction, a dataframe shuffle and tiny futures
in one run (about a third of ``--tasks`` each) instead of ``--tasks`` tiny futures.

``--otlp`` records with the live OpenTelemetry export on
(``observe.export.otlp.endpoint`` set to a receiver in this process that takes
every batch): the recorded runs then pay for turning every record into
OpenTelemetry's and sending it. Run it beside a run without, and compare the two
recorded/unrecorded ratios (each measured side by side in its own run).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import dask.config
import psutil
from distributed import Client, LocalCluster, performance_report

import dask_observe

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.otlp import Collector  # the repository's root, above


def inc(x: int) -> int:
    return x + 1


def cpu_seconds() -> float:
    """CPU time (user + system) of this process (client, scheduler, nannies) and
    of its children (the workers): far steadier than wall time on a busy host."""
    here = psutil.Process()
    total = 0.0
    for process in [here, *here.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def mapped(client: Client, n: int) -> None:
    """``n`` tiny tasks."""
    futures = client.map(inc, range(n), pure=False)
    client.gather(futures)
    del futures


def mixed(client: Client, n: int) -> None:
    """Three kinds of work, each about a third of ``n`` tasks: an array
    reduction (random blocks added to their transpose, averaged), a dataframe
    shuffled on a column (distributed's P2P shuffle of dask's demo
    timeseries, the way dask's own benchmarks exercise it), and tiny futures."""
    import dask.array as da
    import dask.datasets

    k = max(2, round((n / 9) ** 0.5))  # k*k blocks, ~3 tasks each
    x = da.random.random((k * 250, k * 250), chunks=250)
    (x + x.T).mean(axis=0).sum().compute()
    days = max(1, round(n / 3 / 96))  # an hour a partition, ~4 tasks each
    frame = dask.datasets.timeseries(
        start="2000-01-01", end=f"2000-01-{1 + days:02d}", freq="1s",
        partition_freq="1h", seed=1,
    )  # fmt: skip
    lengths = frame.shuffle(on="id").map_partitions(len).compute()
    assert int(lengths.sum()) == days * 86_400
    mapped(client, n // 3)


WORKLOADS = {"map": mapped, "mixed": mixed}


def workload(client: Client, n: int, kind: str = "map") -> tuple[float, float]:
    """Wall and CPU seconds of about ``n`` tasks of that workload."""
    started, cpu = time.perf_counter(), cpu_seconds()
    WORKLOADS[kind](client, n)
    return time.perf_counter() - started, cpu_seconds() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--order", choices=["rotated", "fixed"], default="rotated")
    parser.add_argument("--otlp", action="store_true", help="export live (OTLP)")
    parser.add_argument("--workload", choices=list(WORKLOADS), default="map")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp())
    collector = Collector(decode=False) if args.otlp else None
    endpoint = collector.url if collector is not None else None
    with (
        dask.config.set({"observe.export.otlp.endpoint": endpoint}),
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as lc,
        Client(lc) as client,
        dask_observe.open_store(tmp / "bench.sqlite") as store,
    ):
        variants: dict[str, Callable[[int], AbstractContextManager[object]]] = {
            "unrecorded": lambda i: nullcontext(),
            "dask-observe": lambda i: dask_observe.record(
                f"bench {i}", client=client, store=store
            ),
            "performance_report": lambda i: performance_report(
                filename=str(tmp / f"report-{i}.html")
            ),
        }
        names = list(variants)
        workload(client, 1000, args.workload)  # warm up
        ratios: dict[str, list[float]] = {"dask-observe": [], "performance_report": []}
        cpu_ratios: dict[str, list[float]] = {k: [] for k in ratios}
        for i in range(args.rounds):
            if args.order == "rotated":
                order = names[i % 3 :] + names[: i % 3]
            else:
                order = [names[0], names[1], names[0], names[2]]
            seconds: dict[str, float] = {}
            cpu: dict[str, float] = {}
            for name in order:
                with variants[name](i):
                    took, used = workload(client, args.tasks, args.workload)
                if args.order == "fixed" and name in ratios:
                    # each measured run against the unrecorded one just before it
                    ratios[name].append(took / seconds["unrecorded"])
                    cpu_ratios[name].append(used / cpu["unrecorded"])
                seconds[name], cpu[name] = took, used
            if args.order == "rotated":
                for name in ratios:
                    ratios[name].append(seconds[name] / seconds["unrecorded"])
                    cpu_ratios[name].append(cpu[name] / cpu["unrecorded"])
            print(
                f"round {i} ({', '.join(order)}): "
                f"unrecorded {seconds['unrecorded']:.2f} s"
                f", dask-observe x{ratios['dask-observe'][-1]:.3f}"
                f", performance_report x{ratios['performance_report'][-1]:.3f}"
                f" (CPU: x{cpu_ratios['dask-observe'][-1]:.3f}"
                f", x{cpu_ratios['performance_report'][-1]:.3f})",
                flush=True,
            )
        run = store.run("last")
        print(f"stored tasks of last run: {len(run.tasks())} ({args.tasks} asked)")
    if collector is not None:
        print(
            f"OTLP: the collector took {collector.requests} requests, "
            f"{collector.bytes / 2**20:.1f} MiB"
        )
    for what, table in (("wall", ratios), ("CPU", cpu_ratios)):
        for name, values in table.items():
            print(
                f"median {what} ratio {name}/unrecorded: "
                f"{statistics.median(values):.3f} "
                f"(rounds {min(values):.3f}-{max(values):.3f})"
            )


if __name__ == "__main__":
    main()

"""Recording a cluster that has nothing of ours installed costs what recording one
that has dask-observe installed costs: both measured side by side in one run.

    .venv/bin/python benchmarks/remote_overhead.py --tasks 10000 --rounds 6

Two clusters of ``dask scheduler`` / ``dask worker`` processes (2 workers, one
thread each, under nannies): one started from this environment (dask-observe
importable there), one from the environment without it (``tests/remote.py``
builds it). Each round runs, on each cluster, the workload unrecorded and
recorded, in an order rotated from round to round, and prints the ratio
recorded/unrecorded per cluster; also the fixed cost of a recorded one-task
block (start + end of a run) on each. The capture is shipped by value in both
cases, so the two should read the same: this checks that.

``--compare memory-interval`` instead runs two clusters from this environment,
one recorded with the workers sampling their memory every 100 ms (the default),
one every second: what the fast sampler costs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import dask.config
from distributed import Client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dask_observe
from tests.remote import cluster_env, process_cluster


def workload(client: Client, n: int) -> float:
    """Wall seconds of ``n`` tiny tasks (a builtin: both clusters can run it)."""
    started = time.perf_counter()
    client.gather(client.map(abs, range(-n, 0), pure=False))
    return time.perf_counter() - started


def one_task_block(client: Client, store: dask_observe.Store, i: int) -> float:
    """Wall seconds of a recorded block that runs one task."""
    started = time.perf_counter()
    with dask_observe.record(f"tiny {i}", client=client, store=store):
        client.submit(abs, -i, pure=False).result()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tiny", type=int, default=20, help="one-task blocks")
    parser.add_argument(
        "--compare", choices=["installation", "memory-interval"], default="installation"
    )
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp())
    here = Path(sys.executable).parent
    # name -> (environment of the cluster, capture config it is recorded with)
    environments: dict[str, tuple[Path, dict[str, str]]] = (
        {"installed": (here, {}), "not installed": (cluster_env(), {})}
        if args.compare == "installation"
        else {
            "memory 100ms": (here, {"observe.capture.memory-interval": "100ms"}),
            "memory 1s": (here, {"observe.capture.memory-interval": "1s"}),
        }
    )
    with ExitStack() as stack:
        store = stack.enter_context(dask_observe.open_store(tmp / "bench.sqlite"))
        clients: dict[str, Client] = {}
        for name, (bin_dir, capture) in environments.items():
            cluster = stack.enter_context(
                process_cluster(
                    tmp / name.replace(" ", "-"), memory_limit="2GiB", bin_dir=bin_dir
                )
            )
            client = stack.enter_context(Client(cluster.address, timeout="30s"))
            client.wait_for_workers(2, timeout=60)
            # The plugins keep the settings of the recording that registered them.
            with (
                dask.config.set(capture),
                dask_observe.record("warm up", client=client, store=store),
            ):
                workload(client, 1000)
            clients[name] = client

        ratios: dict[str, list[float]] = {name: [] for name in clients}
        for i in range(args.rounds):
            line = []
            for name, client in clients.items():
                seconds: dict[bool, float] = {}
                for recorded in (i % 2 == 0, i % 2 == 1):
                    if recorded:
                        with dask_observe.record(
                            f"bench {i}", client=client, store=store
                        ):
                            seconds[recorded] = workload(client, args.tasks)
                    else:
                        seconds[recorded] = workload(client, args.tasks)
                ratios[name].append(seconds[True] / seconds[False])
                line.append(f"{name} x{ratios[name][-1]:.3f} ({seconds[False]:.2f} s)")
            print(f"round {i}: " + ", ".join(line), flush=True)

        for name, client in clients.items():
            blocks = [one_task_block(client, store, i) for i in range(args.tiny)]
            plain = []
            for i in range(args.tiny):
                started = time.perf_counter()
                client.submit(abs, -i, pure=False).result()
                plain.append(time.perf_counter() - started)
            print(
                f"{name}: a recorded one-task block takes a median "
                f"{statistics.median(blocks) * 1000:.0f} ms, the task alone "
                f"{statistics.median(plain) * 1000:.1f} ms"
            )
    for name, values in ratios.items():
        print(
            f"median ratio recorded/unrecorded, {name}: {statistics.median(values):.3f}"
            f" (rounds {min(values):.3f}-{max(values):.3f})"
        )


if __name__ == "__main__":
    main()

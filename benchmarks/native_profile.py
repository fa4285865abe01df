"""What a native profile costs: one NumPy-heavy workload recorded without and
with ``native=True`` (py-spy on each worker process), side by side.

    .venv/bin/python benchmarks/native_profile.py --rounds 6
    .venv/bin/python benchmarks/native_profile.py --rounds 6 --rate 100

Each round records the workload twice, in an order that alternates from round
to round, on one LocalCluster of two worker processes (two threads each). The
workload: a 6000 x 6000 random array in 36 chunks, its product with its
transpose summed, and each chunk sorted (BLAS and NumPy's sort: compiled code
that py-spy unwinds). Prints, per round and as the median, the wall time of the
work in the block and its ratio native / plain, and the fixed costs: the
run's start (py-spy started on each worker, and attached) and its end (py-spy
stopped, its trace read, given to the tasks and stored).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import dask.array as da
import dask.config
import numpy as np
from distributed import Client, LocalCluster

import dask_observe


def workload() -> None:
    x = da.random.random((6000, 6000), chunks=(1000, 1000))
    (x @ x.T).sum().compute()
    x.map_blocks(np.sort, axis=1).sum().compute()


def recorded(client: Client, store: Path, native: bool) -> tuple[float, float, float]:
    """Seconds of the run's start (until the block runs), of the workload in
    the block, and of the run's end (until its end is stored)."""
    began = time.perf_counter()
    with dask_observe.record("native" if native else "plain", client=client,
                             store=store, native=native) as run:  # fmt: skip
        entered = time.perf_counter()
        workload()
        left = time.perf_counter()
    run.summary()  # waits for the run's end
    return entered - began, left - entered, time.perf_counter() - left


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--rate", type=int, default=20)
    args = parser.parse_args()
    store = Path(tempfile.mkdtemp()) / "observe.sqlite"
    work: list[float] = []
    fixed: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    cluster = LocalCluster(n_workers=2, threads_per_worker=2, dashboard_address=":0")
    with (
        dask.config.set({"observe.profile.native-rate": args.rate}),
        cluster,
        Client(cluster) as client,
    ):
        recorded(client, store, False)  # warm: imports, the capture's setup
        recorded(client, store, True)
        for i in range(args.rounds):
            order = [False, True] if i % 2 == 0 else [True, False]
            times = {native: recorded(client, store, native) for native in order}
            for native, (start, _, end) in times.items():
                fixed[native].append((start, end))
            work.append(times[True][1] / times[False][1])
            print(
                f"round {i + 1}: the work {times[False][1]:.3f} s plain,"
                f" {times[True][1]:.3f} s native (x{work[-1]:.3f}); start"
                f" {times[False][0]:.3f} / {times[True][0]:.3f} s, end"
                f" {times[False][2]:.3f} / {times[True][2]:.3f} s"
            )
        opened = dask_observe.open_store(store)
        runs = opened.runs()
        native_id = int(runs[runs["name"] == "native"]["id"].iloc[0])  # newest
        print(opened.run(native_id).native().to_string(index=False))

    def median(native: bool, i: int) -> float:
        return statistics.median(t[i] for t in fixed[native])

    print(
        f"median of {args.rounds} rounds at {args.rate} samples a second: the work"
        f" x{statistics.median(work):.3f}; the run's start {median(False, 0):.3f} s"
        f" plain, {median(True, 0):.3f} s native; its end {median(False, 1):.3f} s"
        f" plain, {median(True, 1):.3f} s native"
    )


if __name__ == "__main__":
    main()

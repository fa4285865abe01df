"""What a client found by ``%load_ext dask_observe`` costs work nobody records.

    .venv/bin/python benchmarks/discovery.py --rounds 6

With ``observe.discover`` on, a notebook's new client gets a recorder that
copies what its cluster says while the client is connected, recorded or not
(``dask_observe/notebook/discovery.py``). Each round starts a LocalCluster of
two worker processes, as a notebook would, and runs the same unrecorded work
on it: once on a cluster nobody watches, once on one the discovery watches
(its capture put on and its recorder pulling), taking turns. The work: 2,000
small mapped tasks, then a 2,000 x 2,000 array's sum in 64 chunks, then a
dataframe groupby (dask's own examples' shapes). Wall time of the work only
(not the cluster's start); medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import weakref


def inc(x: int) -> int:
    return x + 1


def work(client: object) -> float:
    import dask
    import dask.array as da

    started = time.perf_counter()
    futures = client.map(inc, range(2000), pure=False)  # type: ignore[attr-defined]
    client.gather(futures)  # type: ignore[attr-defined]
    da.random.random((2000, 2000), chunks=250).sum().compute()
    frame = dask.datasets.timeseries(
        start="2000-01-01", end="2000-01-15", freq="10s", partition_freq="1D"
    )
    frame.groupby("name")["x"].mean().compute()
    return time.perf_counter() - started


def round_(watched: bool, store: str) -> float:
    import dask.config
    from distributed import Client, LocalCluster

    from dask_observe.notebook.discovery import watch

    with (
        dask.config.set({"observe.store": store}),
        LocalCluster(
            n_workers=2, threads_per_worker=1, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        thread = None
        if watched:
            import threading

            from dask_observe.store import BaseStore

            thread = threading.Thread(target=watch, args=(weakref.ref(client),))
            thread.start()
            assert client.scheduler is not None
            address = client.scheduler.address
            with BaseStore(store) as opened:
                while not any(
                    c["address"] == address and c["alive"]
                    for c in opened.telemetry.clusters()
                ):
                    time.sleep(0.05)
        took = work(client)
        client.close()
        if thread is not None:
            thread.join(10)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    os.chmod(folder, 0o700)
    store = f"{folder}/observe.sqlite"
    took: dict[bool, list[float]] = {True: [], False: []}
    for i in range(args.rounds):
        for watched in (i % 2 == 0, i % 2 != 0):
            took[watched].append(round_(watched, store))
    off, on = (statistics.median(took[w]) for w in (False, True))
    print(
        f"unrecorded work, {args.rounds} rounds each: {off:.3f} s on a cluster "
        f"nobody watches, {on:.3f} s on one the discovery watches "
        f"(x{on / off:.3f}); each: "
        + ", ".join(f"{w}: " + " ".join(f"{t:.2f}" for t in took[w]) for w in took)
    )


if __name__ == "__main__":
    main()

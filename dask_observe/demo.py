"""``dask-observe demo``: record a sample workload on an embedded LocalCluster."""

from __future__ import annotations

import time
from pathlib import Path

from dask_observe.run import Run, Store


def _slow_square(x: int) -> int:
    time.sleep(0.01)
    return x * x


def run_demo(store: Store, n_workers: int = 2) -> Run:
    """Start a LocalCluster, record a small mixed workload into ``store``."""
    import dask.array as da
    from distributed import Client, LocalCluster

    from dask_observe.recording import record

    print(f"Starting a LocalCluster with {n_workers} workers ...", flush=True)
    with (
        LocalCluster(
            n_workers=n_workers, threads_per_worker=1, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        print(f"Recording the demo workload on {cluster.scheduler_address} ...")
        with record("demo", client=client, store=store) as run:
            x = da.random.random((2000, 2000), chunks=(250, 250))
            (x + x.T).mean(axis=0).std().compute()
            futures = client.map(_slow_square, range(200))
            client.submit(sum, futures).result()
    return run


def print_summary(run: Run, store: Store) -> None:
    summary = run.summary()
    failed = summary["n_failed"]
    report = run.report().save(_report_path(store, run))
    flags = run.flags()
    print()
    print(f"Recorded run {run.id} {run.name!r}: {run.status}")
    print(f"  tasks      {summary['n_tasks']} ({failed} failed)")
    print(f"  wall time  {summary['duration_s']:.2f} s")
    print(f"  flags      {', '.join(flags['kind']) or 'none'}")
    print(f"  store      {store.path}")
    print(f"  report     {report}")
    print()
    print("Where to look next (the commands are in .venv/bin/ in a clone):")
    for command, what in (
        ("dask-observe runs", "every recorded run"),
        (f"dask-observe logs {run.id}", "the run's log lines"),
        ("jupyter lab", 'the "Dask Observe" panel in the left sidebar'),
        ("%load_ext dask_observe", "in a notebook; then %%dask_record NAME on a cell"),
    ):
        # One column whatever the run's id: the id's width shifted it.
        print(f"  {command:<26} {what}")


def _report_path(store: Store, run: Run) -> Path:
    """Reports of demo runs go beside the store, where the user's data lives."""
    folder = store.path.parent / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"run-{run.id}.html"

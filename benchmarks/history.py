"""A named job's history in a store that recorded it for a year: 400 runs
named ``nightly`` among 800, against listing the store, side by side.

    .venv/bin/python benchmarks/history.py [--runs 400] [--repeat 9]

One real run of 20 tasks is recorded on a LocalCluster (2 workers); the store
then gets copies of it (``store.slices``: its tasks, metrics, events and
logs, under new ids), ``--runs`` named ``nightly`` and as many of another
name. Each measurement is repeated, the figures alternating so that the
machine's load falls on both alike: ``runs()`` and ``history("nightly")`` in
this process, then ``dask-observe runs`` and ``dask-observe history
nightly`` as whole processes; before them, the first history of the store
as recorded before it kept each run's figures (taken out of its rows), which
works them out from the runs' tables and keeps them.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from distributed import Client, LocalCluster

import dask_observe
from dask_observe.store import slices


def record(path: Path) -> None:
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as c,
        Client(c) as client,
    ):
        store = dask_observe.open_store(path)
        for name in ("nightly", "other"):
            with dask_observe.record(name, client=client, store=store):
                client.gather(client.map(abs, range(20), pure=False))
        store.close()


def grow(path: Path, runs: int) -> None:
    """``runs`` copies of each recorded run, alternating, as a year of nights."""
    with dask_observe.open_store(path) as store:
        taken = [slices.take(store, run_id) for run_id in (1, 2)]
        for _ in range(runs - 1):
            for record, tables in taken:
                slices.put(store, record, tables)


def seconds(function: Callable[[], Any]) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def cli(path: Path, *args: str) -> None:
    command = str(Path(sys.executable).parent / "dask-observe")
    done = subprocess.run(
        [command, "--store", str(path), *args], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o700)
        path = Path(folder) / "observe.sqlite"
        record(path)
        grow(path, args.runs)
        print(f"{2 * args.runs} runs, {args.runs} named nightly")
        # Runs recorded before schema 16 kept no figures (the recorded runs
        # here, and so their copies, did): the first history works them out
        # from the runs' tables and keeps them in their rows.
        with sqlite3.connect(path) as raw:
            raw.execute("UPDATE runs SET pace = NULL, peak_memory = NULL")
        with dask_observe.open_store(path) as store:
            first = seconds(partial(store.history, "nightly"))
        print(f"  the first history (keeps {args.runs} runs' figures): {first:.2f} s")
        timings: dict[str, list[float]] = {}
        for _ in range(args.repeat):
            with dask_observe.open_store(path) as store:
                measured: list[tuple[str, Callable[[], Any]]] = [
                    ("store.runs()", store.runs),
                    ('store.history("nightly")', partial(store.history, "nightly")),
                    (
                        "store.history(last=20)",
                        partial(store.history, "nightly", last=20),
                    ),
                ]
                for what, function in measured:
                    timings.setdefault(what, []).append(seconds(function))
            for what, command in [
                ("dask-observe runs", ("runs",)),
                ("dask-observe history nightly", ("history", "nightly")),
            ]:
                taken = seconds(partial(cli, path, *command))
                timings.setdefault(what, []).append(taken)
        for what, found in timings.items():
            print(
                f"  {what}: {1000 * statistics.median(found):.0f} ms "
                f"({1000 * min(found):.0f}-{1000 * max(found):.0f})"
            )
        for label, history, runs in [
            ("in this process", 'store.history("nightly")', "store.runs()"),
            ("as processes", "dask-observe history nightly", "dask-observe runs"),
        ]:
            pairs = zip(timings[history], timings[runs], strict=True)
            ratio = [h / r for h, r in pairs]
            print(
                f"  history / runs, {label}: {statistics.median(ratio):.1f}x "
                f"({min(ratio):.1f}-{max(ratio):.1f})"
            )


if __name__ == "__main__":
    main()

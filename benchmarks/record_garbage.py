"""Garbage a record leaves: full collections of the process that holds the
scheduler while a task logs, recorded.

    .venv/bin/python benchmarks/record_garbage.py --rounds 6 \\
        --variant new=. --variant old=../old [--cluster threads|processes]

Each session is a fresh process: a LocalCluster of one worker (``threads``:
in this process, as ``processes=False``; ``processes``: a worker process, the
scheduler still here, as a notebook's default LocalCluster), one warm-up run,
then ten recorded runs of a task logging 12,000 lines. It prints the full
(generation 2) collections of this process over the ten runs and their
seconds (timed with ``gc.callbacks``), this process's CPU seconds, the wall
seconds, and the objects the collector tracks at the end. Sessions of each
``--variant NAME=PATH`` (another commit's checkout, first on ``PYTHONPATH``)
alternate.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from variants import parse, sessions


def chatter(n: int) -> int:
    log = logging.getLogger("user.bench")
    for i in range(n):
        log.warning("a line of a chatty task %d", i)
    return n


def session(processes: bool) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    import dask_observe

    full = {"n": 0, "s": 0.0}
    started = [0.0]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        elif info["generation"] == 2:
            full["n"] += 1
            full["s"] += time.perf_counter() - started[0]

    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=processes,
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as client,
    ):  # fmt: skip
        store = dask_observe.open_store(Path(tmp) / "s.sqlite")
        with dask_observe.record("warm", client=client, store=store):
            client.submit(chatter, 10, pure=False).result()
        store.runs()
        gc.collect()
        gc.callbacks.append(timed)
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(10):
            with dask_observe.record(f"chatty {i}", client=client, store=store):
                client.submit(chatter, 12_000, pure=False).result()
        store.runs()  # their ends written
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        gc.callbacks.remove(timed)
        return {**full, "cpu": cpu, "wall": wall, "tracked": len(gc.get_objects())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--cluster", choices=["threads", "processes"], default="threads"
    )
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--session", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.session:
        print(json.dumps(session(args.cluster == "processes")))
        return
    variants = parse(args.variant)
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    session_args = ["--session", "--cluster", args.cluster]
    for n, name, got in sessions(__file__, variants, args.rounds, session_args):
        found[name].append(got)
        print(
            f"session {n + 1} {name}: {got['n']} full collections, "
            f"{got['s']:.3f} s; CPU {got['cpu']:.2f} s, wall {got['wall']:.2f} s; "
            f"{got['tracked']:,} objects tracked"
        )
    for name, measured in found.items():

        def median(field: str, measured: list[dict[str, Any]] = measured) -> float:
            return float(statistics.median(s[field] for s in measured))

        print(
            f"{name}: median {median('n'):.0f} full collections, "
            f"{median('s'):.3f} s; CPU {median('cpu'):.2f} s, wall "
            f"{median('wall'):.2f} s; {median('tracked'):,.0f} objects tracked"
        )


if __name__ == "__main__":
    main()

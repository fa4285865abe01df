"""A new store on a long-lived cluster: how long until its first run's first line?

A store that never read a cluster used to copy the scheduler's whole buffer
(up to ``capture.buffer-size``, 100,000 records) before anything newer; it now
starts at the cluster's last ``observe.recorder.backlog`` (30 s). Both are
measured side by side in one process on one cluster, alternating, the old
behaviour reproduced by a backlog longer than the cluster's life:

    .venv/bin/python benchmarks/new_store.py [--lines 100000] [--rounds 3]

Prints, for each backlog, the seconds from entering ``record()`` to the run's
first line being in the store, and the rows the new store holds.

``--recent``: the cluster's lines are recent (``--lines`` logged just before,
into another store), so a new store copies them (within the 30 s backlog).
Each session is a fresh process; it times the first recorded block into the
new store (entering ``record()`` to its end written) and the stored durations
of that run and two identical ones after it (8 naps of 0.1 s each). With
several ``--variant NAME=PATH`` (another commit's checkout, first on
``PYTHONPATH``), sessions alternate between them:

    .venv/bin/python benchmarks/new_store.py --recent --lines 12000 \
        --rounds 4 --variant new=. --variant old=../old
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dask
from distributed import Client, LocalCluster
from variants import parse, sessions

import dask_observe


def chatter(n: int, text: str) -> int:
    log = logging.getLogger("user.bench")
    for i in range(n):
        log.warning("%s %d", text, i)
    return n


def first_line_after(client: Client, store: Path, backlog: str, marker: str) -> float:
    began = time.perf_counter()
    with (
        dask.config.set({"observe.recorder.backlog": backlog}),
        dask_observe.record("first", client=client, store=store) as run,
    ):
        client.submit(chatter, 1, marker, pure=False).result()
        while run.logs(contains=marker).empty:
            time.sleep(0.01)
        took = time.perf_counter() - began
    return took


@contextmanager
def one_worker() -> Iterator[tuple[Path, Client]]:
    """A temporary folder, and a client of a cluster of one in-process worker."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as lc,
        Client(lc) as client,
    ):
        yield Path(tmp), client


def nap(i: int) -> int:
    time.sleep(0.1)
    return i


def recent_session(lines: int) -> dict[str, Any]:
    """One fresh process: the first block into a new store after ``lines``
    recent lines, and three identical runs' stored durations."""
    with one_worker() as (folder, client):
        with dask_observe.record("before", client=client, store=folder / "a.sqlite"):
            client.submit(chatter, lines, "recent", pure=False).result()
        # That run's end (written after its block, judged from its 12,000
        # lines) would otherwise overlap the next one: ~80 ms of it did.
        dask_observe.open_store(folder / "a.sqlite").runs()
        store = dask_observe.open_store(folder / "b.sqlite")
        durations, first = [], 0.0
        for _ in range(3):
            began = time.perf_counter()
            with dask_observe.record("naps", client=client, store=store) as run:
                for j in range(8):
                    client.submit(nap, j, pure=False).result()
            store.runs()  # its end written
            first = first or time.perf_counter() - began
            durations.append(float(run.summary()["duration_s"]))
        copied = store.rows("SELECT count(*) AS n FROM logs", [])[0]["n"]
        return {"first": first, "durations": durations, "copied": copied}


def recent(args: argparse.Namespace) -> None:
    variants = parse(args.variant)
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    session_args = ["--recent-session", "--lines", str(args.lines)]
    for n, name, got in sessions(__file__, variants, args.rounds, session_args):
        found[name].append(got)
        runs = ", ".join(f"{d:.3f}" for d in got["durations"])
        print(
            f"session {n + 1} {name}: first block {got['first']:.3f} s, "
            f"runs {runs} s, {got['copied']} lines in the new store"
        )
    for name, measured in found.items():
        firsts = [float(s["first"]) for s in measured]
        durations = [[float(d) for d in s["durations"]] for s in measured]
        print(
            f"{name}: first block median {statistics.median(firsts):.3f} s; "
            f"first run {statistics.median(r[0] for r in durations):.3f} s, the "
            f"next two {statistics.median(d for r in durations for d in r[1:]):.3f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--recent", action="store_true")
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--recent-session", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.recent_session:
        print(json.dumps(recent_session(args.lines)))
        return
    if args.recent:
        recent(args)
        return
    with one_worker() as (folder, client):
        # The capture installed, then a long-lived cluster's history.
        with dask_observe.record("setup", client=client, store=folder / "a.sqlite"):
            client.submit(chatter, 1, "setup", pure=False).result()
        client.submit(chatter, args.lines, "history", pure=False).result()
        time.sleep(31.0)  # older than the default backlog, as a day's would be
        found: dict[str, list[float]] = {"whole buffer": [], "30s": []}
        for i in range(args.rounds):
            for label, backlog in (("whole buffer", "1000000s"), ("30s", "30s")):
                store = folder / f"{label.replace(' ', '-')}-{i}.sqlite"
                found[label].append(
                    first_line_after(client, store, backlog, f"marker-{label}-{i}")
                )
                with dask_observe.Store(store) as s:
                    rows = s.rows("SELECT count(*) AS n FROM logs", [])[0]["n"]
                print(f"round {i} {label:>12}: {found[label][-1]:.3f} s, {rows} lines")
        for label, times in found.items():
            print(f"{label:>12}: median {statistics.median(times):.3f} s")
        ratio = statistics.median(found["whole buffer"]) / statistics.median(
            found["30s"]
        )
        print(f"whole buffer / 30 s backlog: x{ratio:.1f}")


if __name__ == "__main__":
    main()

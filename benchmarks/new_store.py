"""A new store on a long-lived cluster: how long until its first run's first line?

A store that never read a cluster used to copy the scheduler's whole buffer
(up to ``capture.buffer-size``, 100,000 records) before anything newer; it now
starts at the cluster's last ``observe.recorder.backlog`` (30 s). Both are
measured side by side in one process on one cluster, alternating, the old
behaviour reproduced by a backlog longer than the cluster's life:

    .venv/bin/python benchmarks/new_store.py [--lines 100000] [--rounds 3]

Prints, for each backlog, the seconds from entering ``record()`` to the run's
first line being in the store, and the rows the new store holds.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

import dask
from distributed import Client, LocalCluster

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as lc,
        Client(lc) as client,
    ):
        folder = Path(tmp)
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

"""What a recorded notebook cell costs: ``%%dask_record`` against a plain cell.

    .venv/bin/python benchmarks/cell_cost.py --cells 15
    .venv/bin/python benchmarks/cell_cost.py --rounds 4 \
        --variant old=../old --variant new=.

An IPython shell (``IPython.testing.globalipapp``: the magics as a kernel runs
them, without a frontend) loads dask_observe, then makes a client of a
LocalCluster of 2 worker processes (a notebook's order; ``--client-first``
the other way round, where no discovery readies the cluster), and runs
one-task cells in rotation: plain,
``%%dask_record --no-widget`` (it ends showing the run's report, as a user
sees it) and ``%%dask_record --no-widget --no-report`` (the summary line only).
A 50 ms pause before each, and ``--pause`` (1 s) before the first, after the
client's cell, as a user reads and types. Medians, the first recorded cell
(the capture shipped then) left out and shown on its own. Each
``--variant`` runs in processes of its own, the variants taking turns for
``--rounds`` rounds; the table shows the median of their medians and range.
``fixed_cost.py`` times the ``with record()`` block alone; the report a cell
shows waits for the run's end written after that block, then renders.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one(cells: int, pause: float, client_first: bool) -> dict[str, list[float]]:
    """Each kind of cell's times (seconds), the first included."""
    # Before dask is imported, which reads its config from the environment
    # then (set after, every variant recorded into the user's own store).
    os.environ["DASK_OBSERVE__STORE"] = tempfile.mkdtemp() + "/observe.sqlite"
    from distributed import LocalCluster
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    assert shell is not None
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as c:
        address = c.scheduler_address
        made = f"from distributed import Client\nclient = Client({address!r})"
        # A notebook's order: the extension first, then the client's cell
        # (the kernel's discovery puts the capture on its cluster after it).
        first = [made, "%load_ext dask_observe"]
        for cell in first if client_first else first[::-1]:
            shell.run_cell(cell)
        shell.run_cell("client.submit(abs, -1, pure=False).result()")
        # Between the client's cell and the first recorded one, a user reads
        # and types: the extension's warm-up runs then (``prepare.warm_up``).
        time.sleep(pause)
        task = "client.submit(abs, -{i}, pure=False).result()"
        kinds = {
            "plain cell": task,
            "%%dask_record": "%%dask_record c{i} --no-widget\n" + task,
            "%%dask_record --no-report": "%%dask_record n{i} --no-widget --no-report\n"
            + task,
        }
        took: dict[str, list[float]] = {kind: [] for kind in kinds}
        for i in range(cells):
            for kind, cell in kinds.items():
                time.sleep(0.05)
                began = time.perf_counter()
                shell.run_cell(cell.format(i=i))
                took[kind].append(time.perf_counter() - began)
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=15)
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help="NAME=PATH: the code at PATH (first on PYTHONPATH), in turns",
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--client-first",
        action="store_true",
        help="make the client before loading the extension (no discovery)",
    )
    parser.add_argument(
        "--pause",
        type=float,
        default=1.0,
        help="seconds between the client's cell and the first recorded one",
    )
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    out = sys.__stdout__
    assert out is not None
    if args.one:
        took = one(args.cells, args.pause, args.client_first)
        print("RESULT " + json.dumps(took), file=out)
        return
    variants = [v.split("=", 1) for v in args.variant or ["this=."]]
    # Each variant's processes, in turns: (kind -> medians, kind -> firsts).
    found: dict[str, tuple[dict[str, list[float]], dict[str, list[float]]]] = {
        name: ({}, {}) for name, _ in variants
    }
    for _ in range(args.rounds):
        for name, path in variants:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(
                [str(Path(path).resolve()), env.get("PYTHONPATH", "")]
            )
            command = [
                sys.executable, __file__, "--one",
                "--cells", str(args.cells), "--pause", str(args.pause),
                *(["--client-first"] if args.client_first else []),
            ]  # fmt: skip
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, check=True
            )
            line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
            for kind, times in json.loads(line[-1][7:]).items():
                found[name][0].setdefault(kind, []).append(statistics.median(times[1:]))
                found[name][1].setdefault(kind, []).append(times[0])
    print("| code | cell (one task) | median (range of the processes' medians) "
          "| first |", file=out)  # fmt: skip
    print("| --- | --- | --- | --- |", file=out)
    for name, (medians, firsts) in found.items():
        for kind, values in medians.items():
            print(
                f"| {name} | {kind} | {statistics.median(values) * 1e3:.1f} ms "
                f"({min(values) * 1e3:.1f}-{max(values) * 1e3:.1f}) "
                f"| {statistics.median(firsts[kind]) * 1e3:.0f} ms |",
                file=out,
            )


if __name__ == "__main__":
    main()

"""What a recorded notebook cell costs: ``%%dask_record`` against a plain cell.

    .venv/bin/python benchmarks/cell_cost.py --cells 15

An IPython shell (``IPython.testing.globalipapp``: the magics as a kernel runs
them, without a frontend) with dask_observe loaded and a client of a
LocalCluster of 2 worker processes runs one-task cells in rotation: plain,
``%%dask_record --no-widget`` (it ends showing the run's report, as a user
sees it) and ``%%dask_record --no-widget --no-report`` (the summary line only).
A 50 ms pause before each, as between a notebook's cells. Medians, the first
recorded cell (the capture shipped then) left out and shown on its own.
``fixed_cost.py`` times the ``with record()`` block alone; the report a cell
shows waits for the run's end written after that block, then renders.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=15)
    args = parser.parse_args()
    from distributed import LocalCluster
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    assert shell is not None
    os.environ["DASK_OBSERVE__STORE"] = tempfile.mkdtemp() + "/observe.sqlite"
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as c:
        address = c.scheduler_address
        shell.run_cell(f"from distributed import Client\nclient = Client({address!r})")
        shell.run_cell("%load_ext dask_observe")
        shell.run_cell("client.submit(abs, -1, pure=False).result()")
        task = "client.submit(abs, -{i}, pure=False).result()"
        kinds = {
            "plain cell": task,
            "%%dask_record": "%%dask_record c{i} --no-widget\n" + task,
            "%%dask_record --no-report": "%%dask_record n{i} --no-widget --no-report\n"
            + task,
        }
        took: dict[str, list[float]] = {kind: [] for kind in kinds}
        for i in range(args.cells):
            for kind, cell in kinds.items():
                time.sleep(0.05)
                began = time.perf_counter()
                shell.run_cell(cell.format(i=i))
                took[kind].append(time.perf_counter() - began)
    out = sys.__stdout__
    assert out is not None
    print("| cell | median | first |", file=out)
    print("| --- | --- | --- |", file=out)
    for kind, times in took.items():
        median = statistics.median(times[1:]) * 1e3
        print(f"| {kind} | {median:.1f} ms | {times[0] * 1e3:.0f} ms |", file=out)


if __name__ == "__main__":
    main()

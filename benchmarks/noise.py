"""Repeat-run noise: how often does ``compare`` mark identical runs?

Each of three workloads (an array reduction, a dataframe groupby, a map of
futures) is recorded ``--runs`` times unchanged on one 2-worker LocalCluster;
every pair of its runs is compared (``--runs 7``: 21 comparisons a workload), and
the marks counted: any mark is a false one. Then one run with twice the work,
compared with the last unchanged run: wall time must be marked.

    .venv/bin/python benchmarks/noise.py [--runs 7]

The same pairs are also judged by the fixed 10% rule of earlier versions (ratio
alone), side by side; and each run from the sixth on, by its wall time against
the band of the runs before it, as a history judges it: Tukey's fences of now
beside the mean and three standard deviations of earlier versions.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import dask
import dask.array as da
import dask.dataframe as dd
import pandas as pd
from distributed import Client, LocalCluster

import dask_observe
from dask_observe.analysis import noise


def mean_sd_band(earlier: list[float], value: float, floor: float = 0.1) -> int:
    """The band of versions before 2026-12-03: the earlier runs' mean and three
    standard deviations (at least ``floor`` of the mean either side)."""
    mean = statistics.fmean(earlier)
    sigma = statistics.stdev(earlier)
    if abs(value - mean) <= max(3 * sigma, floor * abs(mean)):
        return 0
    return 1 if value > mean else -1


def band_marks(walls: list[float]) -> tuple[int, int, int]:
    """Of the runs with five or more before them: how many, and how many each
    band marks (now, then)."""
    judged = now = then = 0
    for i in range(noise.MIN_HISTORY, len(walls)):
        judged += 1
        now += bool(noise.outside(walls[:i], walls[i], 0.1))
        then += bool(mean_sd_band(walls[:i], walls[i]))
    return judged, now, then


def array(client: Client, scale: int) -> None:
    # Anomalies from the mean, as in coiled/benchmarks test_array.py.
    x = da.random.random((4000 * scale, 2000), chunks=(250, 500))
    (x - x.mean(axis=0)).std().compute()


def frame(client: Client, scale: int) -> None:
    pdf = pd.DataFrame({"k": [i % 50 for i in range(400_000 * scale)], "v": 1.0})
    dd.from_pandas(pdf, npartitions=16 * scale).groupby("k").v.sum().compute()


def nap(x: int) -> int:
    time.sleep(0.01)
    return x


def futures(client: Client, scale: int) -> None:
    client.gather(client.map(nap, range(100 * scale), pure=False))


WORKLOADS: dict[str, Callable[[Client, int], None]] = {
    "array": array,
    "dataframe": frame,
    "futures": futures,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    rows = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        dask.config.set({"observe.store": str(Path(tmp) / "noise.sqlite")}),
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as lc,
        Client(lc) as client,
    ):
        for name, work in WORKLOADS.items():
            runs = []
            for _ in range(args.runs):
                with dask_observe.record(name, client=client) as run:
                    work(client, 1)
                runs.append(run)
            marked = fixed = pairs = 0
            for a, b in itertools.combinations(runs, 2):
                table = dask_observe.compare(a, b).table
                pairs += 1
                marks = table[table["verdict"] != ""]
                marked += int(not marks.empty)
                for row in marks.itertuples():
                    print(f"  {name} {a.id}->{b.id}: {row.figure} {row.ratio:.2f}x "
                          f"{row.verdict}", flush=True)  # fmt: skip
                judged = table[(table["unit"] == "s") & table["a"].fillna(0).gt(0.05)]
                fixed += int(((judged["ratio"] - 1).abs() > 0.1).any())
            with dask_observe.record(name, client=client) as double:
                work(client, 2)
            last = dask_observe.compare(runs[-1], double).table.set_index("figure")
            walls = [float(r.summary()["duration_s"]) for r in runs]
            banded, now, then = band_marks(walls)
            rows.append(
                {
                    "workload": name,
                    "pairs": pairs,
                    "marked now": marked,
                    "marked by 10% alone": fixed,
                    "wall spread": f"{min(walls):.2f}-{max(walls):.2f} s",
                    "band marks (now/mean+-3sd)": f"{now}/{then} of {banded}",
                    "2x work: wall time": last.loc["wall time", "verdict"] or "-",
                }
            )
            print(rows[-1], flush=True)
    print(pd.DataFrame(rows).to_string(index=False))
    return 0 if all(r["marked now"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

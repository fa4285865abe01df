"""The report of a small run: what a ``%%dask_record`` cell of one task waits
for after its run's end, read from the store and rendered.

    .venv/bin/python benchmarks/small_report.py --variant old=../old --variant new=.

Each variant, in a process of its own with its ``PATH`` first on
``PYTHONPATH``, records ``--runs`` one-task runs on a LocalCluster of 2
in-process workers, then reads and renders the last run's report ``--repeat``
times, the store opened anew each time (as another process, or a cell after
a restart, reads it), and judges its flags as many times (what its end does
before a cell's report can show; ``diagnose.flag_list``). Variants take
turns for ``--rounds`` rounds, so that the machine's load falls on both
alike; the table shows the median of each variant's medians and their range.
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


def one(runs: int, repeat: int) -> dict[str, float]:
    folder = Path(tempfile.mkdtemp(prefix="small-report-"))
    folder.chmod(0o700)
    path = folder / "observe.sqlite"
    os.environ["DASK_OBSERVE__STORE"] = str(path)

    from distributed import Client, LocalCluster

    import dask_observe

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        for i in range(runs):
            with dask_observe.record(f"small {i}", client=client) as run:
                client.submit(abs, -i, pure=False).result()
            run.summary()  # its end written

    def report() -> str:
        with dask_observe.open_store(path) as store:
            return store.run("last").report().html

    def judge() -> object:
        from dask_observe.diagnose import flag_list

        with dask_observe.open_store(path) as store:
            return flag_list(store.run("last"))

    found = {}
    for name, read in (("report_ms", report), ("judge_ms", judge)):
        read()  # first imports
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            read()
            times.append(time.perf_counter() - started)
        found[name] = 1000 * statistics.median(times)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--one", action="store_true")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.runs, args.repeat)))
        return
    variants = [v.split("=", 1) for v in args.variant or ["this=."]]
    found: dict[str, dict[str, list[float]]] = {name: {} for name, _ in variants}
    for _ in range(args.rounds):
        for name, path in variants:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(
                [str(Path(path).resolve()), env.get("PYTHONPATH", "")]
            )
            command = [
                sys.executable, __file__, "--one",
                "--runs", str(args.runs), "--repeat", str(args.repeat),
            ]  # fmt: skip
            out = subprocess.run(
                command, env=env, capture_output=True, text=True, check=True
            )
            measured = json.loads(out.stdout.splitlines()[-1])
            for what, value in measured.items():
                found[name].setdefault(what, []).append(value)
    print(
        "| variant | a one-task run's report (median of medians, range) "
        "| its flags judged again |"
    )
    print("| --- | --- | --- |")
    for name, kinds in found.items():
        cells = [
            f"{statistics.median(times):.1f} ms ({min(times):.1f}-{max(times):.1f})"
            for times in (kinds["report_ms"], kinds.get("judge_ms", [0.0]))
        ]
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()

"""How long a native dump of a worker's process takes (py-spy, as the capture
runs it for a hung task: ``dask_observe/capture/pyspy.py``).

    .venv/bin/python benchmarks/native_dump.py --rounds 5

A LocalCluster of one worker process with two threads; ``py-spy dump
--native --json`` of that process ``--rounds`` times, the whole command's
time each (py-spy pauses the process while it reads it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

from dask_observe.capture.pyspy import py_spy


def main() -> None:
    from distributed import Client, LocalCluster

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    program = py_spy()
    assert program is not None, "pip install py-spy"
    with (
        LocalCluster(n_workers=1, threads_per_worker=2, dashboard_address=":0") as lc,
        Client(lc) as client,
    ):
        (pid,) = client.run(os.getpid).values()
        took = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            command = [program, "dump", "--native", "--json", "--pid", str(pid)]
            subprocess.run(command, capture_output=True, check=True)
            took.append(time.perf_counter() - started)
    print(
        f"native dump of a worker process, {args.rounds} rounds: "
        + " ".join(f"{t:.3f}" for t in took)
        + f" s (median {statistics.median(took):.3f} s)"
    )


if __name__ == "__main__":
    main()

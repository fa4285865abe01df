"""One "machine" of a team: a process with a store of its own that records
runs on an in-process LocalCluster, each published to the archive by
``observe.archive`` when it ends (set in the environment by the test).

    python -m tests.machine NAME N_RUNS SECONDS [--slow-last-after FILE]
                                                [--done FILE] [--open-cluster]

Each run maps 8 tasks of ``SECONDS``; with ``--slow-last-after``, the last run
waits for FILE to exist, then takes 5 times as long a task (a regression
that the team's history must mark). With ``--open-cluster`` the cluster and
client are made at the top and never closed, as many scripts do: the process
ends as soon as its last block does (distributed closes them at exit).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import time

import dask_observe

#: Longer than any test's machine takes on a loaded host, shorter than the
#: test's own timeout (pytest-timeout, 120 s).
STUCK_AFTER_S = 90


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("runs", type=int)
    parser.add_argument("seconds", type=float)
    parser.add_argument("--slow-last-after", default=None)
    parser.add_argument("--done", default=None, help="a file made when all ended")
    parser.add_argument("--open-cluster", action="store_true")
    args = parser.parse_args()
    # A machine stuck (CI once: the second of a test's two, its stderr never
    # seen, as the test's own timeout came first) prints every thread's stack
    # and exits: the test then shows where it stood.
    faulthandler.dump_traceback_later(STUCK_AFTER_S, exit=True)
    from distributed import Client, LocalCluster

    # No dashboard: nothing here looks at it, and importing it (bokeh) was a
    # third of this process's start.
    cluster = LocalCluster(
        n_workers=2, threads_per_worker=2, processes=False, dashboard_address=None
    )
    client = Client(cluster)
    for i in range(args.runs):
        seconds = args.seconds
        if args.slow_last_after and i == args.runs - 1:
            while not os.path.exists(args.slow_last_after):
                time.sleep(0.05)
            seconds *= 5
        with dask_observe.record(args.name, client=client):
            client.gather(client.map(nap, [seconds] * 8, pure=False))
    if args.open_cluster:
        return
    client.close()
    cluster.close()
    if args.done:
        open(args.done, "w").close()


if __name__ == "__main__":
    main()

"""What redaction costs: the rules alone, and a recorded log flood with them.

    .venv/bin/python benchmarks/redaction.py --lines 1000000 --rounds 4

1. The rules alone: ``Redactor.records`` over ``--lines`` pulled log records
   like distributed's (one in a hundred holding a ``password=``), against the
   same records passed through with ``observe.redact.enabled: false``; the
   median of 5 passes each, alternating.
2. A recorded flood: a LocalCluster of 2 worker processes, 40 tasks each logging
   ``--flood`` lines, recorded with redaction on and off, alternating from round
   to round (``--rounds``): the recorded block's wall time and the lines stored
   per second of it.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
import warnings

LINES = (
    "Worker tcp://127.0.0.1:{i} exceeded 95% memory budget. Restarting...",
    "Event loop was unresponsive in Worker for {i}.02s. This is often caused by "
    "long-running GIL-holding functions or moving large chunks of data.",
    "Compute Failed Key: ('inc-9f2c{i}', 3) Function: inc args: (3,)",
    "Starting worker compute stream, tcp://127.0.0.1:{i}",
    "processed row {i} of the partition, 100 % done",
)


def records(n: int) -> list[tuple[int, object]]:
    from dask_observe.capture.wire import LogRecord

    out: list[tuple[int, object]] = []
    for i in range(n):
        message = (
            f"connecting with password=hunter{i}"
            if i % 100 == 0
            else LINES[i % len(LINES)].format(i=i)
        )
        out.append(
            (i, LogRecord("log", 1.0, 30, "worker", "tcp://w:1", "user", message))
        )
    return out


def rules_alone(n: int) -> None:
    from dask_observe.redact import Redactor

    batch = records(n)
    on, off = Redactor(), Redactor(enabled=False)
    times: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(5):
        for name, redactor in (("on", on), ("off", off)):
            start = time.perf_counter()
            redactor.records(batch)
            times[name].append(time.perf_counter() - start)
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(
            f"rules alone, redaction {name}: {median:.3f} s for {n:,} records "
            f"({n / median:,.0f}/s, {median / n * 1e6:.2f} us a record)"
        )


def chatty(i: int, lines: int) -> int:
    log = logging.getLogger("user.flood")
    for j in range(lines):
        log.warning("task %d line %d: processed row, 100 %% done", i, j)
    return i


def flood(lines: int, rounds: int) -> None:
    import dask
    from distributed import Client, LocalCluster

    import dask_observe

    warnings.simplefilter("ignore")
    results: dict[str, list[tuple[float, int]]] = {"on": [], "off": []}
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None)
    with cluster, Client(cluster) as client:
        for r in range(rounds):
            order = ("on", "off") if r % 2 == 0 else ("off", "on")
            for name in order:
                with dask.config.set({"observe.redact.enabled": name == "on"}):
                    start = time.perf_counter()
                    with dask_observe.record(f"flood {name}", client=client) as run:
                        client.gather(client.map(chatty, range(40), lines=lines))
                    wall = time.perf_counter() - start
                stored = len(run.logs(contains="processed row"))
                results[name].append((wall, stored))
                print(f"round {r} redaction {name}: {wall:.2f} s, {stored:,} lines")
    for name, runs in results.items():
        median_wall = statistics.median(w for w, _ in runs)
        median_lines = statistics.median(s for _, s in runs)
        print(
            f"flood, redaction {name}: median {median_wall:.2f} s, "
            f"{median_lines / median_wall:,.0f} lines stored/s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--flood", type=int, default=2_500)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    rules_alone(args.lines)
    flood(args.flood, args.rounds)


if __name__ == "__main__":
    main()

"""What capturing tasks' prints costs: a print-heavy task, with and without.

    .venv/bin/python benchmarks/print_cost.py --lines 200000 --rounds 5

1. The tee alone: ``--lines`` prints to a stream that discards them, in a
   thread that runs a task (as distributed marks one), with the capture's tee
   on ``sys.stdout`` against without; the median of ``--rounds`` passes,
   alternating. The lines go to a sink that keeps them, as a worker's buffer.
2. A recorded print-heavy task: a LocalCluster of one worker process, a task
   printing ``--lines // 10`` lines, recorded with ``observe.capture.output``
   on and off, and a task logging as many lines (``log.warning``) recorded,
   taking turns: the task's own duration (from the store).
3. What compiled code writes: a task writing as many lines straight to fd 1
   (``os.write``, as a C library's ``fprintf`` does), recorded with output
   capture on (the pipes of ``capture.fdout``) and off, in the same turns.
   The workers' fds 1 and 2 go to /dev/null throughout.
4. Many tasks (``--tasks``, 10,000): each printing 10 lines, unrecorded
   against recorded; and each printing nothing, recorded with output
   capture on against off (what its hooks cost a task that says nothing: a
   look at each task's start). A fresh LocalCluster of two worker
   processes each turn, the turns rotated from round to round: wall time
   of the whole map, and the bytes the store keeps a line (the log table
   and its index, SQLite's dbstat, over the lines stored).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distributed import Client


def tee_pass(lines: int, tee: bool) -> float:
    from distributed.utils import set_thread_state

    from dask_observe.capture.output import Lines, OutputCapture

    kept: list[object] = []
    real = sys.stdout
    sys.stdout = io.StringIO()
    capture = OutputCapture(Lines(kept.append, lambda task: True))
    if tee:
        capture.install()
    try:
        started = time.perf_counter()
        # A task of a thousand lines at a time: a task keeps at most
        # TASK_LINES, and the rest would cost less than what is kept.
        for task in range(0, lines, 1000):
            with set_thread_state(key=("print-task", task)):
                for i in range(task, min(task + 1000, lines)):
                    print("processing row", i, "of the partition")
        took = time.perf_counter() - started
    finally:
        if tee:
            capture.uninstall()
        sys.stdout = real
    assert len(kept) == (lines if tee else 0)
    return took


def printer(n: int) -> int:
    for i in range(n):
        print("processing row", i, "of the partition")
    return n


def logger(n: int) -> int:
    import logging

    log = logging.getLogger("user.rows")
    for i in range(n):
        log.warning("processing row %d of the partition", i)
    return n


def native(n: int) -> int:
    import os

    for i in range(n):
        os.write(1, b"processing row %d of the partition\n" % i)
    return n


def private_store() -> str:
    """A store's path in a folder of its own, owner-only (as stores must be)."""
    import tempfile

    folder = tempfile.mkdtemp()
    os.chmod(folder, 0o700)
    return f"{folder}/observe.sqlite"


@contextmanager
def cluster_of(workers: int, *, output: bool) -> Iterator[Client]:
    """A client of a fresh LocalCluster of ``workers`` single-thread worker
    processes, recorded with output capture on or off."""
    import dask.config
    from distributed import Client, LocalCluster

    with (
        dask.config.set({"observe.capture.output": output}),
        LocalCluster(
            n_workers=workers, threads_per_worker=1, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def recorded(n: int, rounds: int) -> dict[str, list[float]]:

    import dask_observe

    turns = ("on", "off", "logged", "native on", "native off")
    took: dict[str, list[float]] = {turn: [] for turn in turns}
    tasks = {"logged": logger, "native on": native, "native off": native}
    store = private_store()
    for i in range(rounds):
        for turn in turns[i % 5 :] + turns[: i % 5]:
            with (
                cluster_of(1, output="off" not in turn) as client,
                dask_observe.record("prints", client=client, store=store) as run,
            ):
                task = tasks.get(turn, printer)
                client.submit(task, n, pure=False).result()
            took[turn].append(float(run.tasks()["duration_s"].iloc[0]))
    return took


def say_ten(i: int) -> int:
    for j in range(10):
        print("partition", i, "row", j, "processed")
    return i


def silent(i: int) -> int:
    return i


def many(n: int, rounds: int) -> tuple[dict[str, list[float]], float]:
    """Seconds of each turn's ``n`` tasks, and the store's bytes a line."""
    import sqlite3
    from contextlib import AbstractContextManager, nullcontext

    import dask_observe

    turns = ("printing", "printing, recorded", "silent, output on", "silent, off")
    took: dict[str, list[float]] = {turn: [] for turn in turns}
    store = private_store()
    for i in range(rounds):
        for turn in turns[i % 4 :] + turns[: i % 4]:
            task = silent if turn.startswith("silent") else say_ten
            with cluster_of(2, output="off" not in turn) as client:
                client.gather(client.map(task, range(200), pure=False))  # warm
                block: AbstractContextManager[object] = (
                    nullcontext()
                    if turn == "printing"
                    else dask_observe.record(turn, client=client, store=store)
                )
                started = time.perf_counter()
                with block:
                    client.gather(client.map(task, range(n), pure=False))
                took[turn].append(time.perf_counter() - started)
    with sqlite3.connect(store) as db:
        (size,) = db.execute(
            "SELECT SUM(pgsize) FROM dbstat WHERE name IN ('logs', 'logs_time')"
        ).fetchone()
        (lines,) = db.execute("SELECT COUNT(*) FROM logs").fetchone()
    return took, size / max(lines, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=10_000)
    args = parser.parse_args()
    passes: dict[bool, list[float]] = {True: [], False: []}
    for i in range(args.rounds):
        for tee in (i % 2 == 0, i % 2 != 0):
            passes[tee].append(tee_pass(args.lines, tee))
    on, off = (statistics.median(passes[t]) for t in (True, False))
    print(
        f"tee alone, {args.lines:,} prints: {off * 1e6 / args.lines:.2f} us a print "
        f"without, {on * 1e6 / args.lines:.2f} us with ({on / off:.2f}x)"
    )
    n = args.lines // 10
    sys.stdout.flush()
    kept = [os.dup(1), os.dup(2)]
    quiet = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):  # the workers inherit them: their lines go nowhere
        os.dup2(quiet, fd)
    try:
        took = recorded(n, args.rounds)
        busy, per_line = many(args.tasks, args.rounds)
    finally:
        for fd, saved in zip((1, 2), kept, strict=True):
            os.dup2(saved, fd)
    on, off, logged = (statistics.median(took[t]) for t in ("on", "off", "logged"))
    print(
        f"recorded task printing {n:,} lines: {off:.3f} s with output capture off, "
        f"{on:.3f} s on ({on / off:.2f}x; {(on - off) * 1e6 / n:.2f} us a line); "
        f"the same lines logged (log.warning), recorded: {logged:.3f} s"
    )
    on, off = (statistics.median(took[t]) for t in ("native on", "native off"))
    print(
        f"recorded task writing {n:,} lines to fd 1: {off:.3f} s with output "
        f"capture off, {on:.3f} s on ({on / off:.2f}x; "
        f"{(on - off) * 1e6 / n:.2f} us a line)"
    )
    median = {turn: statistics.median(values) for turn, values in busy.items()}

    def ratio(turn: str, against: str) -> str:
        """The median of the rounds' ratios, and their range."""
        pairs = zip(busy[turn], busy[against], strict=True)
        ratios = [a / b for a, b in pairs]
        low, high = min(ratios), max(ratios)
        return f"x{statistics.median(ratios):.3f}, rounds {low:.3f}-{high:.3f}"

    print(
        f"{args.tasks:,} tasks printing 10 lines each: {median['printing']:.2f} s "
        f"unrecorded, {median['printing, recorded']:.2f} s recorded ("
        f"{ratio('printing, recorded', 'printing')}); the store keeps "
        f"{per_line:.0f} bytes a line"
    )
    print(
        f"{args.tasks:,} tasks printing nothing, recorded: output capture on "
        f"{median['silent, output on']:.2f} s, off {median['silent, off']:.2f} s "
        f"({ratio('silent, output on', 'silent, off')})"
    )


if __name__ == "__main__":
    main()

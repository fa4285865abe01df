"""What the event loop's watchdog costs while the loop ticks on time.

    .venv/bin/python benchmarks/watchdog.py [--threads 24] [--tasks 4]

A worker process holds a few dozen threads (its executor's, distributed's,
the capture's); the watchdog beside its loop wakes every ``WATCH_S`` and
reads each thread's CPU time; where the loop is held, also where the loop
and each running task are (their stacks). This times both wakes alone, with
``--threads`` idle threads of which ``--tasks`` count as running tasks, and
says what the usual one is of a core.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

from dask_observe.capture.stalls import WATCH_S, RunQueueWait, StallWatch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=24)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--wakes", type=int, default=5000)
    args = parser.parse_args()
    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait) for _ in range(args.threads)]
    for thread in threads:
        thread.start()
    tasks = {t.ident or 0: f"task-{i}" for i, t in enumerate(threads[: args.tasks])}
    watch = StallWatch(0.1, tasks=lambda: tasks)
    watch.stop()  # its own thread out of the way: the wakes are timed here
    # A wake while the loop ticks on time (CPU read, no stack walked) and one
    # while it is held (the loop's and the tasks' stacks walked), in turns.
    wakes: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(5):
        for walk in (False, True):
            began = time.perf_counter()
            for _ in range(args.wakes):
                watch.watchdog._look(starved=False, stalled=False, walk=walk)
            wakes[walk].append((time.perf_counter() - began) / args.wakes)
    stop.set()
    free, held = (statistics.median(wakes[w]) for w in (False, True))
    print(
        f"a wake while the loop ticks on time: {free * 1e6:.1f} us, while it is "
        f"held: {held * 1e6:.1f} us ({len(sys._current_frames())} threads, "
        f"{args.tasks} running tasks; medians of 5 rounds); one every "
        f"{WATCH_S:g} s on time: {free / WATCH_S * 100:.3f} % of a core"
    )
    # The loop's tick itself, with and without reading how long its thread
    # waited for a core (the kernel's run queue), in turns.
    # (Its own was closed by stop(): a fresh one, of this thread, the tick's.)
    read, unread = RunQueueWait(), RunQueueWait()
    unread.close()
    took: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(10):
        for name, queue in (("with", read), ("without", unread)):
            watch._queue = queue
            began = time.perf_counter()
            for _ in range(args.wakes):
                watch.last = time.monotonic() - watch.interval_s
                watch.tick(time.time())
            took[name].append((time.perf_counter() - began) / args.wakes)
    with_, without = (statistics.median(took[n]) for n in ("with", "without"))
    print(
        f"a tick on time: {with_ * 1e6:.2f} us with the run-queue reading, "
        f"{without * 1e6:.2f} us without (medians of 10 rounds)"
    )


if __name__ == "__main__":
    main()

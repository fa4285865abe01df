"""What the capture's garbage-collection clock costs a process that allocates a
lot: the same allocation-heavy loop timed without and with the ``gc`` callback
installed (``capture.stalls.FullCollections``), rounds alternating in one
process, so that both sides share the machine's drift.

    .venv/bin/python benchmarks/gc_clock.py --rounds 10

The callback runs at the start and the end of every collection, young ones
included (it returns at once for those): the loop below triggers about 2,600
young collections a round. The capture never removes it (it stays for the
process); this script does, between rounds, to time the same loop without it.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

from dask_observe.capture.stalls import FullCollections


def allocate(lists: int) -> float:
    """Seconds to build and drop ``lists`` one-item lists, twenty times over:
    every list is a tracked container, so young collections come often."""
    started = time.perf_counter()
    for _ in range(20):
        made = [[i] for i in range(lists)]
        del made
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--lists", type=int, default=100_000)
    args = parser.parse_args()
    before = gc.get_stats()[0]["collections"]
    allocate(args.lists)  # warm up
    young = gc.get_stats()[0]["collections"] - before
    without: list[float] = []
    with_clock: list[float] = []
    for round_ in range(args.rounds):
        # Alternate which side goes first.
        order = (False, True) if round_ % 2 == 0 else (True, False)
        for installed in order:
            if installed:
                FullCollections.install()
            elif FullCollections._on_collection in gc.callbacks:
                gc.callbacks.remove(FullCollections._on_collection)
                FullCollections._installed = False
            took = allocate(args.lists)
            (with_clock if installed else without).append(took)
    ratios = [w / o for w, o in zip(with_clock, without, strict=True)]
    print(f"young collections a round: {young}")
    print(f"without: median {statistics.median(without) * 1e3:.1f} ms")
    print(f"with:    median {statistics.median(with_clock) * 1e3:.1f} ms")
    print(
        f"ratio with/without: median {statistics.median(ratios):.3f} "
        f"(rounds {min(ratios):.3f}-{max(ratios):.3f})"
    )


if __name__ == "__main__":
    main()

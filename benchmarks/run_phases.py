"""Where a recorded block's fixed cost goes, piece by piece (issue 36, item 5).

    .venv/bin/python benchmarks/run_phases.py --blocks 60

One process, a LocalCluster of 2 worker processes (the notebook's case), one
warm recorded block, then ``--blocks`` one-task blocks, each recorded with
``record()`` as a user writes it (the default store, opened by each block)
and followed by the same block unrecorded. The pieces of the recorded block
are timed by wrapping the functions that do them (``perf_counter``, no
profiler): what comes before the run's start (the store opened, mostly), the
start, and its stop with its parts
(the end's round trip to the cluster, the last pull and its write, the run's
row closed and its end thread started). Prints their medians.

``fixed_cost.py`` passes one store to every block, so its "a run adds" leaves
out the store's opening; this one does not.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

#: Idle time before each block, as between a notebook's cells (see
#: ``fixed_cost.PAUSE_S``).
PAUSE_S = 0.05


def timed(owner: type, name: str, label: str, spent: dict[str, list[float]]) -> None:
    """Wrap ``owner.name`` so that each call's time in the main thread (the
    block's: the recorder's thread pulls too) is kept under ``label``."""
    function: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            if threading.current_thread() is threading.main_thread():
                spent.setdefault(label, []).append(time.perf_counter() - started)

    setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", type=int, default=60)
    args = parser.parse_args()
    os.environ["DASK_OBSERVE__STORE"] = os.path.join(
        tempfile.mkdtemp(), "observe.sqlite"
    )
    from distributed import Client, LocalCluster

    import dask_observe
    from dask_observe.recording import lifecycle, recorder

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0")
    client = Client(cluster)
    client.submit(abs, -1).result()
    with dask_observe.record("warm", client=client):  # the plugins are shipped
        client.submit(abs, -2, pure=False).result()

    spent: dict[str, list[float]] = {}
    timed(lifecycle.Recording, "start", "the run's start", spent)
    timed(lifecycle.Recording, "stop", "the run's stop", spent)
    timed(recorder.Recorder, "end_run", "  the end's round trip", spent)
    timed(recorder.Recorder, "pull", "  the last pull and its write", spent)
    timed(lifecycle.Recording, "_end", "  the row closed, the end thread", spent)
    opened: list[float] = []
    spent["before its start (the store opened)"] = opened
    recorded, plain = [], []
    for i in range(args.blocks):
        time.sleep(PAUSE_S)
        started = time.perf_counter()
        with dask_observe.record("tiny", client=client):
            opened.append(time.perf_counter() - started)  # up to the block
            client.submit(abs, -i, pure=False).result()
        recorded.append(time.perf_counter() - started)
        time.sleep(PAUSE_S)
        started = time.perf_counter()
        client.submit(abs, -i - 10_000, pure=False).result()
        plain.append(time.perf_counter() - started)
    client.close()
    cluster.close()
    # What came before the start was timed up to the block's first line: the
    # start is inside it, so take it out.
    opened[:] = [o - s for o, s in zip(opened, spent["the run's start"], strict=True)]

    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1e3:.2f} ms"

    print(
        f"a recorded one-task block {ms(recorded)}, plain {ms(plain)}: "
        f"{(statistics.median(recorded) - statistics.median(plain)) * 1e3:.2f} ms "
        f"added ({args.blocks} blocks, medians)"
    )
    for label in (
        "before its start (the store opened)",
        "the run's start",
        "the run's stop",
        "  the end's round trip",
        "  the last pull and its write",
        "  the row closed, the end thread",
    ):
        print(f"{label}: {ms(spent[label])}")


if __name__ == "__main__":
    main()

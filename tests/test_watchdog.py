"""The watchdog beside each captured event loop (``capture.stalls``): what it
tells of a stall, and that it leaves with its capture."""

from __future__ import annotations

import gc
import threading
import time

from dask_observe.capture.stalls import StallWatch

from .conftest import wait_until
from .tasks import validate_lines


def watchdogs() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "dask-observe-loop-watchdog"]


def test_the_watchdog_leaves_with_its_watch_stopped_or_dropped() -> None:
    before = len(watchdogs())
    stopped = StallWatch(0.1)
    dropped = StallWatch(0.1)
    assert len(watchdogs()) == before + 2
    stopped.stop()
    # A capture dropped without stop() (a worker closed past its teardown)
    # is not kept alive by its watchdog, which then ends.
    del dropped
    gc.collect()
    wait_until(lambda: len(watchdogs()) == before, "both watchdogs gone", 5)


def test_a_task_holding_the_gil_is_named_with_its_key_and_where_it_was() -> None:
    """This thread as an event loop ticking every 0.1 s, a task's thread
    running a regular expression that holds the GIL in C: each stall the
    tick finds says which thread held it; where the task was seen running
    (between its two lines, when the GIL changed hands), its key and where
    it was (validate_lines, by construction). One seen only once it ended
    is its thread alone (a run's task rows then name its task)."""
    running: dict[int, str] = {}

    def task() -> None:
        running[threading.get_ident()] = "validate-7"
        try:
            validate_lines(24, lines=2)  # 0.65 s a line on a quiet machine
        finally:
            running.clear()

    watch = StallWatch(0.1, tasks=lambda: running)
    try:
        # As a worker's watch, set up before its tasks: the watchdog's first
        # look, which the CPU of the next ones is measured from.
        time.sleep(0.3)
        thread = threading.Thread(target=task)
        thread.start()
        assert thread.ident is not None
        stalls = []
        while thread.is_alive():
            time.sleep(0.1)
            if (stall := watch.tick(time.time())) is not None:
                stalls.append(stall)
    finally:
        watch.stop()
    held = [s["held"] for s in stalls if "held" in s]
    assert held, stalls
    assert {(h["thread"], h["ident"]) for h in held} == {("task", thread.ident)}
    for seen in (h for h in held if h["key"] is not None):
        assert seen["key"] == "validate-7"
        assert seen["frames"][-1][2] == "validate_lines", seen
        assert "pattern.match(" in seen["frames"][-1][3], seen
    assert all(h["frames"] == [] for h in held if h["key"] is None), held

"""The watchdog beside each captured event loop (``capture.stalls``) leaves
with its capture. What it tells of a stall is judged on a real worker
(test_flags: a task's regular expression holding the GIL) and as written
telemetry (test_diagnose)."""

from __future__ import annotations

import gc
import threading

from dask_observe.capture.stalls import StallWatch

from .conftest import wait_until


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

"""The ``timing`` tests two at a time, but none beside one marked ``alone``.

The ``timing`` tests judge what they measure against the machine's load
(stalls, GIL contention, a regression from timings), so they do not run
beside the rest of the suite (``scripts/test.sh``). Most of them leave a core
idle (they wait on naps, heartbeats, samplers): two at a time, each sees the
other's cluster as load it tolerates, as the flags are built to (five runs of
the whole group two at a time passed, 2026-11-29). Those marked ``alone``
load the machine on purpose (processes spinning, a flood of lines, threads
fighting for the GIL), or judge what one more busy process would change (an
example's GIL contention read 0.3-0.75 from pass to pass, alone): they wait
until no other timing test runs, and none starts beside them.

A readers-writer lock between the run's test processes (pytest-xdist), with
two ``flock`` files in the run's temporary folder: ordinary timing tests hold
``room`` shared, an ``alone`` one holds it exclusively; ``turnstile`` lets an
``alone`` test that waits keep new ones from entering, so it is not starved.
Outside pytest-xdist nothing runs beside a test, and nothing is locked.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _timing_tests_take_turns(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    node = request.node
    if "PYTEST_XDIST_WORKER" not in os.environ or not node.get_closest_marker("timing"):
        yield
        return
    # A worker's basetemp is popen-gwN in the folder of its run, not another's.
    folder = tmp_path_factory.getbasetemp().parent
    alone = node.get_closest_marker("alone") is not None
    with (
        open(folder / "timing-turnstile", "a") as turnstile,
        open(folder / "timing-room", "a") as room,
    ):
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)

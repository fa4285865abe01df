"""Whether a worker reads the scheduler's clock, so that its records need no
moving onto it.

A worker puts its times on the scheduler's clock by an estimate of how far
behind it is (distributed's ``scheduler_delay``, half a heartbeat's round trip
of jitter). Where both read one clock, the estimate is only that jitter: on a
loaded host it moved an in-process worker's lines 0.3 s into the past, before
the run they were written in, and the run read none of its 2,000 lines (a CI
run of tests/test_retention.py). Two processes of one booted Linux kernel read
one realtime clock, whatever containers they are in: they share the kernel's
boot id, unless one fakes its time (libfaketime, as a test of a worker 7 s
ahead does): so the scheduler's reading must also fall between the worker's
asking and its answer (``reads_same_clock``). Elsewhere only one process is
known to read its own clock.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

_BOOT_ID = "/proc/sys/kernel/random/boot_id"

#: The scheduler's handler that says which clock it reads.
CLOCK_HANDLER = "dask_observe_clock"


def clock_identity() -> str:
    """Equal for two processes exactly when they read one realtime clock (as
    far as can be told: different where it cannot)."""
    try:
        with open(_BOOT_ID) as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    if boot:
        return f"boot {boot}"
    return f"process {socket.gethostname()} {os.getpid()}"


def clock_reading() -> dict[str, Any]:
    """What the scheduler answers a worker that asks (``CLOCK_HANDLER``)."""
    return {"clock": clock_identity(), "time": time.time()}


def reads_same_clock(asked: float, theirs: Any, answered: float) -> bool:
    """Whether the scheduler whose ``clock_reading`` is ``theirs``, asked at
    ``asked`` and answered at ``answered`` (this process's clock), reads this
    process's clock: one kernel's, its time read in between."""
    if not isinstance(theirs, dict) or theirs.get("clock") != clock_identity():
        return False
    at = theirs.get("time")
    return isinstance(at, int | float) and offset_from(asked, theirs, answered) == 0


def offset_from(asked: float, theirs: Any, answered: float) -> float:
    """Seconds to add to this process's times to put them on the clock of a
    scheduler whose ``clock_reading`` is ``theirs``, asked at ``asked`` and
    answered at ``answered``: none where its reading fell in between (one
    clock, or two closer than the round trip can tell), else the reading
    less the round trip's midpoint (good to half the round trip)."""
    if not isinstance(theirs, dict):
        return 0.0
    at = theirs.get("time")
    if not isinstance(at, (int, float)) or asked <= at <= answered:
        return 0.0
    return float(at) - (asked + answered) / 2

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


def offset_within(readings: list[tuple[float, Any, float]]) -> float:
    """The offset (as ``offset_from``) that each of several readings of one
    scheduler allows, each ``(asked, theirs, answered)``: the scheduler read
    its clock between the asking and the answer, so each bounds the offset
    to ``[time - answered, time - asked]``; the middle of where all bounds
    meet is good to half the narrowest round trip. A hello's round trip
    (20-100 ms) is too wide for a run's window to hold its tasks; a bare
    reading takes about a millisecond, less than a task's end takes to reach
    the client."""
    low, high = -float("inf"), float("inf")
    for asked, theirs, answered in readings:
        at = theirs.get("time") if isinstance(theirs, dict) else None
        if not isinstance(at, (int, float)):
            continue
        low, high = max(low, at - answered), min(high, at - asked)
    if low > high:  # a clock stepped between readings: the narrowest says
        asked, theirs, answered = min(readings, key=lambda r: r[2] - r[0])
        return offset_from(asked, theirs, answered)
    if low <= 0 <= high or low == -float("inf"):
        return 0.0  # one clock, or two closer than the readings tell
    return (low + high) / 2

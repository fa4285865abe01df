"""Whether the host a process runs on had more runnable threads than cores.

A worker whose event loop stalls, or whose threads wait for the GIL, may be
held up by its own tasks or by a host too busy to run it: on a loaded 2-core
machine, flags blamed the user's code ("use processes") for what other
processes did. Each capturing process samples its host once a second and
ships the samples of a host under pressure, so that the flags can tell the two
apart. A quiet host costs no row.
"""

from __future__ import annotations

import os
import time
from typing import Any

#: Seconds between two samples of the host (one per process, whatever the
#: number of workers in it: they share the host).
INTERVAL_S = 1.0
#: A sample is shipped when runnable threads waited for a core at least this
#: share of the time since the one before (or, without pressure stall
#: information, when more threads were runnable than the host has cores).
SHIP_WAITING = 0.2
#: A run's end ships the samplers' seconds since their last sample (its
#: tail) if at least this long: a second is stamped at its end, and a run's
#: last second had none; the tasks that waited for data then on a busy host
#: were judged as on a quiet one (0.64 s of 3.01 s, moving 320 MiB beside
#: four spinning processes on two cores, was told "keep related data
#: together"). Shorter, it is left to the next sample.
TAIL_S = 0.1

_PSI = "/proc/pressure/cpu"
_STAT = "/proc/stat"


def _psi_waited_us() -> int | None:
    """Microseconds during which some runnable thread of the host waited for a
    core (Linux's pressure stall information, "some"), or None without it."""
    try:
        with open(_PSI) as f:
            first = f.readline()  # some avg10=... avg60=... avg300=... total=N
    except OSError:
        return None
    for part in first.split():
        if part.startswith("total="):
            return int(part[6:])
    return None


def _runnable() -> int | None:
    """Threads of the host runnable now (Linux), this one not counted."""
    try:
        with open(_STAT) as f:
            for line in f:
                if line.startswith("procs_running "):
                    return max(0, int(line.split()[1]) - 1)
    except (OSError, ValueError):
        return None
    return None


class HostSampler:
    """The host's CPU pressure since the previous sample, read at most every
    ``INTERVAL_S``: ``{"waiting", "runnable", "cores", "seconds"}``, where
    ``waiting`` is the share of those ``seconds`` during which some runnable
    thread waited for a core (None where the kernel does not say), and
    ``runnable`` the threads runnable at the sample."""

    def __init__(self) -> None:
        self.cores = os.cpu_count() or 1
        self.at = time.monotonic()
        self.waited = _psi_waited_us()

    def sample(self, at_least: float = INTERVAL_S) -> dict[str, Any] | None:
        """The sample due now, if ``at_least`` seconds (a second) have passed
        since the last; None before."""
        now = time.monotonic()
        seconds = now - self.at
        if seconds < at_least:
            return None
        waited = _psi_waited_us()
        waiting = None
        if waited is not None and self.waited is not None:
            waiting = round(min(1.0, (waited - self.waited) / 1e6 / seconds), 3)
        self.at, self.waited = now, waited
        return {
            "waiting": waiting,
            "runnable": _runnable(),
            "cores": self.cores,
            "seconds": round(seconds, 3),
        }

    def pressured(self, at_least: float = INTERVAL_S) -> dict[str, Any] | None:
        """The sample due now if it shows the host under pressure (worth a
        row); ``at_least``: see :meth:`sample` (``TAIL_S`` at a run's end)."""
        found = self.sample(at_least)
        if found is None:
            return None
        waiting, runnable = found["waiting"], found["runnable"]
        if waiting is not None:
            return found if waiting >= SHIP_WAITING else None
        return found if runnable is not None and runnable > self.cores else None


#: Where a window of the host's pressure began: the stall counter, and when.
Mark = tuple[int | None, float]


def mark() -> Mark:
    """The start of a window over which :func:`since_mark` measures."""
    return _psi_waited_us(), time.monotonic()


def since_mark(start: Mark) -> dict[str, Any]:
    """The host's pressure over the window since ``start``, shaped as a
    sample (``waiting`` None without pressure stall information). A run's
    own window: the once-a-second samples are stamped at each second's end,
    so a run shorter than a second often had none, and a busy host went
    unseen by its comparisons."""
    waited_before, at = start
    seconds = max(time.monotonic() - at, 1e-6)
    waited = _psi_waited_us()
    waiting = None
    if waited is not None and waited_before is not None:
        waiting = round(min(1.0, (waited - waited_before) / 1e6 / seconds), 3)
    return {
        "waiting": waiting,
        "runnable": _runnable(),
        "cores": os.cpu_count() or 1,
        "seconds": round(seconds, 3),
    }


_workers_host: HostSampler | None = None


def workers_host_pressure(at_least: float = INTERVAL_S) -> dict[str, Any] | None:
    """This process's sample of its host for its workers, when one is due and
    shows pressure: the workers of one process share one sampler (and so one
    row a second however many there are; the flags match samples by host).
    ``at_least``: see :meth:`HostSampler.sample`."""
    global _workers_host
    if _workers_host is None:
        _workers_host = HostSampler()
    return _workers_host.pressured(at_least)

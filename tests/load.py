"""A host made busy on purpose: processes spinning outside any cluster."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any


def spin(seconds: float) -> None:
    """Pure Python: holds the GIL but for the interpreter's switches.

    Here, in a module that imports next to nothing: a worker imports the
    module of a task's function on its event loop to run it, and importing a
    test module (pandas, dask.dataframe: over 1 s of CPU) stalled the loop
    past the flag's tick before the threads began (seen on CI, where that
    stall then blamed the code on a host busy by design)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@contextlib.contextmanager
def burners(n: int) -> Iterator[None]:
    """``n`` processes spinning on the CPU meanwhile, killed on the way out."""
    spinning = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)
    ]
    try:
        yield
    finally:
        for process in spinning:
            process.kill()
            process.wait()


#: Linux's pressure stall information for the CPU: its "some" line's total
#: is the microseconds during which at least one runnable thread waited for
#: a core.
PSI = "/proc/pressure/cpu"
#: A host second the flags call oversubscribed had threads waiting for a core
#: half of it or more (``observe.flags.host-load.waiting``): a flag that
#: blames the host claims at least this much waiting.
BUSY_SECOND_WAIT_S = 0.5


def waited_for_cores() -> float | None:
    """Seconds during which some runnable thread of this host waited for a
    core, since it booted, as the kernel counts them; None where it does
    not."""
    try:
        with open(PSI) as pressure:
            some = pressure.readline()
    except OSError:
        return None
    total = some.rsplit("total=", 1)[-1]
    return int(total) / 1e6 if total.strip().isdigit() else None


class Pressure:
    """How long some thread waited for a core while a ``with`` block ran, as
    the kernel counted it: the independent truth a flag that blames a busy
    host is checked against."""

    def __init__(self) -> None:
        self.start = waited_for_cores()
        self.end: float | None = None

    def __enter__(self) -> Pressure:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end = waited_for_cores()

    @property
    def waited_s(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return self.end - self.start


def kinds_not_the_hosts(flags: Any, pressure: Pressure) -> list[str]:
    """The kinds of ``flags`` (a run's ``flags()``) but those that name a busy
    host as the cause (the host's advice), each such flag first checked
    against the kernel: it saw threads wait for a core, during ``pressure``'s
    block, at least as long as an oversubscribed second takes. Where the
    kernel does not count, they stay (no host claim goes unchecked).

    A host busy with other work (the suite's other tests, on CI's two cores)
    stretches a worker's event loop past the flag's tick: a workload whose
    truth is "nothing to flag" is then rightly told about its host, and a
    test of that workload asks only that nothing blame its code."""
    from dask_observe.diagnose.host import HOST_ADVICE

    hosts = (flags["advice"] == HOST_ADVICE).to_numpy()
    waited = pressure.waited_s
    if not hosts.any() or waited is None:
        return sorted(flags["kind"])
    assert waited >= BUSY_SECOND_WAIT_S, (
        f"a flag blames a busy host, but the kernel counted {waited:.2f} s of "
        f"threads waiting for a core meanwhile: {flags[hosts]['message'].tolist()}"
    )
    return sorted(flags["kind"][~hosts])

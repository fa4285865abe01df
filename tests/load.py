"""A host made busy on purpose: processes spinning outside any cluster."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator


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

"""A host made busy on purpose: processes spinning outside any cluster."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator


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

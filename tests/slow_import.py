"""A module slow to import, as one that imports a large library is: a worker
imports it on its event loop when it unpickles the first task whose function
lives here. Slow only where ``SLOW_IMPORT_S`` says (the test's workers), not in
the test process that pickles the function."""

from __future__ import annotations

import os
import time

time.sleep(float(os.environ.get("SLOW_IMPORT_S", "0")))


def work(x: int) -> int:
    return x + 1

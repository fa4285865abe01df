"""Task functions of recorded runs, in a module that imports next to nothing.

A worker imports the module of a task's function on its event loop before it
runs it: a test module's imports (dask_observe, pandas, pytest) stalled a
fresh worker's loop past event-loop-blocked's tick at the lowest versions
pyproject.toml claims, and the run was flagged, rightly, for what it imported
(see ``load.spin``)."""

from __future__ import annotations

import logging


def chatter(n: int) -> int:
    """Log ``n`` lines with markup in them (never to be rendered as HTML)."""
    log = logging.getLogger("user.chatter")
    for i in range(n):
        log.warning("line %05d <script>alert(%d)</script>", i, i)
    return n


def fail(x: int) -> int:
    raise RuntimeError(f"broken {x}")

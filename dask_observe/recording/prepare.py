"""Readying a process for its first recorded run ahead of it: ``%load_ext
dask_observe`` has :func:`prepare` run after the cell that imports
distributed (at once if it is imported already), so that the first
``%%dask_record`` cell pays for its cluster's plugins and not for this
process's own warm-up.

A first recorded block imported ~20 modules of ours, built the capture
bundle (its sources compressed, 6 ms) and, for a LocalCluster, imported that
bundle into this very process: its scheduler runs here, and so do its
nannies (and its workers, without processes). Done beforehand, these took
~30 ms off the first block (``benchmarks/fixed_cost.py --load-ext``), and
the process's work up to that block's end stayed the same: moved, not
removed.
"""

from __future__ import annotations

import importlib

#: The modules a run's start and end import (the run's end thread aside: it
#: imports its own, ``ending.END_IMPORTS``, before its client may close):
#: ``tests/test_magics.py`` checks that a first recorded block after
#: :func:`prepare` imports none of ours.
FIRST_RUN_IMPORTS = (
    "dask_observe.analysis.figures",
    "dask_observe.analysis.trees",
    "dask_observe.archive",
    "dask_observe.capture.logs",
    "dask_observe.capture.settings",
    "dask_observe.export.live",
    "dask_observe.recording.environment",
    "dask_observe.recording.plugins",
    "dask_observe.store.retention",
    "dask_observe.store.slices",
)

#: The bundle's modules: each role's plugin, as a cluster process builds it.
ROLES = ("scheduler", "worker", "nanny")


def prepare() -> None:
    """Import what a first recorded run imports, and the capture bundle as a
    cluster in this process would (its name is the hash of its source: a
    LocalCluster's scheduler then finds it imported)."""
    from dask_observe import redact
    from dask_observe.recording.bundle import import_bundle, local_bundle

    for name in FIRST_RUN_IMPORTS:
        importlib.import_module(name)
    shipped = local_bundle()
    package = import_bundle(shipped.package, shipped.files)
    for role in ROLES:
        importlib.import_module(f"{package.__name__}.{role}")
    redact.configured()  # its expressions compiled

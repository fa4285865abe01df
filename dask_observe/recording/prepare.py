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
import logging
import threading

from dask_observe import redact
from dask_observe.recording.bundle import import_bundle, local_bundle
from dask_observe.recording.finish import END_IMPORTS

logger = logging.getLogger(__name__)

#: The modules a run's start and end import (the run's end thread aside: it
#: imports its own, ``finish.END_IMPORTS``, before its client may close):
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

#: What a recorded cell's end and report import beyond its start: what its
#: end judges with (``finish.END_IMPORTS``: pandas, whose import alone, ~0.3 s,
#: was most of a first recorded one-task cell: 366 ms against 9 ms
#: unrecorded) and the report's drawing. Imported by a thread of its own once
#: the extension is ready (:func:`warm_up`): between a notebook's cells, not
#: in its first recorded one.
WARM_IMPORTS = (
    "dask_observe.report",
    "dask_observe.report.render",
    # What pandas imports on a frame's first to_dict (the report's rows).
    "pandas.core.methods.to_dict",
)

#: The thread that imports them.
WARM_UP_THREAD = "dask-observe-warm-up"

#: The bundle's modules: each role's plugin, as a cluster process builds it.
ROLES = ("scheduler", "worker", "nanny")


def prepare() -> None:
    """Import what a first recorded run imports, and the capture bundle as a
    cluster in this process would (its name is the hash of its source: a
    LocalCluster's scheduler then finds it imported)."""
    for name in FIRST_RUN_IMPORTS:
        importlib.import_module(name)
    shipped = local_bundle()
    package = import_bundle(shipped.package, shipped.files)
    for role in ROLES:
        importlib.import_module(f"{package.__name__}.{role}")
    redact.configured()  # its expressions compiled


def warm_up() -> threading.Thread:
    """Import ``finish.END_IMPORTS`` and ``WARM_IMPORTS`` by a thread of its
    own (a daemon: a process that exits meanwhile does not wait for it)."""

    def imports() -> None:
        for name in (*END_IMPORTS, *WARM_IMPORTS):
            try:
                importlib.import_module(name)
            except Exception as e:  # the first run's end imports it, or says
                logger.debug("dask-observe: cannot import %s ahead: %s", name, e)

    thread = threading.Thread(target=imports, name=WARM_UP_THREAD, daemon=True)
    thread.start()
    return thread

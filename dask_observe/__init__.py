"""dask-observe: make Dask clusters observable from the notebook.

The import is cheap on purpose: the Jupyter server imports this package to find its
extension and must not need ``dask``; the recorder imports distributed lazily.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from dask_observe import config  # noqa: F401  (registers observe.* defaults)
from dask_observe.analysis.compare import compare as _compare
from dask_observe.api import Run, Store, open_store
from dask_observe.api.archive import open_archive as _open_archive
from dask_observe.store import RunNotFound, StoreError

try:
    from dask_observe._version import __version__
except ImportError:  # a source tree that was never built
    __version__ = "0+unknown"

if TYPE_CHECKING:
    from distributed import Client
    from IPython.core.interactiveshell import InteractiveShell

    from dask_observe.api.archive import Archive
    from dask_observe.report.comparison import ShownComparison

__all__ = [
    "Run",
    "RunNotFound",
    "Store",
    "StoreError",
    "__version__",
    "compare",
    "open_archive",
    "open_store",
    "record",
]


def open_archive(
    url: str | None = None, *, storage_options: dict[str, Any] | None = None
) -> Archive:
    """The runs published to the archive at ``url`` (an fsspec URL; default
    ``observe.archive``), from any machine: ``runs()`` (with host and user),
    ``run(id)``, ``history(name)``; ``compare(a, b, store=archive)``.
    See :mod:`dask_observe.archive`."""
    return _open_archive(url, storage_options=storage_options)


def record(
    name: str = "run",
    client: Client | None = None,
    store: Store | str | os.PathLike[str] | None = None,
    *,
    native: bool | None = None,
) -> AbstractContextManager[Run]:
    """Record a block as one run: ``with dask_observe.record("etl") as run: ...``.

    See :func:`dask_observe.recording.block.record`.
    """
    from dask_observe.recording.block import record as _record

    return _record(name, client=client, store=store, native=native)


def compare(
    a: Run | int | str,
    b: Run | int | str,
    *,
    threshold: float | None = None,
    store: Store | Archive | None = None,
) -> ShownComparison:
    """Compare run ``b`` against run ``a``: headline figures and per-prefix times
    side by side with ratios ``b / a``, regressions and improvements marked.

    See :func:`dask_observe.analysis.compare.compare`.
    """
    from dask_observe.report.comparison import displayable

    if store is None and not (isinstance(a, Run) and isinstance(b, Run)):
        store = open_store(create=False)
    return displayable(_compare(a, b, threshold=threshold, store=store))


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """``%load_ext dask_observe``: register ``%%dask_record`` and ``%dask_observe``."""
    from dask_observe.notebook.magics import load

    load(ipython)


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    """``%unload_ext dask_observe``: remove the magics again."""
    from dask_observe.notebook.magics import unload

    unload(ipython)


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "dask_observe.server"}]

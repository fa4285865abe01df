"""The durable store: one SQLite file in WAL mode, one writer, many readers.

The store package is the only one that speaks SQL (its SQL text is built in
:mod:`dask_observe.store.queries`). Kernels, the Jupyter server and the CLI all
open the same file; rows are plain dicts here and DataFrames at the public API.
The store's concerns each have a module: opening the file and its connection
(:mod:`.connection`), runs (:mod:`.runs`), clusters and telemetry
(:mod:`.clusters`); :class:`BaseStore` is all of them.
"""

from __future__ import annotations

from dask_observe.store.clusters import Telemetry
from dask_observe.store.rundata import RunData
from dask_observe.store.runs import Runs


class BaseStore(Runs, Telemetry):
    """A dask-observe store at ``path``: what every part of dask-observe reads
    and the recorder writes. The public ``dask_observe.Store`` adds the
    analysis (flags, reports) to it.

    Opened as :class:`~dask_observe.store.connection.StoreConnection` says
    (``path``, ``create``, ``readonly``).
    """

    def run(self, run: int | str = "last") -> RunData:
        """The run with this id, or the newest one for ``"last"``."""
        return RunData(self, self.run_record(run))

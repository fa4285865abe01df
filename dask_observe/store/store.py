"""The durable store: one SQLite file in WAL mode, one writer, many readers.

The store package is the only one that speaks SQL (its SQL text is built in
:mod:`dask_observe.store.queries`). Kernels, the Jupyter server and the CLI all
open the same file; rows are plain dicts here and DataFrames at the public API.
The store's concerns each have a module: opening the file and its connection
(:mod:`.connection`), runs (:mod:`.runs`), and the parts a store has: its
clusters and telemetry (:mod:`.clusters`), what is kept of its runs
(:mod:`.kept`) and which were published (:mod:`.archive_marks`).
"""

from __future__ import annotations

from dask_observe.store.archive_marks import ArchiveMarks
from dask_observe.store.clusters import Telemetry
from dask_observe.store.kept import Kept
from dask_observe.store.rundata import RunData
from dask_observe.store.runs import Runs


class BaseStore(Runs):
    """A dask-observe store at ``path``: its runs, and as parts its clusters'
    ``telemetry``, what is ``kept`` of its runs and its ``archive_marks``;
    what every part of dask-observe reads and the recorder writes. The
    public ``dask_observe.Store`` adds the analysis (flags, reports) to it.

    Opened as :class:`~dask_observe.store.connection.StoreConnection` says
    (``path``, ``create``, ``readonly``).
    """

    # Each part is made as it is asked for: one kept would hold its store in a
    # cycle, and a dropped store's connection would stay open until the cyclic
    # collector ran (its finalizer closes it once the store is unreferenced).
    @property
    def telemetry(self) -> Telemetry:
        return Telemetry(self)

    @property
    def kept(self) -> Kept:
        return Kept(self)

    @property
    def archive_marks(self) -> ArchiveMarks:
        return ArchiveMarks(self)

    def run(self, run: int | str = "last") -> RunData:
        """The run with this id, or the newest one for ``"last"``."""
        return RunData(self, self.run_record(run))

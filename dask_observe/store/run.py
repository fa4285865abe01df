"""A recorded run, as read back from the store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dask_observe.store.store import Store

#: The columns of ``Store.runs()`` and the keys of ``Run.summary()``.
RUN_COLUMNS = (
    "id",
    "name",
    "status",
    "started",
    "ended",
    "duration_s",
    "n_tasks",
    "n_failed",
    "n_flags",
    "cluster",
)


class Run:
    """One recorded run: a cell, a ``record()`` block, or a headless recording.

    Obtain it with ``store.run(id)`` or ``store.run("last")``.
    """

    def __init__(self, store: Store, record: dict[str, Any]) -> None:
        self.store = store
        self._record = record

    @property
    def id(self) -> int:
        return int(self._record["id"])

    @property
    def name(self) -> str:
        return str(self._record["name"])

    @property
    def status(self) -> str:
        """One of ``running``, ``finished``, ``failed``, ``interrupted``."""
        return str(self._record["status"])

    def refresh(self) -> Run:
        """Re-read this run from the store (its status may have changed)."""
        self._record = self.store.run_record(self.id)
        return self

    def summary(self) -> dict[str, Any]:
        """The headline figures of the run."""
        return {key: self._record[key] for key in RUN_COLUMNS}

    def __repr__(self) -> str:
        return f"<dask_observe.Run {self.id} {self.name!r} {self.status}>"

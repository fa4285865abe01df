"""Which of a store's runs were published to which archive, under which id,
and which publishing was begun and not done (see ``archive.publish``)."""

from __future__ import annotations

import time

from dask_observe.store.connection import StoreConnection


class ArchiveMarks:
    """A store's marks of published runs (``BaseStore.archive_marks``)."""

    def __init__(self, db: StoreConnection) -> None:
        self._db = db

    def claim_uid(self, run_id: int, archive: str, candidate: str) -> str:
        """The run's id in ``archive``: the one chosen at its first try, else
        ``candidate`` (kept from now on, so that a retry writes where the
        first try began)."""
        with self._db._transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO published (run_id, archive, uid)"
                " VALUES (?, ?, ?)",
                (run_id, archive, candidate),
            )
            (uid,) = conn.execute(
                "SELECT uid FROM published WHERE run_id = ? AND archive = ?",
                (run_id, archive),
            ).fetchone()
        return str(uid)

    def set_published(self, run_id: int, archive: str) -> None:
        """``run_id`` is in ``archive`` whole (its manifest written)."""
        with self._db._transaction() as conn:
            conn.execute(
                "UPDATE published SET published = ? WHERE run_id = ? AND archive = ?",
                (time.time(), run_id, archive),
            )

    def unpublished(self, archive: str) -> list[int]:
        """Runs whose publishing to ``archive`` was begun and not done, oldest
        first (a failed try, a process that exited meanwhile)."""
        rows = self._db._query(
            "SELECT run_id FROM published WHERE archive = ? AND published IS NULL"
            " ORDER BY run_id",
            (archive,),
        )
        return [int(row["run_id"]) for row in rows]

"""What is worked out once from a run and kept for its readers: the flags
judged at its end (its judgement), what a report shows of its tasks, what a
history reads of it, and the verdicts of the comparisons a history's first
runs get. Each is kept with the version of dask-observe that made it: another
version works it out again."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from dask_observe.store.connection import StoreConnection


def _json_scalar(value: Any) -> Any:
    """JSON for numpy's scalars (a flag's evidence may hold them); text for
    anything else JSON cannot say (a judgement is kept, whatever a rule put in)."""
    return value.item() if hasattr(value, "item") else str(value)


class Kept:
    """A store's kept figures (``BaseStore.kept``)."""

    def __init__(self, db: StoreConnection) -> None:
        self._db = db

    def set_judgement(
        self,
        run_id: int,
        flags: Sequence[dict[str, Any]],
        version: str,
        *,
        lost: int = 0,
    ) -> None:
        """The flags a finished run raised (JSON-able dicts), judged by that
        version of dask-observe; their count, and the workers the run ``lost``
        by them, go in the run's row, for listings."""
        with self._db._transaction() as conn:
            conn.execute(
                "UPDATE runs SET n_flags = ?, n_lost = ? WHERE id = ?",
                (len(flags), lost, run_id),
            )
            # (The table's name is older than "verdict" meaning only a
            # change's mark; renaming it needs a migration of every store.)
            conn.execute(
                "INSERT OR REPLACE INTO verdicts (run_id, version, flags)"
                " VALUES (?, ?, ?)",
                (run_id, version, json.dumps(list(flags), default=_json_scalar)),
            )

    def judgement(self, run_id: int) -> tuple[str, list[dict[str, Any]]] | None:
        """The version that judged a run and the flags it raised (see
        :meth:`set_judgement`); None for a run never judged at its end."""
        rows = self._db._query(
            "SELECT version, flags FROM verdicts WHERE run_id = ?", (run_id,)
        )
        return (rows[0]["version"], json.loads(rows[0]["flags"])) if rows else None

    def set_task_figures(self, run_id: int, version: str, figures: str) -> None:
        """What a report shows of a finished run's tasks (JSON, see
        ``report.tasks``), computed by that version of dask-observe."""
        with self._db._transaction(bulk=True) as conn:
            conn.execute(
                "INSERT OR REPLACE INTO task_figures (run_id, version, figures)"
                " VALUES (?, ?, ?)",
                (run_id, version, figures),
            )

    def task_figures(self, run_id: int) -> tuple[str, dict[str, Any]] | None:
        """The version that computed a run's task figures and the figures (see
        :meth:`set_task_figures`); None for a run without them."""
        rows = self._db._query(
            "SELECT version, figures FROM task_figures WHERE run_id = ?", (run_id,)
        )
        return (rows[0]["version"], json.loads(rows[0]["figures"])) if rows else None

    def set_history_figures(
        self, figures: Sequence[tuple[int, dict[str, float], float | None]]
    ) -> None:
        """What a history reads of runs, worked out once: (run id, each
        prefix's mean compute seconds a task, peak memory or None) each."""
        with self._db._transaction() as conn:
            conn.executemany(
                "UPDATE runs SET pace = ?, peak_memory = ? WHERE id = ?",
                [(json.dumps(pace), peak, run_id) for run_id, pace, peak in figures],
            )

    def kept_comparisons(self, version: str) -> dict[tuple[int, int, float], str]:
        """The wall-time verdicts of runs compared, as that version made them:
        ``(earlier id, later id, threshold): verdict`` (see
        ``analysis.history.Comparisons``)."""
        rows = self._db._query(
            "SELECT earlier, later, threshold, wall FROM comparisons WHERE version = ?",
            (version,),
        )
        return {(r["earlier"], r["later"], r["threshold"]): r["wall"] for r in rows}

    def keep_comparisons(
        self, made: Mapping[tuple[int, int, float], str], version: str
    ) -> None:
        """Keep comparisons' verdicts made by ``version`` (see above)."""
        with self._db._transaction() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO comparisons VALUES (?, ?, ?, ?, ?)",
                [(a, b, floor, version, wall) for (a, b, floor), wall in made.items()],
            )

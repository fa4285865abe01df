"""Diagnosis: what went wrong in a run, why, and what to do about it.

Flags are computed from the recorded telemetry by the same rules for a live run
(over what has been recorded so far) and a finished one. A run's end judges it
once and stores that judgement (``store.kept``), which readers then show as
it is; a run without one (recorded by an older version, or whose process died)
is judged when read. A run is judged under the settings recorded with it
(``Run.settings``), so every reader raises the same flags.

The rules live one module a family (memory, workers, runtime, work, hangs), each
registered under the kind it raises (``base.rule``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from dask_observe import config
from dask_observe.diagnose import (  # noqa: F401 (registers)
    hangs,
    memory,
    runtime,
    work,
    workers,
)
from dask_observe.diagnose.base import RULES, SEVERITIES, Context, Flag, workers_lost

if TYPE_CHECKING:
    import pandas as pd

    from dask_observe.store import BaseStore, RunData

logger = logging.getLogger(__name__)

#: The columns of ``run.flags()``.
FLAG_COLUMNS = ("time", "kind", "severity", "worker", "message", "evidence", "advice")

#: The rules' families, in the order their kinds are listed.
FAMILIES = ("memory", "workers", "runtime", "work", "hangs")

#: Every kind of flag, as the rules register them.
FLAG_KINDS = tuple(
    r.kind for r in sorted(RULES, key=lambda r: FAMILIES.index(r.family))
)

__all__ = [
    "FLAG_COLUMNS",
    "FLAG_KINDS",
    "SEVERITIES",
    "Flag",
    "flag_list",
    "flags_frame",
    "judged_flags",
    "stored_judged_flags",
    "workers_lost",
]


def stored_judged_flags(source: BaseStore, run_id: int) -> list[dict[str, Any]] | None:
    """The flags a run raised as judged at its end (dicts of ``Flag``'s
    fields), if this version judged them (another's rules may differ). Reads
    JSON only: no pandas, no judging."""
    stored = source.kept.judgement(run_id)
    if stored is None or stored[0] != config.version():
        return None
    return stored[1]


def judged_flags(run: RunData) -> list[Flag]:
    """The flags of an ended run: those judged at its end, if this version
    judged them, else judged now (a run whose process died before it was
    judged, or one judged by another version)."""
    stored = stored_judged_flags(run.store, run.id)
    if stored is None:
        return flag_list(run)
    return [Flag(**flag) for flag in stored]


def flag_list(run: RunData, tasks: pd.DataFrame | None = None) -> list[Flag]:
    """Every flag the run raises, in time order; ``tasks``: its
    ``run.tasks(epoch=True)`` where read already.

    A rule that fails (on telemetry it did not expect) is logged and skipped: the
    other flags, and the report that shows them, still appear.
    """
    context = Context(run, tasks)
    flags = []
    for found in RULES:
        try:
            flags += found.judge(context)
        except Exception:
            logger.exception(
                "dask-observe: the %s rule failed on run %s", found.kind, run.id
            )
    return sorted(flags, key=lambda f: (f.time, f.kind))


def flags_frame(flags: list[Flag]) -> pd.DataFrame:
    """``run.flags()``: the flags as a DataFrame with the columns of
    FLAG_COLUMNS. ``evidence`` holds a list of ``{"time", "worker", "text"}``
    dicts: the log lines or metric values the flag rests on."""
    import pandas as pd

    rows = [
        (f.time, f.kind, f.severity, f.worker, f.message, f.evidence, f.advice)
        for f in flags
    ]
    frame = pd.DataFrame(rows, columns=list(FLAG_COLUMNS))
    frame["time"] = pd.to_datetime(frame["time"], unit="s", utc=True)
    return frame

"""The order in which a run's flags are told: the answer first. A report
listed them in time order, so a memory-death run showed four near-identical
``memory-restart`` cards and two ``memory-pressure`` ones before the
``killed-worker`` card that says what happened to the user's task. Now the
flags that say what the user lost come first, their causes after, then the
rest; cards that say the same of different workers (their messages alike but
for addresses and numbers) are folded into one that counts them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from dask_observe.diagnose.base import Flag

#: Kinds in the order they answer "what happened": what the user lost or
#: waits on, then what killed it, then what slowed it, then the rest.
LEAD = (
    "killed-worker", "task-errors", "hung-task", "no-progress", "worker-lost",
    "memory-restart", "memory-pressure", "unmanaged-memory", "spilling",
    "large-graph", "event-loop-blocked", "gil-contention", "tiny-tasks",
    "load-imbalance", "high-transfer", "version-mismatch", "clock-offset",
)  # fmt: skip
_SEVERITY = {"error": 0, "warning": 1, "info": 2}
#: Most evidence lines a folded card keeps.
MAX_FOLDED_EVIDENCE = 20
_VARYING = re.compile(r"[a-z]+://[^\s,;:)]+(?::\d+)?|\d+(?:[.,]\d+)*")


def _shape(flag: Flag) -> str:
    """A flag's message with addresses and numbers taken out."""
    return _VARYING.sub("#", flag.message)


def _rank(flag: Flag) -> tuple[int, int, float]:
    kind = LEAD.index(flag.kind) if flag.kind in LEAD else len(LEAD)
    return (_SEVERITY.get(flag.severity, 3), kind, flag.time)


def lead(flags: Sequence[Flag]) -> list[Flag]:
    """``flags`` ordered by what they answer (most severe, then ``LEAD``,
    then time), those of one kind that say the same of different workers or
    times folded into the first, which says how many there were and keeps
    their evidence."""
    folded: dict[tuple[str, str, str], list[Flag]] = {}
    for flag in sorted(flags, key=_rank):
        folded.setdefault((flag.kind, flag.severity, _shape(flag)), []).append(flag)
    told = []
    for same in folded.values():
        first = same[0]
        if len(same) > 1:
            workers = sorted(
                {w for f in same if f.worker for w in f.worker.split(", ")}
            )
            first = replace(
                first,
                message=f"{first.message} ({len(same)} like it"
                + (f", on {len(workers)} workers" if len(workers) > 1 else "")
                + ")",
                worker=", ".join(workers) or None,
                evidence=[e for f in same for e in f.evidence][:MAX_FOLDED_EVIDENCE],
            )
        told.append(first)
    return told

"""What a run's status line says: its status and, for a run that finished,
whether it lost anything on the way (tasks that failed, workers that died).
One word for every surface (the panel's badge, the command line, the demo,
a history, the report): a run whose worker was killed for memory read green
"finished" everywhere."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The outcome of a finished run that lost tasks or workers.
LOSSY = "finished with losses"


def outcome(record: Mapping[Any, Any]) -> str:
    """``record``'s status, or ``LOSSY`` for a finished run that lost tasks
    (``n_failed``) or workers (``n_lost``)."""
    if record.get("status") == "finished" and losses(record):
        return LOSSY
    return str(record.get("status"))


def losses(record: Mapping[Any, Any]) -> str:
    """What a run lost, said ("1 task failed, 2 workers died"; "" none)."""
    failed, lost = int(record.get("n_failed") or 0), int(record.get("n_lost") or 0)
    parts = []
    if failed:
        parts.append(f"{failed:,} task{'' if failed == 1 else 's'} failed")
    if lost:
        parts.append(f"{lost} worker{'' if lost == 1 else 's'} died")
    return ", ".join(parts)


def status_line(record: Mapping[Any, Any]) -> str:
    """The outcome with what was lost: "finished with losses (1 task failed,
    1 worker died)", "failed", "finished"."""
    lost = losses(record)
    said = outcome(record)
    return f"{said} ({lost})" if lost and said == LOSSY else said


def tasks_text(record: Mapping[Any, Any]) -> str:
    """Its tasks, and how many failed where its status line does not say so
    already: "6 tasks, 1 failed" beside "failed", "6 tasks" beside "finished
    with losses (1 task failed)"; and how many still ran as it ended ("1
    task, 1 still running at its end")."""
    n_tasks, failed = int(record.get("n_tasks") or 0), int(record.get("n_failed") or 0)
    said = f"{n_tasks:,} task{'' if n_tasks == 1 else 's'}"
    if failed and outcome(record) != LOSSY:
        said += f", {failed:,} failed"
    running = int(record.get("n_running") or 0)
    if running:  # a hang stopped by a timeout: its task is not "0 tasks"
        said += f", {running:,} still running at its end"
    return said

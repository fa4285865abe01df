"""Where a run stands when it stops moving, described on the scheduler.

The scheduler plugin counts the tasks of each watched run that finish; when
that count has not moved for ``no-progress.after`` (or ``factor`` times the
typical duration of the tasks processing, if longer) while work remains, it
records a ``stall`` event: what each worker runs and for how long, which
workers are paused and with how much memory, what waits with no worker able to
run it and what it asks for. A run that ends while tasks still run records the
same picture as ``run-stopped``. The words are the rules' (``diagnose.hangs``);
this only observes, in kilobytes (bounded lists), never O(tasks).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from distributed import Scheduler

#: Workers described at most (the busiest first), tasks listed per worker, and
#: tasks listed of those no worker can run.
MAX_WORKERS = 20
MAX_TASKS = 5


class ProgressWatch:
    """When each watched run last finished a task, and when to describe it."""

    def __init__(self, after_s: float, factor: float) -> None:
        self.after_s = after_s
        self.factor = factor
        #: span -> [tasks ended, since when (or since idle), stall described at].
        self._runs: dict[str, list[Any]] = {}

    def watch(self, span_id: str) -> None:
        self._runs.setdefault(span_id, [0, time.time(), None])

    def unwatch(self, span_id: str) -> None:
        self._runs.pop(span_id, None)

    def since(self, span_id: str) -> float | None:
        """When the run last finished a task (or last had nothing to do)."""
        found = self._runs.get(span_id)
        return None if found is None else float(found[1])

    def stalled_for(self, span_id: str, ended: int, now: float, idle: bool) -> float:
        """Seconds the run has not moved: ``ended`` tasks of it have ended so
        far; ``idle``, the cluster has no work (a block busy on the client is
        not stalled). 0 when it just moved."""
        run = self._runs.setdefault(span_id, [ended, now, None])
        if ended != run[0] or idle:
            run[:] = [ended, now, None]
        return now - float(run[1])

    def due(self, span_id: str, now: float, pace: float) -> bool:
        """Whether to describe the stalled run now: past the bar (``pace``, the
        typical duration of what it runs, scales it), and again each time the
        stall has doubled since it was last described."""
        run = self._runs[span_id]
        since, described = float(run[1]), run[2]
        stalled = now - since
        if stalled < max(self.after_s, self.factor * pace):
            return False
        if described is not None and stalled < 2 * (described - since):
            return False
        run[2] = now
        return True


def work_remains(scheduler: Scheduler) -> bool:
    """Tasks processing, queued, or waiting for a worker that can run them."""
    return bool(
        scheduler.queued
        or scheduler.unrunnable
        or any(ws.processing for ws in scheduler.workers.values())
    )


def pace(scheduler: Scheduler) -> float:
    """The longest typical duration (seconds) among the prefixes of the tasks
    processing now; 0 when none is known. O(workers + tasks processing)."""
    longest = 0.0
    for ws in scheduler.workers.values():
        for ts in ws.processing:
            longest = max(longest, ts.prefix.duration_average)
    return longest


def _task(ts: Any, elapsed: float | None = None) -> dict[str, Any]:
    typical = ts.prefix.duration_average
    return {
        "key": str(ts.key),
        "prefix": ts.prefix.name,
        "elapsed": elapsed,
        "typical": typical if typical > 0 else None,
    }


def describe(
    scheduler: Scheduler,
    span_id: str,
    since: float,
    let_go: Mapping[str, list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """The cluster as the run sees it now: bounded, JSON-able. ``let_go``:
    by worker, tasks the scheduler no longer holds that the worker still
    runs (``letgo.still_running``), listed with its own."""
    now = time.time()
    described = []
    let_go = let_go or {}
    busiest = sorted(
        scheduler.workers.values(),
        key=lambda ws: -len(ws.processing) - len(let_go.get(ws.address, ())),
    )
    for ws in busiest[:MAX_WORKERS]:
        # The worker said how long each task had run at its last heartbeat; it
        # runs still, so add the time since. Without it a process paused
        # between heartbeats (a native dump, a loaded host) reads a task
        # stuck for seconds as just begun.
        late = max(0.0, now - float(getattr(ws, "last_seen", now) or now))
        executing = {
            ts: float(d) + late for ts, d in getattr(ws, "executing", {}).items()
        }
        longest = sorted(ws.processing, key=lambda ts: -executing.get(ts, -1.0))
        described.append(
            {
                "worker": ws.address,
                "status": getattr(ws.status, "name", str(ws.status)),
                "nthreads": ws.nthreads,
                "resources": dict(ws.resources),
                "managed": ws.memory.managed,
                "unmanaged": ws.memory.unmanaged,
                "spilled": ws.memory.spilled,
                "limit": ws.memory_limit or 0,
                "n_processing": len(ws.processing),
                "n_executing": len(executing),
                "processing": [
                    *(_task(ts, executing.get(ts)) for ts in longest[:MAX_TASKS]),
                    *let_go.get(ws.address, ()),
                ][:MAX_TASKS],
            }
        )
    unrunnable = list(scheduler.unrunnable)
    return {
        "span": span_id,
        "since": since,
        "stalled_s": now - since,
        "n_workers": len(scheduler.workers),
        "n_threads": sum(ws.nthreads for ws in scheduler.workers.values()),
        "n_queued": len(scheduler.queued),
        "workers": described,
        "n_unrunnable": len(unrunnable),
        "unrunnable": [
            {
                **_task(ts),
                "resources": dict(ts.resource_restrictions or {}),
                "workers": sorted(map(str, ts.worker_restrictions or ())),
                "hosts": sorted(map(str, ts.host_restrictions or ())),
            }
            for ts in unrunnable[:MAX_TASKS]
        ],
    }

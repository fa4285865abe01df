"""What happened to each worker of a run, as the rules of the memory and
workers families read it: its memory limit, pauses for memory, restarts
(its own, the cluster's), removals, and why it died."""

from __future__ import annotations

import re
import signal
from functools import cached_property

from dask_observe.capture.events import (
    MemoryRestart,
    SchedulerAction,
    WorkerAdded,
    WorkerRemoved,
)
from dask_observe.diagnose.base import Facts
from dask_observe.units import format_bytes, text_or_none


class WorkerLives(Facts):
    """Each worker's life in the run, found once for every rule."""

    @cached_property
    def limits(self) -> dict[str, float]:
        """Each worker's memory limit: its last sample, else what the scheduler
        said as it joined (a worker that joined and died between two samples,
        a second apart, had none: seen on CI, a task eating memory at once)."""
        ctx = self.ctx
        found = {
            str(w): limit
            for _, _, w, d in ctx.events("worker-added")
            if (limit := WorkerAdded.from_data(d).memory_limit) is not None
        }
        found.update((w, float(v)) for _, w, _, v in ctx.metric_rows("memory_limit"))
        return found

    @cached_property
    def removals(self) -> list[tuple[float, str, str]]:
        """(time, worker, stimulus id) of the workers the scheduler removed."""
        return [
            (t, w, WorkerRemoved.from_data(d).stimulus_id)
            for t, _, worker, d in self.ctx.events("worker-removed")
            if (w := text_or_none(worker))
        ]

    @cached_property
    def restarts(self) -> list[tuple[float, float, frozenset[str] | None]]:
        """(from, until, workers) of each restart the recording saw: the whole
        cluster's (``client.restart()``: workers None) from the scheduler's
        ``cluster-restart``, and of some workers (``restart_workers``) from
        distributed's ``restart-workers`` event, logged once they restarted."""
        window = self.ctx.seconds("worker-lost.restart-window")
        found: list[tuple[float, float, frozenset[str] | None]] = []
        for t, kind, _, data in self.ctx.events():
            if kind == "cluster-restart":
                found.append((t, t + window, None))
            elif (action := SchedulerAction.from_data(data)) is not None and (
                action.action == "restart-workers"
            ):
                found.append((t - window, t, frozenset(action.workers)))
        return found

    def restarted(self, t: float, worker: str) -> bool:
        """Whether a worker removed at ``t`` left in a restart."""
        return any(
            begin <= t <= end and (named is None or worker in named)
            for begin, end, named in self.restarts
        )

    @cached_property
    def status_changes(self) -> list[tuple[float, str, str]]:
        """(time, worker, status) of each change of a worker's status that
        the scheduler logged (the event's kind is the worker)."""
        return [
            (t, kind, str(action.status))
            for t, kind, _, d in self.ctx.events()
            if (action := SchedulerAction.from_data(d)) is not None
            and action.action == "worker-status-change"
        ]

    @cached_property
    def pauses(self) -> list[tuple[float, str]]:
        """(time, worker) of each change of a worker's status to paused."""
        return [(t, w) for t, w, status in self.status_changes if status == "paused"]

    @cached_property
    def paused_spans(self) -> dict[str, list[tuple[float, float]]]:
        """Each worker's spans of time paused for memory, (from, until): from
        its "Pausing worker" line or its status change to paused (which the
        scheduler logs a moment later, and keeps when the line died with its
        worker), until its "Resuming worker" line or its status change back
        to running (``inf``: paused to the end of what was recorded)."""
        changes: dict[str, list[tuple[float, bool]]] = {}
        for said, paused in (("Pausing worker", True), ("Resuming worker", False)):
            for t, worker, _ in self.ctx.logs(said):
                if worker:
                    changes.setdefault(worker, []).append((t, paused))
        for t, worker, status in self.status_changes:
            if status in ("paused", "running"):
                changes.setdefault(worker, []).append((t, status == "paused"))
        spans: dict[str, list[tuple[float, float]]] = {}
        for worker, seen in changes.items():
            began: float | None = None
            for t, paused in sorted(seen):
                if paused and began is None:
                    began = t
                elif not paused and began is not None:
                    spans.setdefault(worker, []).append((began, t))
                    began = None
            if began is not None:
                spans.setdefault(worker, []).append((began, float("inf")))
        return spans

    @cached_property
    def memory_restarts(self) -> list[tuple[float, str, MemoryRestart]]:
        """(time, worker, what its nanny said) of each nanny memory restart."""
        return [
            (t, str(said.worker or text_or_none(w)), said)
            for t, _, w, d in self.ctx.events("worker-restart-memory")
            if (said := MemoryRestart.from_data(d)) is not None
        ]

    @cached_property
    def deaths(self) -> dict[str, tuple[float, str, str]]:
        """Why each dead worker died: worker -> (time, cause, evidence line).

        The first that applies: its nanny restarted it for memory, the nanny saw
        it killed by a signal or exit with a code, the scheduler stopped hearing
        its heartbeat, or its connection dropped. A worker that left when asked
        to (closed, retired, restarted) did not die.
        """
        causes: dict[str, tuple[float, str, str]] = {}
        for t, worker, event in self.memory_restarts:
            rss = event.rss
            limit = self.limits.get(worker)
            against = (
                f" (RSS {format_bytes(rss)} of a {format_bytes(limit)} limit)"
                if rss is not None and limit
                else ""
            )
            causes[worker] = (
                t,
                f"its nanny restarted it for exceeding "
                f"{self.ctx.fraction('terminate', worker):.0%} of its memory "
                f"limit{against}",
                f"worker-restart-memory {worker} rss={rss}",
            )
        for t, named, message in self.ctx.logs("Worker process "):
            if not named or named in causes or self.restarted(t, named):
                continue
            killed = re.search(r"was killed by signal (\d+)", message)
            exited = re.search(r"exited with status (\d+)", message)
            if killed:
                causes[named] = (t, f"it was killed by {_signal(killed[1])}", message)
            elif exited:
                causes[named] = (
                    t,
                    f"its process exited with code {exited[1]}",
                    message,
                )
        for t, worker, stimulus in self.removals:
            if worker in causes or _planned(stimulus) or self.restarted(t, worker):
                continue
            if stimulus.startswith("check-worker-ttl"):
                cause = "the scheduler stopped receiving its heartbeat"
            else:
                cause = "its connection to the scheduler was lost"
            causes[worker] = (t, cause, f"worker-removed {worker} ({stimulus})")
        return causes


def _signal(number: str) -> str:
    try:
        return f"signal {number} ({signal.Signals(int(number)).name})"
    except ValueError:
        return f"signal {number}"


def _planned(stimulus: str) -> bool:
    """A removal the cluster asked for: a worker closed or retired (scale
    down, adaptive), or restarted by a stimulus that says so."""
    return any(word in stimulus for word in ("close", "retire", "restart"))

"""What every rule stands on: the flag it raises, the run's telemetry as rules
read it (:class:`Context`), the settings it is judged under, and the registry.

Each rule is a function of a :class:`Context` that returns the flags it raises,
registered with :func:`rule` under its kind; the kinds are the registry's.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from dask_observe import config
from dask_observe.analysis.figures import fast_memory
from dask_observe.units import format_bytes, parse_bytes, parse_seconds, text_or_none

if TYPE_CHECKING:
    import pandas as pd

    from dask_observe.store import RunData
    from dask_observe.store.rundata import EventRow

#: Evidence a flag carries at most; the message counts the rest.
MAX_EVIDENCE = 10

#: Severities, mildest first.
SEVERITIES = ("info", "warning", "error")


@dataclass
class Flag:
    kind: str
    severity: str  # info | warning | error
    time: float
    worker: str | None
    message: str
    advice: str
    evidence: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Rule:
    kind: str
    #: The module it lives in: memory, workers, runtime, work.
    family: str
    judge: Callable[[Context], list[Flag]]


#: Every rule, in the order they were registered (FLAG_KINDS lists them by family).
RULES: list[Rule] = []


def rule(kind: str) -> Callable[[Callable[[Context], list[Flag]]], Callable[..., Any]]:
    """Register the decorated function as the rule that raises ``kind``."""

    def register(judge: Callable[[Context], list[Flag]]) -> Callable[..., Any]:
        if any(r.kind == kind for r in RULES):
            raise ValueError(f"two rules raise {kind!r}")
        family = judge.__module__.rsplit(".", 1)[-1]
        RULES.append(Rule(kind, family, judge))
        return judge

    return register


def evidence(time: float, worker: str | None, text: str) -> dict[str, Any]:
    return {"time": time, "worker": text_or_none(worker), "text": text}


#: The flags that say a worker died: restarted for memory, killed, lost.
LOSS_KINDS = frozenset({"memory-restart", "killed-worker", "worker-lost"})


def workers_lost(flags: Iterable[Flag]) -> int:
    """How many workers the flags of a run say died (each named once)."""
    named = {
        name.strip()
        for flag in flags
        if flag.kind in LOSS_KINDS and flag.worker
        for name in flag.worker.split(",")
    }
    return len(named)


def workers(names: Iterable[object]) -> str | None:
    # Rows without a worker hold None or NaN, depending on the column's dtype.
    unique = sorted({n for n in names if isinstance(n, str) and n})
    return ", ".join(unique) if unique else None


def _lookup(tree: Any, name: str) -> Any:
    for part in name.split("."):
        if not isinstance(tree, dict):
            return None
        tree = tree.get(part)
    return tree


class Context:
    """A run's telemetry as the rules read it (times in seconds since the
    epoch, each kind read once), and the settings it is judged under."""

    def __init__(self, run: RunData, tasks: pd.DataFrame | None = None) -> None:
        self.run = run
        self.settings = run.settings()
        #: What a rule derived that another reads too, by name (read once).
        self.derived: dict[str, Any] = {}
        self._metrics: dict[str, list[tuple[float, str, str, float]]] = {}
        if tasks is not None:  # read by the caller (a run's end): not again
            self.__dict__["tasks"] = tasks

    # -- settings -------------------------------------------------------------
    def setting(self, name: str) -> Any:
        """``observe.flags.<name>`` as recorded with the run; for a run that
        has none (recorded by an older dask-observe, or still running), as
        configured here (the shipped defaults, ``observe.yaml``, unless set)."""
        found = _lookup(self.settings.get("flags"), name)
        if found is None:
            found = config.get(f"flags.{name}")
        if found is None:
            raise KeyError(f"observe.flags.{name} is not set")
        return found

    def seconds(self, name: str) -> float:
        return parse_seconds(self.setting(name))

    def number(self, name: str) -> float:
        return float(self.setting(name))

    def nbytes(self, name: str) -> float:
        return parse_bytes(self.setting(name))

    def fraction(self, kind: str, worker: str | None = None) -> float:
        """A memory threshold (target, spill, pause, terminate) as a fraction
        of the memory limit: the worker's own, else the run's workers', else
        distributed's default (also where the worker had it disabled)."""
        own = (self.settings.get("memory_by_worker") or {}).get(worker or "")
        defaults = self.setting("memory-defaults")
        for source in (own, self.settings.get("memory"), defaults):
            value = (source or {}).get(kind)
            if isinstance(value, int | float) and not isinstance(value, bool):
                return float(value)
        return float(defaults[kind])

    # -- telemetry ------------------------------------------------------------
    @cached_property
    def tasks(self) -> pd.DataFrame:
        return self.run.tasks(epoch=True)

    @cached_property
    def finished(self) -> pd.DataFrame:
        tasks = self.tasks
        return tasks[tasks["status"] == "memory"]

    def logs(self, contains: str) -> list[tuple[float, str | None, str]]:
        """(time, worker, message) of the lines containing ``contains``."""
        return self.run.log_lines(contains)

    def fine_totals(
        self, activities: tuple[str, ...], *, exclude: tuple[str, ...] = ()
    ) -> dict[tuple[str, str], float]:
        """(activity, unit) -> value of the run's fine performance metrics,
        summed over contexts (but those in ``exclude``) and prefixes."""
        totals: dict[tuple[str, str], float] = {}
        for context, _, activity, unit, value in self.run.fine_rows():
            if activity in activities and context not in exclude:
                key = (activity, unit)
                totals[key] = totals.get(key, 0.0) + float(value)
        return totals

    def metric(self, name: str) -> pd.DataFrame:
        """Per-worker samples of one metric: time, worker, value."""
        return self.run.metric_frame(self.metric_rows(name), epoch=True)

    def metric_rows(self, name: str) -> list[tuple[float, str, str, float]]:
        """:meth:`metric` as plain (time, worker, name, value) rows, read once:
        a rule answers from them where it cannot raise a flag (most runs),
        and a DataFrame of a few rows costs a millisecond of pandas."""
        found: list[tuple[float, str, str, float]] | None = self._metrics.get(name)
        if found is None:
            rows = self.run.metric_rows(name)
            found = [(t, w, n, v) for t, w, n, v in rows if w is not None]
            self._metrics[name] = found
        return found

    def highest_by_worker(self, name: str) -> dict[str, float]:
        """The highest sample of metric ``name`` of each worker."""
        highest: dict[str, float] = {}
        for _, worker, _, value in self.metric_rows(name):
            if value > highest.get(worker, -float("inf")):
                highest[worker] = value
        return highest

    @cached_property
    def any_erred(self) -> bool:
        """Whether a task of the run failed."""
        return bool((self.tasks["status"] == "erred").any())

    @cached_property
    def _events(self) -> list[EventRow]:
        # All of the run's events in one read: most rules want a kind or two,
        # and a DataFrame a kind cost ~1 ms each.
        return self.run.event_rows()

    def events(self, kind: str | None = None) -> list[EventRow]:
        """(time, kind, worker or None, data) of the run's events of ``kind``
        (all with None), in the order they were stored."""
        if kind is None:
            return self._events
        return [row for row in self._events if row[1] == kind]

    @cached_property
    def fast_memory(self) -> pd.DataFrame:
        """Each worker's own fast RSS samples and its nanny's at restarts
        (``figures.fast_memory``), read once for every killed task."""
        return fast_memory(self.run)

    @cached_property
    def limits(self) -> dict[str, float]:
        """Each worker's memory limit: its last sample, else what the scheduler
        said as it joined (a worker that joined and died between two samples,
        a second apart, had none: seen on CI, a task eating memory at once)."""
        found = {
            str(w): float(d["memory_limit"])
            for _, _, w, d in self.events("worker-added")
            if isinstance(d, dict) and isinstance(d.get("memory_limit"), int | float)
        }
        found.update((w, float(v)) for _, w, _, v in self.metric_rows("memory_limit"))
        return found

    @cached_property
    def removals(self) -> list[tuple[float, str, str]]:
        """(time, worker, stimulus id) of the workers the scheduler removed."""
        return [
            (t, w, str(d.get("stimulus_id", "")))
            for t, _, worker, d in self.events("worker-removed")
            if (w := text_or_none(worker))
        ]

    @cached_property
    def restarts(self) -> list[tuple[float, float, frozenset[str] | None]]:
        """(from, until, workers) of each restart the recording saw: the whole
        cluster's (``client.restart()``: workers None) from the scheduler's
        ``cluster-restart``, and of some workers (``restart_workers``) from
        distributed's ``restart-workers`` event, logged once they restarted."""
        window = self.seconds("worker-lost.restart-window")
        found: list[tuple[float, float, frozenset[str] | None]] = []
        for t, kind, _, data in self.events():
            if kind == "cluster-restart":
                found.append((t, t + window, None))
            elif isinstance(data, dict) and data.get("action") == "restart-workers":
                named = frozenset(str(w) for w in data.get("workers") or ())
                found.append((t - window, t, named))
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
            (t, kind, str(d.get("status")))
            for t, kind, _, d in self.events()
            if isinstance(d, dict) and d.get("action") == "worker-status-change"
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
            for t, worker, _ in self.logs(said):
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
    def memory_restarts(self) -> list[tuple[float, str, dict[str, Any]]]:
        """(time, worker, event) of each nanny memory restart: pid and rss."""
        return [
            (t, str(d.get("worker") or text_or_none(w)), d)
            for t, _, w, d in self.events("worker-restart-memory")
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
            rss = event.get("rss")
            limit = self.limits.get(worker)
            against = (
                f" (RSS {format_bytes(rss)} of a {format_bytes(limit)} limit)"
                if isinstance(rss, int | float) and limit
                else ""
            )
            causes[worker] = (
                t,
                f"its nanny restarted it for exceeding "
                f"{self.fraction('terminate', worker):.0%} of its memory "
                f"limit{against}",
                f"worker-restart-memory {worker} rss={rss}",
            )
        for t, named, message in self.logs("Worker process "):
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

    @cached_property
    def duration(self) -> float:
        return float(self.run.window_end() - self.run.started)


def _signal(number: str) -> str:
    try:
        return f"signal {number} ({signal.Signals(int(number)).name})"
    except ValueError:
        return f"signal {number}"


def _planned(stimulus: str) -> bool:
    """A removal the cluster asked for: a worker closed or retired (scale
    down, adaptive), or restarted by a stimulus that says so."""
    return any(word in stimulus for word in ("close", "retire", "restart"))

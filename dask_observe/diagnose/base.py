"""What every rule stands on: the flag it raises, the run's telemetry as rules
read it (:class:`Context`), the settings it is judged under, and the registry.

Each rule is a function of a :class:`Context` that returns the flags it raises,
registered with :func:`rule` under its kind; the kinds are the registry's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Self

from dask_observe import config
from dask_observe.analysis.figures import fast_memory
from dask_observe.units import parse_bytes, parse_seconds, text_or_none

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


class Facts:
    """What rules find in a run's telemetry and share, a kind of facts a
    class of cached properties: ``Kind.of(ctx)`` finds them once a run."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    @classmethod
    def of(cls, ctx: Context) -> Self:
        found = ctx._facts.get(cls)
        if found is None:
            found = ctx._facts[cls] = cls(ctx)
        assert isinstance(found, cls)
        return found


class Context:
    """A run's telemetry as the rules read it (times in seconds since the
    epoch, each kind read once), and the settings it is judged under."""

    def __init__(self, run: RunData, tasks: pd.DataFrame | None = None) -> None:
        self.run = run
        self.settings = run.settings()
        self._facts: dict[type[Facts], Facts] = {}
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
    def duration(self) -> float:
        return float(self.run.window_end() - self.run.started)

"""Runs written straight into a real store, as a recorder would write them: the
telemetry a rule reads, made to measure, so that each rule can be judged at
the edges of its thresholds in milliseconds."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from dask_observe import Run, Store

CLUSTER = "tcp://10.0.0.1:8786"
SPAN = "span-synthetic"
A = "tcp://10.0.0.2:40001"
B = "tcp://10.0.0.3:40001"


class SyntheticRun:
    """One run being written. Times are seconds after the run's start."""

    def __init__(self, store: Store, name: str = "synthetic", span: str = SPAN) -> None:
        # Runs made one after the other overlap in time: a span of their own
        # keeps their tasks apart (metrics and events are the cluster's).
        self.store = store
        self.span = span
        self.id = store.create_run(name, cluster=CLUSTER, span_id=span)
        self.start = store.run(self.id).started
        self.records: list[tuple[Any, ...]] = []
        self.fine: list[tuple[str, str, str, str, float]] = []

    def log(
        self,
        t: float,
        message: str,
        worker: str | None = None,
        *,
        level: int = logging.WARNING,
        source: str = "worker",
        logger: str = "distributed.worker",
    ) -> SyntheticRun:
        self.records.append(
            ("log", self.start + t, level, source, worker, logger, message)
        )
        return self

    def task(
        self,
        t: float,
        seconds: float,
        prefix: str = "work",
        worker: str = A,
        *,
        status: str = "memory",
        key: str | None = None,
        transfer: float = 0.0,
        disk_read: float = 0.0,
        disk_write: float = 0.0,
        exception: str | None = None,
        nbytes: int = 8,
    ) -> SyntheticRun:
        """A task that computed for ``seconds`` from ``t``, its result
        ``nbytes`` large."""
        begin = self.start + t
        key = key or f"('{prefix}-abc', {len(self.records)})"
        self.records.append(
            ("task", begin + seconds, key, prefix, self.span, worker, 1, begin,
             begin + seconds, status, nbytes, seconds, transfer, disk_read, disk_write,
             0.0, exception, None)
        )  # fmt: skip
        return self

    def tasks(
        self,
        n: int,
        seconds: float,
        prefix: str = "work",
        *,
        gap: float = 0.0,
        nbytes: int = 8,
    ) -> SyntheticRun:
        """``n`` tasks of ``seconds`` each, one after the other on two workers,
        ``gap`` seconds between one's end and the next one's start on each
        (what handing a thread its next task took)."""
        for i in range(n):
            at = i // 2 * (seconds + gap)
            self.task(at, seconds, prefix, A if i % 2 else B, nbytes=nbytes)
        return self

    def metrics(self, t: float, worker: str | None, **values: float) -> SyntheticRun:
        self.records.append(("metrics", self.start + t, worker, values))
        return self

    def series(
        self, times: Iterable[float], worker: str | None, **values: float
    ) -> SyntheticRun:
        for t in times:
            self.metrics(t, worker, **values)
        return self

    def held(self, seconds: float, per_worker: float) -> SyntheticRun:
        """Workers A and B's processes holding ``per_worker`` bytes each for
        ``seconds``, a sample every 0.1 s (the cluster's peak: twice that)."""
        times = [0.1 * t for t in range(int(seconds * 10))]
        for worker in (A, B):
            self.series(times, worker, memory_process=per_worker)
        return self

    def event(
        self, t: float, kind: str, worker: str | None = None, /, **data: Any
    ) -> SyntheticRun:
        self.records.append(("event", self.start + t, kind, worker, data))
        return self

    def meter(
        self, context: str, prefix: str, activity: str, unit: str, value: float
    ) -> SyntheticRun:
        """A fine performance metric of the run, as distributed's workers measure."""
        self.fine.append((context, prefix, activity, unit, value))
        return self

    def end(
        self,
        duration: float,
        settings: dict[str, Any] | None = None,
        environment: dict[str, Any] | None = None,
    ) -> Run:
        """Store everything, close the run ``duration`` seconds after its start
        with these settings and environment (none: a run recorded before
        dask-observe kept them)."""
        self.store.telemetry.append(CLUSTER, self.records)
        self.store.set_fine_metrics(self.id, self.fine)
        if settings is not None or environment is not None:
            self.store.set_settings(self.id, settings or {}, environment or {})
        statuses = [r[9] for r in self.records if r[0] == "task"]
        self.store.end_run(
            self.id,
            "finished",
            n_tasks=len(statuses),
            n_failed=statuses.count("erred"),
            ended=self.start + duration,
        )
        return self.store.run(self.id)


def workers(run: SyntheticRun, t: float, threads: int = 1) -> SyntheticRun:
    """Both workers' limits and threads, as the scheduler samples them."""
    for worker in (A, B):
        run.metrics(t, worker, memory_limit=1000.0, nthreads=float(threads))
    return run


def busy_host(
    run: SyntheticRun, until: float, worker: str | None = A, waiting: float | None = 0.9
) -> SyntheticRun:
    """Samples of an oversubscribed host (worker's, or the scheduler's: None),
    a second each, as the capture ships them."""
    for t in range(1, int(until) + 1):
        data = {"waiting": waiting, "runnable": 6, "cores": 2, "seconds": 1.0}
        run.event(float(t), "host-load", worker, **data)
    return run

"""A run in OpenTelemetry's terms: the resource of its telemetry, a task's
span attributes (or a group's, above ``max-task-spans``), a flag as a span
event; and the export of a finished run (``dask-observe export --otlp``). The
live export (:mod:`.live`) sends the same attributes as the run goes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from dask_observe.analysis.figures import PHASE_COLUMNS, task_table
from dask_observe.capture.wire import BOOKKEEPING_EVENTS
from dask_observe.export.otlp import Otlp, Sent, finite, nanoseconds
from dask_observe.store import queries

if TYPE_CHECKING:
    import pandas as pd
    from opentelemetry.sdk.trace import Span

    from dask_observe.diagnose import Flag
    from dask_observe.store import RunData


def run_resource(run: RunData) -> dict[str, Any]:
    """The resource attributes of a run's telemetry."""
    found: dict[str, Any] = {
        "dask_observe.api.id": run.id,
        "dask_observe.api.name": run.name,
    }
    cluster = run.summary().get("cluster")
    if cluster:
        found["dask.scheduler.address"] = str(cluster)
    return found


def task_attributes(task: dict[str, Any]) -> dict[str, Any]:
    """A task span's attributes: its key, status, size and phases."""
    attributes: dict[str, Any] = {
        "dask.task.key": str(task["key"]),
        "dask.task.prefix": str(task["prefix"]),
        "dask.task.status": str(task["status"]),
    }
    if isinstance(task.get("worker"), str):
        attributes["dask.worker.address"] = task["worker"]
    nbytes = finite(task.get("nbytes"))
    if nbytes is not None:
        attributes["dask.task.nbytes"] = int(nbytes)
    for phase, seconds in task_seconds(task).items():
        if seconds:
            attributes[f"dask.task.{phase}_s"] = round(seconds, 6)
    if isinstance(task.get("exception"), str):
        attributes["exception.message"] = task["exception"]
    return attributes


def _timed_tasks(run: RunData) -> pd.DataFrame:
    """The run's tasks with both times (seconds since the epoch)."""
    tasks = task_table(run, 0.0)
    return tasks[tasks["start"].notna() & tasks["stop"].notna()]


def _task_spans(
    otlp: Otlp, root: Span, tasks: pd.DataFrame, max_task_spans: int
) -> None:
    if len(tasks) <= max_task_spans:
        for task in cast("list[dict[str, Any]]", tasks.to_dict("records")):
            otlp.child_span(
                root, str(task["prefix"]), float(task["start"]), float(task["stop"]),
                task_attributes(task),
            )  # fmt: skip
        return
    # Too many tasks for a span each: a span per prefix and worker, from its
    # first start to its last stop, with counts and summed phases.
    worker = tasks["worker"].fillna("")
    for (prefix, where), group in tasks.groupby([tasks["prefix"], worker]):
        seconds = {
            phase: float(sum(group[c].fillna(0).sum() for c in columns if c in group))
            for phase, columns in PHASE_COLUMNS.items()
        }
        erred = int((group["status"] == "erred").sum())
        otlp.child_span(
            root, f"{prefix} x{len(group)}", float(group["start"].min()),
            float(group["stop"].max()),
            group_attributes(str(prefix), str(where), len(group), erred, seconds),
        )  # fmt: skip


def group_attributes(
    prefix: str, worker: str, count: int, erred: int, seconds: dict[str, float]
) -> dict[str, Any]:
    """The attributes of a span that stands for ``count`` tasks of one prefix
    on one worker ("" when not known): how many, how many failed, and their
    phases' seconds summed."""
    attributes: dict[str, Any] = {
        "dask.task.prefix": prefix,
        "dask.task.count": count,
        "dask.task.erred": erred,
    }
    if worker:
        attributes["dask.worker.address"] = worker
    for phase, value in seconds.items():
        if value:
            attributes[f"dask.task.{phase}_s"] = round(value, 6)
    return attributes


def task_seconds(task: dict[str, Any]) -> dict[str, float]:
    """A task's seconds in each phase (PHASE_COLUMNS), from its record."""
    return {
        phase: sum(finite(task.get(c)) or 0.0 for c in columns)
        for phase, columns in PHASE_COLUMNS.items()
    }


def _run_attributes(run: RunData) -> dict[str, Any]:
    summary = run.summary()
    attributes: dict[str, Any] = {
        "dask_observe.api.id": run.id,
        "dask_observe.api.status": run.status,
    }
    for key in ("n_tasks", "n_failed", "n_flags", "dropped"):
        if isinstance(summary.get(key), int):
            attributes[f"dask_observe.api.{key}"] = summary[key]
    return attributes


def flag_event(flag: Flag) -> tuple[str, dict[str, Any], int]:
    """A flag as a span event: name, attributes, time."""
    attributes = {
        "dask_observe.flag.kind": flag.kind,
        "dask_observe.flag.severity": flag.severity,
        "dask_observe.flag.message": flag.message,
        "dask_observe.flag.advice": flag.advice,
    }
    if flag.worker:
        attributes["dask.worker.address"] = flag.worker
    return f"flag: {flag.kind}", attributes, nanoseconds(flag.time)


def export_run(
    run: RunData,
    flags: list[Flag],
    endpoint: str | None,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
    max_task_spans: int = 20_000,
) -> Sent:
    """Send a finished run to an OTLP/HTTP collector: its log lines, metric
    samples and a trace of its tasks. Returns what was sent and dropped."""
    otlp = Otlp(endpoint, run_resource(run), headers=headers, timeout=timeout)
    try:
        logs = run.logs(epoch=True)
        for at, level, source, worker, name, message, task, fields in zip(
            *(logs[c] for c in queries.LOG_COLUMNS), strict=True
        ):
            otlp.log(
                float(at), str(level), str(source), _text(worker), str(name),
                str(message), _text(task), _text(fields),
            )  # fmt: skip
        tasks = _timed_tasks(run)
        # The root encloses its tasks: a worker's times are shifted onto the
        # scheduler's clock by an estimate (distributed's scheduler_delay,
        # half a heartbeat's round trip off at worst), which put a task that
        # started within milliseconds of the run a few before it, under load.
        started, ended = run.started, run.window_end()
        if len(tasks):
            started = min(started, float(tasks["start"].min()))
            ended = max(ended, float(tasks["stop"].max()))
        root = otlp.root_span(f"run {run.name}", started, _run_attributes(run))
        _task_spans(otlp, root, tasks, max_task_spans)
        events = run.events(epoch=True)
        for at, kind, worker, data in zip(
            *(events[c] for c in ("time", "kind", "worker", "data")), strict=True
        ):
            if kind in BOOKKEEPING_EVENTS:
                continue
            attributes = {"dask.event.data": str(data)}
            if isinstance(worker, str):
                attributes["dask.worker.address"] = worker
            root.add_event(str(kind), attributes, nanoseconds(float(at)))
        for flag in flags:
            name, attributes, at = flag_event(flag)
            root.add_event(name, attributes, at)
        root.end(end_time=nanoseconds(ended))
        metrics = run.metrics(epoch=True)
        points = [
            (float(t), w if isinstance(w, str) else None, str(n), float(v))
            for t, w, n, v in zip(
                *(metrics[c] for c in queries.METRIC_COLUMNS), strict=True
            )
        ]
        return otlp.send(points)
    finally:
        otlp.shutdown()


def _text(value: Any) -> str | None:
    """A column's text, or None where the frame holds none (NaN, None)."""
    return value if isinstance(value, str) else None

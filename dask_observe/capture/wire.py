"""What the scheduler plugin and the recorder agree on.

The recorder may be another dask-observe than the one whose plugin runs on the
cluster (another kernel registered it first, or the cluster has another version
installed): every reply says which version of this agreement it speaks, and a
recorder that cannot read it says so rather than misread it.

Version 1: ``dask_observe_pull`` returns ``{"wire", "instance", "last",
"dropped", "records"}`` (and ``closing``, added, optional: the scheduler is
closing, these are its last records); it takes ``ending`` (added, optional,
sent where the hello says ``ending``): the spans of runs whose block has
returned, their end on its way, which a closing scheduler waits longer for.
Records are ``(number, record)`` pairs whose first item names the kind:

- ``("log", time, level, source, worker, logger, message, task, fields)``
- ``("task", time, key, prefix, span_ids, worker, thread, start, stop, status,
  nbytes, compute_s, transfer_s, disk_read_s, disk_write_s, deserialize_s,
  exception, traceback)``
- ``("metrics", time, worker or None, {name: value})``: a worker's holds all
  its names when its heartbeat was new, else only ``tasks_processing``
  (a value holds until the worker's next sample)
- ``("event", time, kind, worker or None, data)``

``dask_observe_hello`` returns ``{"wire", "package", "dashboard"}``;
``dask_observe_sample`` takes a metrics sample of every worker now.

Version 2 adds the two calls a run makes, one round trip each:
``dask_observe_begin(span_id)`` watches the span and returns the cluster's
fine metrics totals (``dask_observe_fine_metrics`` rows); ``dask_observe_end
(span_id)`` unwatches it, has every worker (with a heartbeat) and nanny ship
what it holds (their ``dask_observe_flush`` handler), and returns ``{"counts",
"fine", "span_fine", "workers"}``: the span's task counts (by ``memory``,
``erred``, and, added, optional, ``running``: still processing as it
ended), the cluster's and the span's fine metrics after the flush, and the
workers' addresses; given
``cursor`` and ``instance`` (a capture whose hello says ``end_pulls``), also
``pull``: ``dask_observe_pull``'s reply after the flush; and ``closing``
(added, optional): the scheduler is closing, so nothing more is to be asked of
it (a closing scheduler waits, bounded, for the runs it watches to end). A
capture whose hello says ``gone_nannies`` also has the nannies of workers that
left in the last 30 s ship (``dask_observe_flush(left=worker)``), each once it
has logged how its worker ended: a recorder then need not wait for their own
flush. Workers and
nannies call ``dask_observe_push(source, records, dropped, samples, events)``:
log records ``(time, level, logger, message, worker, task, fields)``, memory samples
``(time, worker, rss)`` and events ``(time, kind, worker, data)``; they come from
the same shipped bundle as the scheduler's plugin, so they always agree with it.

Version 3 adds ``task`` and ``fields`` to log records: the task whose thread
wrote the line, and a logging call's ``extra`` fields as a JSON object; and
log lines of what tasks print (loggers ``stdout`` and ``stderr``) and the
warnings they raise (``py.warnings``).

Each of these records is a named tuple of this module (:class:`LogRecord`,
:class:`TaskRecord`, :class:`MetricsRecord`, :class:`EventRecord`; pushed:
:class:`PushedLog`, :class:`MemorySample`, :class:`PushedEvent`): both ends
build and read them by name, and they travel as the plain arrays above (a named
tuple is a tuple to msgpack), so the layout, not the Python class, is what a
version fixes. :func:`typed` reads a received one back. The capture's buffers
hold them as plain tuples (``buffer.untracked``: the garbage collector's
reasons), which a scheduler in the reader's process hands over as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NamedTuple, Union

VERSION = 3


class LogRecord(NamedTuple):
    """A log line of the scheduler, a worker or a nanny."""

    type: Literal["log"]
    time: float
    level: int
    #: "scheduler", "worker" or "nanny"
    source: str
    worker: str | None
    logger: str
    message: str
    #: The key of the task whose thread wrote the line, if a task's did.
    task: str | None = None
    #: A logging call's structured ``extra`` fields, as a JSON object.
    fields: str | None = None


class TaskRecord(NamedTuple):
    """A task that finished or failed, as the scheduler saw it."""

    type: Literal["task"]
    time: float
    key: str
    prefix: str
    #: The span ids the task belongs to, space-separated.
    span_ids: str
    worker: str | None
    thread: int | None
    start: float | None
    stop: float | None
    #: "memory" or "erred"
    status: str
    nbytes: int | None
    compute_s: float
    transfer_s: float
    disk_read_s: float
    disk_write_s: float
    deserialize_s: float
    exception: str | None
    traceback: str | None


class MetricsRecord(NamedTuple):
    """Metric samples of a worker (or of the cluster: worker None)."""

    type: Literal["metrics"]
    time: float
    worker: str | None
    values: dict[str, float]


class EventRecord(NamedTuple):
    """A lifecycle event (worker-added, event-loop-stall, ...)."""

    type: Literal["event"]
    time: float
    kind: str
    worker: str | None
    data: Any


Record = Union[LogRecord, TaskRecord, MetricsRecord, EventRecord]  # noqa: UP007

_BY_TYPE: dict[str, type[Any]] = {
    "log": LogRecord, "task": TaskRecord, "metrics": MetricsRecord,
    "event": EventRecord,
}  # fmt: skip


def typed(raw: Sequence[Any]) -> Record:
    """A record as received (a list, after msgpack; the record itself from a
    scheduler in this process) as its named tuple; ValueError for one this
    version does not know."""
    kind = _BY_TYPE.get(raw[0]) if raw else None
    if kind is None:
        raise ValueError(f"not a wire record: {str(raw)[:80]}")
    if isinstance(raw, kind):
        return raw  # type: ignore[no-any-return]
    try:
        return kind(*raw)  # type: ignore[no-any-return]
    except TypeError as e:  # another number of fields
        raise ValueError(f"a {raw[0]} record of {len(raw)} fields: {e}") from e


class PushedLog(NamedTuple):
    """A log line a worker or nanny pushes to the scheduler."""

    time: float
    level: int
    logger: str
    message: str
    worker: str | None
    task: str | None = None
    fields: str | None = None


class MemorySample(NamedTuple):
    """A worker's own fast sample of its process memory."""

    time: float
    worker: str
    rss: float


class PushedEvent(NamedTuple):
    """An event a worker saw itself (a stall of its loop, a long task...)."""

    time: float
    kind: str
    worker: str
    data: Any


#: Events that are the capture's bookkeeping, read by the analyses rather than
#: something that happened to the cluster: exports leave them out (transfers
#: come a second per worker pair, and the task spans tell them already; a
#: busy host's load a second per process).
BOOKKEEPING_EVENTS = ("transfer", "task-running", "host-load", "clock-offset")

#: The worker and nanny handler that ships what it holds now; with
#: ``heartbeat`` (a worker) it then sends a heartbeat.
FLUSH_HANDLER = "dask_observe_flush"

#: The task annotation a recorded block gives every task it submits: the span
#: ids of the runs recording it. distributed may file a task under an older
#: span (one whose task group it joined); this names the runs it belongs to.
RUN_ANNOTATION = "dask_observe"

#: The worker handler that samples the stack of each of its running tasks, to
#: ship with its next flush (a run that stops keeps where they were).
STACKS_HANDLER = "dask_observe_stacks"
#: The worker handler that says which tasks it runs (their keys), those the
#: scheduler let go of included (see ``letgo``).
RUNNING_HANDLER = "dask_observe_running"

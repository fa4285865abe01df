"""The live export's process (started by :class:`.live.LiveExport`): batches
of records in on stdin, built into OpenTelemetry's records with the SDK and
sent; the running count of what the collector did not take out on stdout."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dask_observe.capture.wire import BOOKKEEPING_EVENTS
from dask_observe.export.live import read_frame, write_frame
from dask_observe.export.otlp import Otlp, finite, nanoseconds
from dask_observe.export.otlp_run import group_attributes, task_attributes, task_seconds
from dask_observe.store import queries

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import Span


logger = logging.getLogger(__name__)


@dataclass
class _Group:
    """Tasks of one run, prefix and worker in one batch, sent as one span."""

    parent: Span | None
    start: float
    stop: float
    count: int = 0
    erred: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


class Sender:
    """The sending process's side: builds the records' OpenTelemetry
    counterparts with the SDK (:class:`~dask_observe.export.otlp.Otlp`) and
    sends them. Each run is a trace, its root span open until its end."""

    def __init__(
        self,
        endpoint: str | None,
        cluster: str,
        headers: dict[str, str] | None,
        timeout: float,
        max_task_spans: int = 20_000,
    ) -> None:
        self.otlp: Otlp = Otlp(
            endpoint,
            {"dask.scheduler.address": cluster},
            headers=headers,
            timeout=timeout,
        )
        self.max_task_spans = max_task_spans
        self._roots: dict[int, tuple[Span, str | None]] = {}
        #: Task spans sent so far, by run (None: tasks of no run).
        self._task_spans: dict[int | None, int] = {}
        self._groups: dict[tuple[int | None, str, str], _Group] = {}

    def send(self, records: Sequence[tuple[Any, ...]]) -> tuple[int, str | None]:
        """Build and send a batch; the running count of what the collector
        did not take, and the first reason."""
        otlp = self.otlp
        points: list[tuple[float, str | None, str, float]] = []
        for record in records:
            kind = record[0]
            if kind == "log":
                otlp.log(*record[1:9])
            elif kind == "metrics":
                _, t, worker, values = record
                points += [(t, worker, n, float(v)) for n, v in values.items()]
            elif kind == "task":
                self._task(record)
            elif kind == "event":
                _, t, event_kind, worker, data = record
                if event_kind in BOOKKEEPING_EVENTS:
                    continue
                for root, _ in self._roots.values():
                    attributes = {"dask.event.data": str(data)}
                    if worker:
                        attributes["dask.worker.address"] = worker
                    root.add_event(str(event_kind), attributes, nanoseconds(t))
            elif kind == "begin":
                _, run_id, name, span_id, started = record
                attributes = {"dask_observe.api.id": run_id}
                self._roots[run_id] = (
                    otlp.root_span(f"run {name}", started, attributes),
                    span_id,
                )
            elif kind == "end":
                _, run_id, ended, status, events = record
                self._send_groups()  # before the run's root ends
                self._task_spans.pop(run_id, None)
                ended_root = self._roots.pop(run_id, None)
                if ended_root is not None:
                    root = ended_root[0]
                    root.set_attribute("dask_observe.api.status", status)
                    for event in events:
                        root.add_event(*event)
                    root.end(end_time=nanoseconds(ended))
        self._send_groups()
        sent = otlp.send(points)
        return sent.dropped, sent.error

    def _task(self, record: Sequence[Any]) -> None:
        task = dict(zip(queries.RECORD_FIELDS["tasks"], record[1:], strict=False))
        start, stop = finite(task.get("start")), finite(task.get("stop"))
        if start is None or stop is None:
            return
        spans = str(task.get("span_ids") or "").split()
        run_id, parent = next(
            (
                (run_id, root)
                for run_id, (root, span_id) in self._roots.items()
                if span_id is None or span_id in spans
            ),
            (None, None),
        )
        prefix = str(task["prefix"])
        sent = self._task_spans.get(run_id, 0)
        if sent < self.max_task_spans:
            self._task_spans[run_id] = sent + 1
            self.otlp.child_span(parent, prefix, start, stop, task_attributes(task))
            return
        worker = task.get("worker")
        key = (run_id, prefix, worker if isinstance(worker, str) else "")
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(parent, start, stop)
        group.start, group.stop = min(group.start, start), max(group.stop, stop)
        group.count += 1
        group.erred += task.get("status") == "erred"
        for phase, seconds in task_seconds(task).items():
            group.seconds[phase] = group.seconds.get(phase, 0.0) + seconds

    def _send_groups(self) -> None:
        """A span for each group of tasks gathered since the last."""
        for (_, prefix, worker), g in self._groups.items():
            attributes = group_attributes(prefix, worker, g.count, g.erred, g.seconds)
            self.otlp.child_span(
                g.parent, f"{prefix} x{g.count}", g.start, g.stop, attributes
            )
        self._groups.clear()


def main() -> None:
    """The sending process: batches in on stdin, counts out on stdout."""
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print is no frame
    incoming = sys.stdin.buffer
    options = read_frame(incoming)
    if options is None:
        return
    sender = Sender(**options)
    try:
        while (records := read_frame(incoming)) is not None:
            try:
                reply = sender.send(records)
            except Exception:  # a bug: this batch is lost, not the export
                logger.exception("dask-observe: OpenTelemetry export failed")
                continue
            # The recording process may be gone: the rest is sent all the same.
            with contextlib.suppress(BrokenPipeError):
                write_frame(replies, reply)
    finally:
        sender.otlp.shutdown()


if __name__ == "__main__":
    main()

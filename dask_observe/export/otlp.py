"""OpenTelemetry export, with the OpenTelemetry Python SDK and its OTLP/HTTP
exporters (``pip install dask-observe[otel]``): a collector in front of
Prometheus, Loki, Tempo, Jaeger, Grafana, Datadog or Honeycomb takes a Dask
run beside the team's other services.

- log lines are log records: severity, the logger as instrumentation scope,
  ``dask.process.kind`` (scheduler, worker, nanny) and ``dask.worker.address``;
- metrics are gauges (``dask.<name>``) with the worker as attribute;
- a run is a trace: a root span, a child span per task (or, above
  ``observe.export.otlp.max-task-spans`` tasks, one per task prefix and
  worker) with its phases as attributes, and the run's events and flags as
  events of the root span (what a run is in these terms, and the export of a
  finished one: :mod:`.otlp_run`; while it records: :mod:`.live`).

The SDK builds every record (timestamps as the cluster wrote them); this
module sends them itself, batch by batch, so that it knows what a collector
did not take: :class:`Sent` counts it, and nothing else fails.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import Span

logger = logging.getLogger(__name__)

#: Records sent in one OTLP request.
BATCH = 1000
#: Python's logging levels as OpenTelemetry severity numbers.
_SEVERITY = ((50, 21), (40, 17), (30, 13), (20, 9), (10, 5), (0, 1))
_LEVELS = {"CRITICAL": 50, "ERROR": 40, "WARNING": 30, "INFO": 20, "DEBUG": 10}
#: The loggers of the OTLP/HTTP exporters: they log every failed request,
#: which :class:`Otlp` counts and reports once instead.
_EXPORTER_LOGGERS = ("opentelemetry.exporter", "opentelemetry.sdk")


def severity(level: int | str) -> int:
    """A logging level (30 or "WARNING") as an OpenTelemetry severity number."""
    number = _LEVELS.get(level.upper(), 0) if isinstance(level, str) else int(level)
    return next(otel for floor, otel in _SEVERITY if number >= floor)


def nanoseconds(seconds: float) -> int:
    return int(seconds * 1e9)


def finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) or math.isinf(number) else number


@dataclass
class Sent:
    """What went to the collector, and what it did not take (``dropped``,
    with the first ``error``)."""

    logs: int = 0
    metrics: int = 0
    spans: int = 0
    dropped: int = 0
    error: str | None = None

    def text(self, endpoint: str) -> str:
        said = (
            f"{self.logs:,} log records, {self.metrics:,} metric points and "
            f"{self.spans:,} spans to {endpoint}"
        )
        if self.dropped:
            said += f"; {self.dropped:,} not taken ({self.error})"
        return said


class _OwnThreadOnly(logging.Filter):
    """Silences the exporters' per-request lines in the thread that counts
    their failures (other users of the SDK in this process still see theirs)."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        return threading.get_ident() not in self.threads


_quiet = _OwnThreadOnly()


@contextmanager
def _counted_here() -> Iterator[None]:
    # A logger's filter sees only the records logged on it, not its children's:
    # it goes on each exporter module's own logger.
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(_EXPORTER_LOGGERS):
            found = logging.getLogger(name)
            if _quiet not in found.filters:
                found.addFilter(_quiet)
    me = threading.get_ident()
    _quiet.threads.add(me)
    try:
        yield
    finally:
        _quiet.threads.discard(me)


#: The packages OpenTelemetry export needs, and what is said without them.
SDK_MODULES = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
SDK_MISSING = (
    "OpenTelemetry export needs the OpenTelemetry SDK and its OTLP "
    "exporter: pip install 'dask-observe[otel]'"
)


def _needs_sdk() -> None:
    try:
        for name in SDK_MODULES:
            import_module(name)
    except ImportError:
        raise ImportError(SDK_MISSING) from None


def _session() -> Any:
    """A ``requests`` session for the SDK's exporters that follows no redirect
    and bounds each whole request by its timeout.

    The SDK counts any answer from 200 to 399 as taken, and ``requests``
    follows redirects: a collector answering with a redirect (to a link-local
    metadata address, say) was counted as sent. Here a redirect is an answer
    that was not taken (421, which the SDK neither counts nor retries). And
    ``requests`` times each socket read, not the request: a collector that
    drips a byte a second held an export for 100 s. Here the request runs in a
    thread that is given up on at its timeout (it ends by itself when the
    collector closes, unread)."""
    import requests

    class Bounded(requests.Session):
        def request(self, method: str, url: str, **kwargs: Any) -> Any:  # type: ignore[override]
            kwargs["allow_redirects"] = False
            timeout = kwargs.get("timeout")
            total = timeout if isinstance(timeout, int | float) else 10.0
            answer: list[Any] = []
            plain = requests.Session.request

            def send() -> None:
                try:
                    answer.append(plain(self, method, url, **kwargs))
                except BaseException as e:  # handed to the caller below
                    answer.append(e)

            worker = threading.Thread(
                target=send, name="dask-observe-otlp", daemon=True
            )
            worker.start()
            worker.join(total)
            if not answer:
                raise requests.exceptions.ReadTimeout(
                    f"{url} did not answer whole within {total:g} s"
                )
            if isinstance(answer[0], BaseException):
                raise answer[0]
            response = answer[0]
            if 300 <= response.status_code < 400:
                response.status_code = 421
                response.reason = "a redirect: not followed, not taken"
            return response

    return Bounded()


class Otlp:
    """OTLP/HTTP exporters for one source of telemetry (a run, or a cluster
    recorded live). ``endpoint`` is the collector's base URL (e.g.
    ``http://collector:4318``); None takes the standard OpenTelemetry
    environment variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``..._HEADERS``)."""

    def __init__(
        self,
        endpoint: str | None,
        resource: dict[str, Any],
        *,
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
    ) -> None:
        _needs_sdk()
        from opentelemetry.exporter.otlp.proto.http._log_exporter import (
            OTLPLogExporter,
        )
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter,
        )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter,
        )
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import (
            InMemoryLogRecordExporter,
            SimpleLogRecordProcessor,
        )
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        base = endpoint.rstrip("/") if endpoint else None

        def url(signal: str) -> str | None:
            return f"{base}/v1/{signal}" if base else None

        options: dict[str, Any] = {"headers": headers, "timeout": timeout}
        self.endpoint = base or "the OTEL_EXPORTER_OTLP_ENDPOINT collector"
        self._log_exporter = OTLPLogExporter(
            endpoint=url("logs"), session=_session(), **options
        )
        self._metric_exporter = OTLPMetricExporter(
            endpoint=url("metrics"), session=_session(), **options
        )
        self._span_exporter = OTLPSpanExporter(
            endpoint=url("traces"), session=_session(), **options
        )
        self.resource = Resource.create({"service.name": "dask", **resource})
        # The SDK builds the records; they wait in memory until sent in batches.
        self._logs = InMemoryLogRecordExporter()
        self._log_provider = LoggerProvider(resource=self.resource)
        self._log_provider.add_log_record_processor(
            SimpleLogRecordProcessor(self._logs)
        )
        self._spans = InMemorySpanExporter()
        self._tracer_provider = TracerProvider(resource=self.resource)
        self._tracer_provider.add_span_processor(SimpleSpanProcessor(self._spans))
        self.tracer = self._tracer_provider.get_tracer("dask_observe")
        self.sent = Sent()

    # -- building ---------------------------------------------------------------
    def log(
        self,
        time: float,
        level: int | str,
        source: str,
        worker: str | None,
        logger_name: str,
        message: str,
        task: str | None = None,
        fields: str | None = None,
    ) -> None:
        """One log line, kept until :meth:`send`: with the key of the task
        that wrote it, and its logging call's ``extra`` fields (a JSON
        object) as attributes of their own names."""
        attributes: dict[str, Any] = {"dask.process.kind": source}
        if worker:
            attributes["dask.worker.address"] = worker
        if task:
            attributes["dask.task.key"] = task
        for name, value in _fields(fields).items():
            attributes.setdefault(name, value)
        self._log_provider.get_logger(logger_name or "root").emit(
            timestamp=nanoseconds(time),
            observed_timestamp=nanoseconds(time),
            severity_number=_severity_number(severity(level)),
            severity_text=level
            if isinstance(level, str)
            else logging.getLevelName(level),
            body=message,
            attributes=attributes,
        )

    def root_span(self, name: str, started: float, attributes: dict[str, Any]) -> Span:
        """A run's span (end it with ``.end(end_time=...)``)."""
        span = self.tracer.start_span(
            name, start_time=nanoseconds(started), attributes=attributes
        )
        return span  # type: ignore[return-value]

    def child_span(
        self,
        parent: Span | None,
        name: str,
        start: float,
        stop: float,
        attributes: dict[str, Any],
    ) -> None:
        """A finished span under ``parent`` (a trace of its own without one)."""
        from opentelemetry import trace

        context = trace.set_span_in_context(parent) if parent is not None else None
        span = self.tracer.start_span(
            name, context=context, start_time=nanoseconds(start), attributes=attributes
        )
        span.end(end_time=nanoseconds(max(stop, start)))

    # -- sending ----------------------------------------------------------------
    def send(
        self, metrics: Sequence[tuple[float, str | None, str, float]] = ()
    ) -> Sent:
        """Send what was built, and these metric points (time, worker, name,
        value); return the running totals. After a request the collector did
        not take, the rest of this call's records are counted, not tried (each
        try waits out the exporter's timeout)."""
        from opentelemetry.sdk._logs.export import LogRecordExportResult
        from opentelemetry.sdk.metrics.export import MetricExportResult
        from opentelemetry.sdk.trace.export import SpanExportResult

        logs = self._logs.get_finished_logs()
        self._logs.clear()
        spans = self._spans.get_finished_spans()
        self._spans.clear()
        work: list[tuple[str, Sequence[Any], Any, Any]] = [
            ("logs", logs, self._log_exporter.export, LogRecordExportResult.SUCCESS),
            ("metrics", metrics, self._export_metrics, MetricExportResult.SUCCESS),
            ("spans", spans, self._span_exporter.export, SpanExportResult.SUCCESS),
        ]
        failed = False
        with _counted_here():
            for what, items, export, success in work:
                for batch in _batches(items):
                    if not failed and export(batch) is success:
                        setattr(self.sent, what, getattr(self.sent, what) + len(batch))
                        continue
                    if not failed and self.sent.error is None:
                        self.sent.error = f"{self.endpoint} did not take the {what}"
                    failed = True
                    self.sent.dropped += len(batch)
        return self.sent

    def _export_metrics(
        self, points: Sequence[tuple[float, str | None, str, float]]
    ) -> Any:
        from opentelemetry.sdk.metrics.export import (
            Gauge,
            Metric,
            MetricsData,
            NumberDataPoint,
            ResourceMetrics,
            ScopeMetrics,
        )
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        by_name: dict[str, list[NumberDataPoint]] = {}
        for at, worker, name, value in points:
            by_name.setdefault(name, []).append(
                NumberDataPoint(
                    attributes={"dask.worker.address": worker} if worker else {},
                    start_time_unix_nano=nanoseconds(at),
                    time_unix_nano=nanoseconds(at),
                    value=value,
                )
            )
        metrics = [
            Metric(
                name=f"dask.{name}",
                description=None,
                unit="By" if name.startswith("memory") or "bytes" in name else "1",
                data=Gauge(data_points=found),
            )
            for name, found in by_name.items()
        ]
        data = MetricsData(
            resource_metrics=[
                ResourceMetrics(
                    resource=self.resource,
                    scope_metrics=[
                        ScopeMetrics(
                            scope=InstrumentationScope("dask_observe"),
                            metrics=metrics,
                            schema_url="",
                        )
                    ],
                    schema_url="",
                )
            ]
        )
        return self._metric_exporter.export(data)

    def shutdown(self) -> None:
        for exporter in (
            self._log_exporter,
            self._metric_exporter,
            self._span_exporter,
        ):
            exporter.shutdown()
        self._log_provider.shutdown()
        self._tracer_provider.shutdown()


def _severity_number(number: int) -> Any:
    from opentelemetry._logs import SeverityNumber

    return SeverityNumber(number)


def _batches(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for at in range(0, len(items), BATCH):
        yield items[at : at + BATCH]


def _fields(text: str | None) -> dict[str, Any]:
    """A line's stored ``extra`` fields as OTLP attribute values (which
    hold strings, numbers and booleans; anything else as its text)."""
    if not text:
        return {}
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {
        str(k): v if isinstance(v, (str, int, float, bool)) else str(v)
        for k, v in found.items()
    }

"""An OTLP/HTTP collector that keeps what it receives, for the export tests
(the ``collector`` fixture): real protobuf payloads over HTTP, decoded with
OpenTelemetry's own messages."""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

REQUESTS: dict[str, Any] = {
    "/v1/logs": ExportLogsServiceRequest,
    "/v1/metrics": ExportMetricsServiceRequest,
    "/v1/traces": ExportTraceServiceRequest,
}


class Collector:
    """An OTLP/HTTP receiver: what arrived, decoded, by signal; and the bytes
    and requests it took. Without ``decode`` it only counts (the export
    benchmark times the sender, not protobuf's parsing)."""

    def __init__(self, decode: bool = True) -> None:
        self.received: dict[str, list[Any]] = {path: [] for path in REQUESTS}
        self.bytes = 0
        self.requests = 0
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with collector.lock:
                    collector.bytes += len(body)
                    collector.requests += 1
                if decode:
                    if self.headers.get("Content-Encoding") == "gzip":
                        body = gzip.decompress(body)
                    decoded = REQUESTS[self.path].FromString(body)
                    with collector.lock:
                        collector.received[self.path].append(decoded)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def log_records(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, record) of every log record received."""
        with self.lock:
            requests = list(self.received["/v1/logs"])
        return [
            (attributes_of(rl.resource.attributes), record)
            for request in requests
            for rl in request.resource_logs
            for scope in rl.scope_logs
            for record in scope.log_records
        ]

    def spans(self) -> list[Any]:
        with self.lock:
            requests = list(self.received["/v1/traces"])
        return [
            span
            for request in requests
            for rs in request.resource_spans
            for scope in rs.scope_spans
            for span in scope.spans
        ]

    def gauges(self) -> dict[str, list[Any]]:
        """Data points by metric name."""
        with self.lock:
            requests = list(self.received["/v1/metrics"])
        found: dict[str, list[Any]] = {}
        for request in requests:
            for rm in request.resource_metrics:
                for scope in rm.scope_metrics:
                    for metric in scope.metrics:
                        found.setdefault(metric.name, []).extend(
                            metric.gauge.data_points
                        )
        return found


def attributes_of(pairs: Any) -> dict[str, Any]:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in pairs}

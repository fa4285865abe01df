"""A run's telemetry out into the ecosystem, with the ecosystem's own formats
and tools: OpenTelemetry (OTLP), the Trace Event Format (Perfetto,
chrome://tracing) and Parquet (pandas, DuckDB)."""

from dask_observe.export.chrome_trace import chrome_trace, write_chrome_trace
from dask_observe.export.parquet import write_parquet

__all__ = ["chrome_trace", "write_chrome_trace", "write_parquet"]

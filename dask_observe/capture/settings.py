"""Capture settings, read from dask config where the plugins are registered."""

from __future__ import annotations

from dataclasses import dataclass, field

from dask_observe.capture.logs import parse_levels


@dataclass(frozen=True)
class CaptureSettings:
    """What the plugins need; pickled with them, so the client's config rules."""

    buffer_size: int = 100_000
    flush_interval_ms: float = 100.0
    metrics_interval_ms: float = 1000.0
    levels: dict[str, int] = field(default_factory=lambda: parse_levels({}))

    @classmethod
    def from_config(cls) -> CaptureSettings:
        from dask.utils import parse_timedelta

        from dask_observe.config import get

        def ms(name: str) -> float:
            return 1000 * float(parse_timedelta(get(f"capture.{name}"), default="s"))

        return cls(
            buffer_size=int(get("capture.buffer-size")),
            flush_interval_ms=ms("flush-interval"),
            metrics_interval_ms=ms("metrics-interval"),
            levels=parse_levels(get("capture.log-levels")),
        )

"""Capture settings, read from dask config where the plugins are registered."""

from __future__ import annotations

from dataclasses import dataclass

from dask_observe.capture.logs import parse_levels


@dataclass(frozen=True)
class CaptureSettings:
    """What the plugins need; pickled with them, so the client's config rules.

    The defaults live in one place, ``observe.yaml``: build with :meth:`from_config`.
    """

    buffer_size: int
    flush_interval_ms: float
    metrics_interval_ms: float
    levels: dict[str, int]

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

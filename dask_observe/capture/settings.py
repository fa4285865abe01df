"""Capture settings: read from dask config on the client (``config.capture_settings``)
and shipped with the plugins, so the client's config rules."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CaptureSettings:
    """What the plugins need. The defaults live in one place, ``observe.yaml``:
    build with ``dask_observe.config.capture_settings()``."""

    buffer_size: int
    flush_interval_ms: float
    metrics_interval_ms: float
    memory_interval_ms: float
    levels: dict[str, int]
    #: When the plugins were registered (epoch seconds): a process that joins
    #: later (a worker added by adaptive scaling, one its nanny restarted) hands
    #: over what it logged since, before its plugin was set up.
    since: float = 0.0

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
    #: A task running this long has its stack sampled (``flags.hung-task``).
    hung_task_after_s: float = 10.0
    #: Nothing of a watched run finished for this long, or this factor times
    #: the typical duration of what it runs: the scheduler describes where it
    #: stands (``flags.no-progress``).
    no_progress_after_s: float = 30.0
    no_progress_factor: float = 5.0
    #: What tasks print (stdout, stderr) and the warnings they raise are
    #: captured as log lines (``capture.output``).
    output: bool = True

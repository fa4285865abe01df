"""Plugins that run inside the cluster's own processes.

Nothing here may block: hooks append or count, and the recorder pulls. This
package is shipped to the cluster as source (``dask_observe.recording.plugins``) and
imported there under a name of its own: it imports only distributed, tornado
and the standard library, and its modules import each other relatively.
"""

from __future__ import annotations

from typing import Any

from .settings import CaptureSettings


def make_plugin(role: str, settings: dict[str, Any]) -> Any:
    """The plugin of ``role`` (scheduler, worker, nanny) with these settings;
    what a shipped registration becomes on the cluster."""
    config = CaptureSettings(**settings)
    if role == "scheduler":
        from .scheduler import ObserveSchedulerPlugin

        return ObserveSchedulerPlugin(config)
    if role == "worker":
        from .worker import ObserveWorkerPlugin

        return ObserveWorkerPlugin(config)
    if role == "nanny":
        from .nanny import ObserveNannyPlugin

        return ObserveNannyPlugin(config)
    raise ValueError(f"no capture plugin for {role!r}")

"""The nanny side of capture: the process that outlives its worker.

The nanny is the one that says "exceeded 95% memory budget. Restarting..." and with
which exit code or signal its worker process ended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from distributed.diagnostics.plugin import NannyPlugin

from .settings import CaptureSettings
from .shipper import LogShipper
from .wire import FLUSH_HANDLER

if TYPE_CHECKING:
    from distributed import Nanny


class ObserveNannyPlugin(NannyPlugin):
    """Forwards the nanny's log records, attributed to the worker it looks after."""

    name = "dask-observe-nanny"
    idempotent = True
    restart = False  # registering must not restart the workers

    def __init__(self, settings: CaptureSettings) -> None:
        self.settings = settings
        self.shipper: LogShipper | None = None

    def setup(self, nanny: Nanny) -> None:
        self.shipper = LogShipper("nanny", self.settings)
        self.shipper.start(
            nanny.scheduler.dask_observe_push,
            worker=lambda: nanny.worker_address,
            # The worker process's pid, also after it died: "Worker process 123 was
            # killed by signal 9" is logged then.
            pid=lambda: getattr(getattr(nanny.process, "process", None), "pid", None),
            backlog=getattr(getattr(nanny, "_deque_handler", None), "deque", ()),
        )
        nanny.handlers[FLUSH_HANDLER] = self.flush

    async def flush(self, heartbeat: bool = False) -> None:
        """Ship the buffered records now (a nanny has no heartbeat to send)."""
        if self.shipper is not None:
            await self.shipper.flush()

    async def teardown(self, nanny: Nanny) -> None:
        if self.shipper is not None:
            await self.shipper.stop()

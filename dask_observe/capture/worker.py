"""The worker side of capture: its log records, shipped as they are written."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from distributed.diagnostics.plugin import WorkerPlugin

from .settings import CaptureSettings
from .shipper import LogShipper

if TYPE_CHECKING:
    from distributed import Worker

logger = logging.getLogger(__name__)


class ObserveWorkerPlugin(WorkerPlugin):
    """Forwards the worker's log records to the scheduler plugin.

    Task timings and metrics need nothing here: the scheduler already receives them.
    """

    name = "dask-observe-worker"
    idempotent = True

    def __init__(self, settings: CaptureSettings) -> None:
        self.settings = settings
        self.shipper: LogShipper | None = None
        self._worker: Worker | None = None

    def setup(self, worker: Worker) -> None:
        self._worker = worker
        self.shipper = LogShipper("worker", self.settings)
        self.shipper.start(
            worker.scheduler.dask_observe_push,
            worker=lambda: worker.address,
            # A worker that joined after the recording started (adaptive
            # scaling, a restart) logged its first lines before this setup.
            backlog=getattr(getattr(worker, "_deque_handler", None), "deque", ()),
        )

    async def flush(self, heartbeat: bool = False) -> None:
        """Ship the buffered records now; with ``heartbeat``, then send one: it
        carries the fine performance metrics measured since the last, so that
        the scheduler's spans hold all of a run's when it ends."""
        if self.shipper is not None:
            await self.shipper.flush()
        if heartbeat and self._worker is not None:
            # The metrics are extra: a failed heartbeat must not fail the flush,
            # whose caller then reads the run's last lines.
            try:
                await self._worker.heartbeat()
            except Exception as e:
                logger.debug("dask-observe: heartbeat failed: %s", e)

    async def teardown(self, worker: Worker) -> None:
        if self.shipper is not None:
            await self.shipper.stop()

"""The worker side of capture: its log records, shipped as they are written."""

from __future__ import annotations

from typing import TYPE_CHECKING

from distributed.diagnostics.plugin import WorkerPlugin

from dask_observe.capture.settings import CaptureSettings
from dask_observe.capture.shipper import LogShipper

if TYPE_CHECKING:
    from distributed import Worker


class ObserveWorkerPlugin(WorkerPlugin):
    """Forwards the worker's log records to the scheduler plugin.

    Task timings and metrics need nothing here: the scheduler already receives them.
    """

    name = "dask-observe-worker"
    idempotent = True

    def __init__(self, settings: CaptureSettings) -> None:
        self.settings = settings
        self.shipper: LogShipper | None = None

    def setup(self, worker: Worker) -> None:
        self.shipper = LogShipper("worker", self.settings)
        self.shipper.start(
            worker.scheduler.dask_observe_push, worker=lambda: worker.address
        )

    async def teardown(self, worker: Worker) -> None:
        if self.shipper is not None:
            await self.shipper.stop()

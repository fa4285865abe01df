"""Ships a worker's or nanny's log records to the scheduler as they are written."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from tornado.ioloop import PeriodicCallback

from dask_observe.capture.buffer import DropCountingBuffer
from dask_observe.capture.logs import LogTuple
from dask_observe.capture.router import LogRouter, Sink
from dask_observe.capture.settings import CaptureSettings

logger = logging.getLogger(__name__)

#: Records in one message to the scheduler; keeps each message small.
BATCH = 5000


class LogShipper:
    """Buffers the process's log records and pushes them every ``interval_ms``.

    The buffer is bounded: when the scheduler cannot keep up the oldest records are
    dropped and counted, and the count travels with the next batch.
    """

    def __init__(self, source: str, settings: CaptureSettings) -> None:
        self.source = source
        self.levels = settings.levels
        self.buffer = DropCountingBuffer(settings.buffer_size)
        self.interval_ms = settings.flush_interval_ms
        self._push: Callable[..., Any] | None = None
        self._sink: Sink | None = None
        self._callback: PeriodicCallback | None = None
        self._flushing = asyncio.Lock()

    def _append(self, record: LogTuple, worker: str | None) -> None:
        # The worker is named when the line is written: a nanny's worker gets a new
        # address when it is restarted, and its last lines belong to the old one.
        self.buffer.append((*record, worker))

    def start(
        self,
        push: Callable[..., Any],
        worker: Callable[[], str | None],
        pid: Callable[[], int | None] = lambda: None,
    ) -> None:
        """Begin capturing; ``push`` is the scheduler's ``dask_observe_push`` RPC,
        ``worker`` and ``pid`` name the worker the records are about."""
        self._push = push
        self._sink = Sink(self.source, self._append, worker, pid, self.levels)
        LogRouter.attach(self._sink)
        # Started from the plugin's setup, which runs on the process's event loop.
        self._callback = PeriodicCallback(self.flush, self.interval_ms)
        self._callback.start()

    async def flush(self) -> None:
        """Send what is buffered now, in batches (not what arrives meanwhile, so a
        process that keeps logging cannot keep a flush going).

        Flushes take turns: when one returns, every record buffered before it was
        called has reached the scheduler, including a batch another flush had in
        flight.
        """
        async with self._flushing:
            await self._flush()

    async def _flush(self) -> None:
        assert self._push is not None
        remaining = len(self.buffer)
        while True:
            records, dropped = self.buffer.drain(min(BATCH, remaining))
            if not records and not dropped:
                return
            try:
                await self._push(source=self.source, records=records, dropped=dropped)
            except Exception as e:  # scheduler gone or restarting: count, go on
                self.buffer.count_lost(len(records) + dropped)
                logger.debug("dask-observe: cannot ship log records: %s", e)
                return
            remaining -= len(records)
            if remaining <= 0:
                return

    async def stop(self) -> None:
        if self._callback is not None:
            self._callback.stop()
        if self._sink is not None:
            LogRouter.detach(self._sink)
        await self.flush()


async def flush_plugin(name: str, dask_worker: Any, heartbeat: bool = False) -> None:
    """Run on a worker or nanny (``Client.run``): ship its buffered records now.

    With ``heartbeat`` (workers only), also send a heartbeat: it carries the
    fine performance metrics measured since the last one, so that the scheduler's
    spans hold all of a run's when it ends. (Done here, not in a function of its
    own: every ``Client.run`` logs a line, and this one's is filtered out.)
    """
    plugin = dask_worker.plugins.get(name)
    shipper = getattr(plugin, "shipper", None)
    if isinstance(shipper, LogShipper):
        await shipper.flush()
    if heartbeat:
        # The metrics are extra: a failed heartbeat must not fail the flush,
        # whose caller then reads the run's last lines.
        try:
            await dask_worker.heartbeat()
        except Exception as e:
            logger.debug("dask-observe: heartbeat failed: %s", e)

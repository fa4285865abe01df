"""The worker side of capture: its log records, shipped as they are written."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import WorkerPlugin
from tornado.ioloop import PeriodicCallback

from .settings import CaptureSettings
from .shipper import LogShipper

if TYPE_CHECKING:
    from distributed import Worker

logger = logging.getLogger(__name__)


#: How long a task runs before the worker says which it is and since when.
LONG_TASK_S = 1.0


class LongTasks:
    """The tasks executing on the worker and since when (from the transition
    hook). One running a second or more is told once ("task-running", with its
    start): if it kills its worker, the store knows what ran and since when,
    which the scheduler never learns."""

    def __init__(self) -> None:
        self.running: dict[str, float] = {}
        self.reported: set[str] = set()

    def started(self, key: str) -> None:
        self.running[key] = time.time()

    def ended(self, key: str) -> None:
        self.running.pop(key, None)
        self.reported.discard(key)

    def report(self, now: float, worker: str, shipper: LogShipper) -> None:
        for key, since in list(self.running.items()):
            if now - since >= LONG_TASK_S and key not in self.reported:
                self.reported.add(key)
                data = {"key": key, "since": since}
                shipper.events.append((now, "task-running", worker, data))


class MemorySampler:
    """The worker's process memory (RSS), read on its event loop every
    ``memory-interval``: the heartbeat's once a second misses the climb that
    gets a worker killed (seen: 1.4 s from 73 MiB to the 500 MiB limit).

    A sample is kept when it moved by 2% of the memory limit (of the last kept
    value, without a limit) or a second after the last: an idle worker costs
    a row a second, a climbing one every step of it.
    """

    def __init__(self, worker: Worker, shipper: LogShipper) -> None:
        import psutil

        self.worker = worker
        self.shipper = shipper
        self.process = psutil.Process()
        self.kept_at = -float("inf")
        self.kept = 0

    def sample(self, now: float) -> None:
        try:
            rss = self.process.memory_info().rss
        except Exception:  # the process is going away
            return
        limit = getattr(self.worker.memory_manager, "memory_limit", None) or self.kept
        if abs(rss - self.kept) < 0.02 * limit and now - self.kept_at < 1.0:
            return
        self.kept, self.kept_at = rss, now
        self.shipper.samples.append((now, self.worker.address, float(rss)))


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
        self._sampler: PeriodicCallback | None = None
        self._memory: MemorySampler | None = None
        self.long_tasks = LongTasks()

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
        self._memory = MemorySampler(worker, self.shipper)
        self._sampler = PeriodicCallback(self._tick, self.settings.memory_interval_ms)
        self._sampler.start()

    def _tick(self) -> None:
        """Every ``memory-interval``: the worker's memory, and its long tasks."""
        assert self._memory is not None and self.shipper is not None
        now = time.time()
        self.long_tasks.report(now, self._memory.worker.address, self.shipper)
        self._memory.sample(now)

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

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        # The worker's hot path: a dict write or pop, nothing else.
        if finish == "executing":
            self.long_tasks.started(str(key))
        elif start == "executing":
            self.long_tasks.ended(str(key))

    async def teardown(self, worker: Worker) -> None:
        if self._sampler is not None:
            self._sampler.stop()
        if self.shipper is not None:
            await self.shipper.stop()

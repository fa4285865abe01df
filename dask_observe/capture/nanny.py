"""The nanny side of capture: the process that outlives its worker.

The nanny is the one that says "exceeded 95% memory budget. Restarting..." and with
which exit code or signal its worker process ended.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import NannyPlugin

from .settings import CaptureSettings
from .shipper import LogShipper
from .wire import FLUSH_HANDLER

if TYPE_CHECKING:
    from distributed import Nanny

#: A nanny asked to flush after its worker process died, but before it said
#: so, waits this long at most for the line ("Worker process 123 was killed
#: by signal 9"). distributed logs it on the nanny's event loop once a thread
#: joining the process has seen it end: on a busy host that came after the
#: run's end, which then could not name the signal.
DEATH_WAIT_S = 1.0


class ObserveNannyPlugin(NannyPlugin):
    """Forwards the nanny's log records, attributed to the worker it looks after."""

    name = "dask-observe-nanny"
    idempotent = True
    restart = False  # registering must not restart the workers

    def __init__(self, settings: CaptureSettings) -> None:
        self.settings = settings
        self.shipper: LogShipper | None = None
        self._nanny: Nanny | None = None

    def setup(self, nanny: Nanny) -> None:
        self._nanny = nanny
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

    async def flush(self, heartbeat: bool = False, left: str | None = None) -> None:
        """Ship the buffered records now (a nanny has no heartbeat to send),
        with the line about its worker's death if that worker just died.
        ``left``: the address of its worker, which the scheduler has removed
        (a run's end asks the nannies of workers gone in the last 30 s)."""
        if self.shipper is not None:
            nanny = self._nanny
            gone = left is not None and getattr(nanny, "worker_address", None) == left
            await _death_told(getattr(nanny, "process", None), gone)
            await self.shipper.flush()

    async def teardown(self, nanny: Nanny) -> None:
        if self.shipper is not None:
            await self.shipper.stop()


async def _death_told(worker: Any, gone: bool = False) -> None:
    """Return once the nanny has logged how ``worker`` (its ``WorkerProcess``)
    ended, if that process has ended, or if the scheduler removed the worker
    it runs (``gone``); at once otherwise, and after DEATH_WAIT_S at most.

    ``gone`` is enough: a process whose socket the scheduler saw close may
    not be a zombie yet (a process closes its files before it becomes one),
    and on CI's Python 3.13 a run's end asked in between, read the process
    as alive, and missed the line. A worker the scheduler removed while its
    process lives on (a network partition) costs that wait, once."""
    from distributed.core import Status

    stopped = getattr(worker, "stopped", None)
    process = getattr(worker, "process", None)  # None once the end is handled
    if not isinstance(stopped, asyncio.Event) or stopped.is_set() or process is None:
        return
    if getattr(worker, "status", None) == Status.starting:
        return  # a new process: the last one's end was told as it restarted
    if not gone and not _ended(getattr(process, "pid", None)):
        return
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stopped.wait(), DEATH_WAIT_S)


def _ended(pid: int | None) -> bool:
    """Whether the process ``pid`` has ended (a zombie not yet reaped, or
    reaped), without reaping it: the thread that joins it must see its exit."""
    import psutil

    if pid is None:
        return False
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False

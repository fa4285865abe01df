"""How the recorder reaches the capture plugin on the scheduler: directly on
the scheduler's event loop when the scheduler runs in this process (a
LocalCluster's, the usual notebook case), else over RPC."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, cast

from dask_observe.config import get
from dask_observe.units import parse_seconds

if TYPE_CHECKING:
    from distributed import Client

    from dask_observe.capture.scheduler import ObserveSchedulerPlugin

#: The registered names of the plugins (as ``Client.register_plugin`` knows
#: them): what registers them (``.plugins``) and what reaches them (here).
SCHEDULER_PLUGIN = "dask-observe"
WORKER_PLUGIN = "dask-observe-worker"
NANNY_PLUGIN = "dask-observe-nanny"


def answer_timeout() -> float:
    """Seconds a call to the scheduler may wait for its answer
    (``observe.recorder.answer-timeout``): without a bound, a frozen scheduler
    (its connection still open) held a run's end, and whoever waited for it,
    for ever."""
    return parse_seconds(get("recorder.answer-timeout") or 30)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # this thread runs no loop
        return None


def call(client: Client, cluster: str, op: str, **kwargs: Any) -> Any:
    """Call one of the capture plugin's handlers on the scheduler.

    A scheduler in this process (a LocalCluster's, the usual notebook case)
    is called directly on its event loop: an RPC to it serializes every
    record and costs ~0.6 ms of this same process's CPU per pull, five times
    a second, while the scheduler works (measured), and a run's start and
    end a round trip each. Elsewhere, over RPC.
    """
    timeout = answer_timeout()
    handler, loop = _direct(client, cluster, op)
    if handler is None or loop is None:
        return rpc(client, op, timeout, **kwargs)
    if _running_loop() is loop:  # already on it: waiting would hang
        result = handler(**kwargs)
        if not inspect.isawaitable(result):
            return result
        result.close()  # type: ignore[attr-defined]
        return rpc(client, op, timeout, **kwargs)
    on_its_loop = _on_its_loop(handler, kwargs)
    try:
        asked = asyncio.run_coroutine_threadsafe(on_its_loop, loop)
    except RuntimeError:  # its loop closed: never to run (and no warning)
        on_its_loop.close()
        raise
    return asked.result(timeout=timeout)


def ask(client: Client, cluster: str, op: str, **kwargs: Any) -> Future[Any]:
    """As :func:`call`, not waited for: the future of the answer, for a caller
    that keeps going while the scheduler does not answer (a cell's live
    display says so). Over RPC it fails with TimeoutError after
    ``answer-timeout``; a scheduler of this process whose loop is held runs
    no timer, so the caller bounds its own wait."""
    handler, loop = _direct(client, cluster, op)
    if handler is not None and loop is not None and _running_loop() is not loop:
        on_its_loop = _on_its_loop(handler, kwargs)
        try:
            return asyncio.run_coroutine_threadsafe(on_its_loop, loop)
        except RuntimeError:  # as in call
            on_its_loop.close()
            raise
    client_loop = getattr(client.loop, "asyncio_loop", None)
    if not isinstance(client_loop, asyncio.AbstractEventLoop):  # closed
        unanswered: Future[Any] = Future()
        unanswered.set_exception(OSError("the client is closed"))
        return unanswered
    remote = getattr(client.scheduler, op)(**kwargs)
    return asyncio.run_coroutine_threadsafe(
        asyncio.wait_for(remote, answer_timeout()), client_loop
    )


def _direct(
    client: Client, cluster: str, op: str
) -> tuple[Callable[..., Any] | None, asyncio.AbstractEventLoop | None]:
    """The handler ``op`` and the loop it runs on, if the scheduler runs in
    this process with the capture plugin."""
    scheduler = local_scheduler(client, cluster)
    handler = None if scheduler is None else scheduler.handlers.get(op)
    return handler, getattr(local_plugin(client, cluster), "loop", None)


async def _on_its_loop(handler: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    result = handler(**kwargs)
    return await result if inspect.isawaitable(result) else result


def rpc(client: Client, op: str, timeout: float, **kwargs: Any) -> Any:
    """One of the scheduler's handlers over RPC, answered within ``timeout``
    seconds (TimeoutError). ``callback_timeout`` is Client.sync's own."""
    handler = getattr(client.scheduler, op)
    return client.sync(handler, callback_timeout=timeout, **kwargs)


def scheduler_loop(scheduler: Any) -> asyncio.AbstractEventLoop | None:
    """The event loop of a scheduler in this process, to run a coroutine on
    from another thread; None when this thread runs it (waiting on it there
    would hang) or it is not running."""
    loop = getattr(getattr(scheduler, "loop", None), "asyncio_loop", None)
    if not isinstance(loop, asyncio.AbstractEventLoop) or not loop.is_running():
        return None
    return None if _running_loop() is loop else loop


def local_scheduler(client: Client, cluster: str) -> Any:
    """The scheduler object, if it runs in this process. (A SpecCluster's
    ``scheduler`` may be a handle on a process elsewhere, with the same
    address: distributed's SubprocessScheduler, say.)"""
    from distributed import Scheduler

    scheduler = getattr(getattr(client, "cluster", None), "scheduler", None)
    here = isinstance(scheduler, Scheduler) and scheduler.address == cluster
    return scheduler if here else None


def local_plugin(client: Client, cluster: str) -> ObserveSchedulerPlugin | None:
    """The scheduler's plugin object, if that scheduler runs in this process.

    Recognised by what it does, not by its class: it comes from the shipped
    bundle (``dask_observe.recording.plugins``), not from this package.
    """
    scheduler = local_scheduler(client, cluster)
    plugin = getattr(scheduler, "plugins", {}).get(SCHEDULER_PLUGIN)
    if callable(getattr(plugin, "pull", None)) and getattr(plugin, "loop", None):
        return cast("ObserveSchedulerPlugin", plugin)
    return None

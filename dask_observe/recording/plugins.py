"""The capture travels to the cluster by value: nothing of ours is installed there.

The plugins' code (``dask_observe.capture``: distributed and the standard library
only) goes with each registration as source text, compressed, and is imported on
the cluster under a name of its own, ``dask_observe_capture_<hash of the source>``
(:mod:`.bundle`). So:

- a cluster with only dask and distributed installed (dask-gateway, Kubernetes,
  HPC images) is recorded fully;
- a cluster that has some dask-observe installed, of this version or another,
  never mixes it with the code this client ships: different code, different name;
- source text imports on any Python the cluster runs, unlike pickled code objects.

What carries the source is a small loader, :func:`materialize`, which this module
has cloudpickle pickle by value (``register_pickle_by_value``), and which
distributed unpickles wherever the plugin is set up, a worker added hours later
included. Everything in this module that runs on the cluster uses the standard
library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import os
import platform
import re
import sys
import threading
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import NannyPlugin, SchedulerPlugin, WorkerPlugin

from dask_observe.capture.logs import parse_levels
from dask_observe.capture.settings import CaptureSettings
from dask_observe.config import get
from dask_observe.recording import link
from dask_observe.recording.bundle import import_bundle, local_bundle
from dask_observe.recording.link import (
    NANNY_PLUGIN,
    SCHEDULER_PLUGIN,
    WORKER_PLUGIN,
    answer_timeout,
)
from dask_observe.units import parse_seconds

if TYPE_CHECKING:
    from distributed import Client


def capture_settings(since: float) -> CaptureSettings:
    """The plugins' settings from dask config (``observe.capture``), here on the
    client: its config rules the cluster's capture."""

    def ms_of(name: str) -> float:
        return 1000 * parse_seconds(get(name))

    def ms(name: str) -> float:
        return ms_of(f"capture.{name}")

    return CaptureSettings(
        buffer_size=int(get("capture.buffer-size")),
        flush_interval_ms=ms("flush-interval"),
        metrics_interval_ms=ms("metrics-interval"),
        memory_interval_ms=ms("memory-interval"),
        levels=parse_levels(get("capture.log-levels")),
        since=since,
        hung_task_after_s=ms_of("flags.hung-task.after") / 1000,
        no_progress_after_s=ms_of("flags.no-progress.after") / 1000,
        no_progress_factor=float(get("flags.no-progress.factor")),
        output=bool(get("capture.output")),
    )


# -- on the cluster: standard library only ------------------------------------------
def materialize(
    package: str, files: dict[str, bytes], role: str, settings: dict[str, Any]
) -> Any:
    """Unpickling a shipped plugin ends here, on the cluster: import the bundle,
    build the real plugin of ``role`` (scheduler, worker or nanny)."""
    return import_bundle(package, files).make_plugin(role, settings)


async def flush_shipped(
    name: str, dask_worker: Any, heartbeat: bool = False
) -> dict[str, Any]:
    """Run on a worker or nanny (``Client.run``): have plugin ``name`` ship what it
    holds now (and, with ``heartbeat``, send a heartbeat). Duck-typed: the plugin
    may come from any client's bundle.

    A worker answers with the memory thresholds it runs with (see
    :func:`memory_thresholds`): a run is judged under its cluster's settings,
    not those of whoever reads it."""
    plugin = dask_worker.plugins.get(name)
    flush = getattr(plugin, "flush", None)
    if flush is not None:
        await flush(heartbeat=heartbeat)
    manager = getattr(dask_worker, "memory_manager", None)
    if manager is None or not hasattr(dask_worker, "state"):  # a nanny
        return {}
    # Kept on the Worker class: once a process however many workers it holds
    # (200 in-process workers, each reading the metadata for 15 ms on their
    # shared loop, held it a minute and more as a run began or ended).
    environment = await _process_environment_off_loop(type(dask_worker))
    return {
        "memory": memory_thresholds(manager),
        "worker": {
            "nthreads": getattr(dask_worker.state, "nthreads", None),
            "memory_limit": getattr(manager, "memory_limit", None),
            "resources": dict(getattr(dask_worker.state, "total_resources", {})),
        },
        "environment": environment,
    }


async def _process_environment_off_loop(holder: Any) -> dict[str, Any]:
    """:func:`process_environment`, read in a thread the first time. The
    metadata is hundreds of file reads, each giving up the GIL, and a run's
    start asks while its tasks run: with four Python threads holding the GIL,
    each read waited its turn and the worker's loop (its heartbeats, its
    profile samples, distributed's GIL measure) stood still for 3-4 s.

    One read for all who ask at once: the workers of one process (200
    in-process workers, each flushed at a run's end) share their class, and
    each read it in a thread of its own before the first had kept it."""
    found: dict[str, Any] | None = getattr(holder, "_dask_observe_environment", None)
    if found is not None:
        return found
    reading: asyncio.Future[dict[str, Any]] | None = getattr(
        holder, "_dask_observe_environment_reading", None
    )
    loop = asyncio.get_running_loop()
    if reading is None or reading.get_loop() is not loop or reading.done():
        # Done yet not kept: it failed; this caller reads again.
        reading = asyncio.ensure_future(asyncio.to_thread(process_environment, holder))
        with contextlib.suppress(AttributeError):
            holder._dask_observe_environment_reading = reading
    return await asyncio.shield(reading)


#: Packages whose versions a run's environment lists, where installed.
PACKAGES = (
    "dask", "distributed", "numpy", "pandas", "pyarrow", "cloudpickle",
    "msgpack", "tornado", "toolz", "lz4", "scipy", "xarray", "zarr",
    "dask-expr", "dask-observe",
)  # fmt: skip


def process_environment(holder: Any = None) -> dict[str, Any]:
    """This process's Python, OS and package versions (``PACKAGES``). Read once
    a process: kept on ``holder`` (the worker or scheduler) where given, as
    reading package metadata takes milliseconds."""
    found: dict[str, Any] | None = getattr(holder, "_dask_observe_environment", None)
    if found is not None:
        return found
    found = {
        "python": platform.python_version(),
        "os": platform.platform(),
        "packages": installed_versions(PACKAGES),
    }
    if holder is not None:
        with contextlib.suppress(AttributeError):
            holder._dask_observe_environment = found
    return found


def installed_versions(names: tuple[str, ...]) -> dict[str, str]:
    """The version of each of ``names`` installed here (those that are), as
    ``importlib.metadata.version`` says it, from one listing of each
    ``sys.path`` folder. It finds a package as this does, by the name its
    metadata folder spells (the first on the path); a wheel's
    ``<name>-<version>.dist-info`` spells the version too, and only for the
    others (an egg) is the metadata read. ``importlib.metadata.version``
    searched the whole path for each name: 0.9 ms a name, 14 ms for
    ``PACKAGES``, in each worker during a first recorded block, beside its
    task; this takes ~1 ms."""

    def normal(name: str) -> str:  # PEP 503's, with "_" as wheels spell it
        return re.sub(r"[-_.]+", "_", name).lower()

    wanted = {normal(name): name for name in names}
    found: dict[str, str] = {}
    for folder in sys.path:
        try:
            entries = os.listdir(folder or ".")
        except OSError:
            continue
        for entry in entries:
            stem, _, kind = entry.rpartition(".")
            if kind not in ("dist-info", "egg-info", "egg"):
                continue
            name, _, version = stem.partition("-")
            key = wanted.get(normal(name))
            if key is None or key in found:
                continue
            if kind == "dist-info" and version and "-" not in version:
                found[key] = version
            else:  # importlib.metadata finds this one first: its metadata says
                with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                    found[key] = importlib.metadata.version(key)
    return {name: found[name] for name in names if name in found}


def memory_thresholds(manager: Any = None) -> dict[str, float | bool]:
    """distributed's worker memory thresholds, as fractions of the memory limit
    (``False`` where one is disabled): a worker's own (its memory manager's)
    where given, else those of this process's dask config. ``terminate`` is
    the nanny's, read from the config both share."""
    import dask.config

    def configured(name: str) -> float | bool:
        value = dask.config.get(f"distributed.worker.memory.{name}", default=False)
        return float(value) if isinstance(value, int | float) and value else False

    found = {name: configured(name) for name in ("target", "spill", "pause")}
    if manager is not None:
        for name in found:
            value = getattr(manager, f"memory_{name}_fraction", None)
            if value is not None:
                found[name] = float(value) if value else False
    return {**found, "terminate": configured("terminate")}


def profiles_since(
    start: float, prefixes: list[str], dask_worker: Any
) -> dict[str, Any]:
    """Run on a worker (``Client.run``): its statistical profile since
    ``start``, the whole (key "") and of each task prefix, each the finished
    profile cycles since then and the current one. (The worker's own
    ``get_profile`` answers nothing for a key sampled only in the current
    cycle: a prefix that ran in the last second of a run lost its samples.)"""
    from distributed import profile

    def merged(history: list[tuple[float, Any]], current: Any) -> Any:
        parts = [tree for t, tree in history if t >= start]
        return profile.merge(*parts, current)

    trees = {"": merged(list(dask_worker.profile_history), dask_worker.profile_recent)}
    keyed = list(dask_worker.profile_keys_history)
    for prefix in prefixes:
        trees[prefix] = merged(
            [(t, d[prefix]) for t, d in keyed if prefix in d],
            dask_worker.profile_keys.get(prefix) or profile.create(),
        )
    return trees


async def capture_on_scheduler(
    dask_scheduler: Any, backlog_s: float = 30.0, environment: bool = True
) -> dict[str, Any] | None:
    """Run on the scheduler (``Client.run_on_scheduler``): the capture plugin's
    ``hello`` (which version runs, where the dashboard listens, where a new
    store starts: ``backlog_s`` seconds back), ``{"wire": 0}`` for a plugin of
    that name that cannot say, None for none at all. With ``environment``,
    the scheduler's process's too (see :func:`process_environment`)."""
    plugin = dask_scheduler.plugins.get(SCHEDULER_PLUGIN)
    if plugin is None:
        return None
    hello = getattr(plugin, "hello", None)
    if not callable(hello):
        found = {"wire": 0}
    else:
        try:
            found = hello(backlog_s)
        except TypeError:  # a capture of an earlier release: no backlog to say
            found = hello()
    if not environment:
        return found
    # In a thread: a LocalCluster(processes=False) runs its tasks beside it.
    return {**found, "environment": await _process_environment_off_loop(dask_scheduler)}


# -- on the client -------------------------------------------------------------------
class _Shipped:
    """A plugin as the client registers it: pickles to the loader call that builds
    the real plugin from the bundle on the cluster."""

    role: str

    def __init__(self, name: str, settings: CaptureSettings) -> None:
        self.name = name
        self.settings = settings

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        shipped = local_bundle()
        return (
            materialize,
            (shipped.package, shipped.files, self.role, asdict(self.settings)),
        )


class ShippedSchedulerPlugin(_Shipped, SchedulerPlugin):
    role = "scheduler"
    # Registering again must not replace (and so reset) a plugin that another
    # recorder, in this kernel or another one, is using.
    idempotent = True


class ShippedWorkerPlugin(_Shipped, WorkerPlugin):
    role = "worker"
    idempotent = True


class ShippedNannyPlugin(_Shipped, NannyPlugin):
    role = "nanny"
    idempotent = True
    restart = False  # registering must not restart the workers


def _pickle_this_module_by_value() -> None:
    """distributed pickles an object with cloudpickle when its module is
    registered by value; cloudpickle then ships :func:`materialize` and
    :func:`flush_shipped` as code, not as a reference to a module the cluster
    lacks; and so the bundle's importer, which :func:`materialize` calls."""
    import cloudpickle

    for name in (__name__, import_bundle.__module__):
        if name not in cloudpickle.list_registry_pickle_by_value():
            cloudpickle.register_pickle_by_value(sys.modules[name])


def register(client: Client, settings: CaptureSettings) -> None:
    """Register the scheduler, worker and nanny plugins on the client's cluster.

    Raises whatever registration raises (a scheduler that refuses plugins, a
    worker whose setup failed), or ``RuntimeError`` when the cluster has not
    taken them within ``answer-timeout``: the caller decides what a failure
    means.
    """
    _pickle_this_module_by_value()
    bound = answer_timeout()
    deadline = time.monotonic() + bound
    # The scheduler's first: the others ship to it as soon as they are set up.
    plugin = ShippedSchedulerPlugin(SCHEDULER_PLUGIN, settings)
    _within(bound, deadline, client, plugin)
    # The scheduler hands each of these to every process of its kind and answers
    # when all have it: two round trips to the whole cluster, taken at once
    # (a first recorded block waited ~20 ms for each, one after the other).
    _within(
        bound,
        deadline,
        client,
        ShippedWorkerPlugin(WORKER_PLUGIN, settings),
        ShippedNannyPlugin(NANNY_PLUGIN, settings),
    )


def _within(bound: float, deadline: float, client: Client, *shipped: _Shipped) -> None:
    """Register each plugin, at once, by a thread of its own; wait for them
    until ``deadline`` (``bound`` after the first began). The scheduler
    answers a worker plugin's registration once every worker has it: a
    worker stopped, or its event loop held, kept the start of a run (the
    very run meant to say why the cluster hangs) waiting for good. Past the
    deadline they go on in the background (daemon threads: an executor's
    would hold the interpreter's exit), and a later run finds them taken."""
    outcomes: dict[str, BaseException | None] = {}

    def register_one(plugin: _Shipped) -> None:
        try:
            _register_one(client, plugin)
            outcomes[plugin.role] = None
        except BaseException as e:
            outcomes[plugin.role] = e

    threads = [
        threading.Thread(
            target=register_one,
            args=(plugin,),
            name=f"dask-observe-register-{plugin.role}",
            daemon=True,
        )
        for plugin in shipped
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    for plugin in shipped:
        if plugin.role not in outcomes:
            raise RuntimeError(
                f"the {plugin.role} plugin was not taken within {bound:g} s, as a"
                f" {plugin.role} that is stopped or whose event loop is held does"
                " not answer"
            )
        failed = outcomes[plugin.role]
        if failed is not None:
            raise failed


def _register_one(client: Client, plugin: _Shipped) -> None:
    try:
        client.register_plugin(plugin)  # type: ignore[arg-type]
    except Exception as e:
        # What distributed raises can be obscure (a scheduler without the
        # handler answers None, and the client fails reading it): say which.
        raise RuntimeError(
            f"the {plugin.role} plugin was refused: {type(e).__name__}: {e}"
        ) from e


def hello(client: Client) -> dict[str, Any] | None:
    """What capture runs on the client's scheduler (see
    :func:`capture_on_scheduler`). Asked with a function rather than by calling
    the plugin's handler: a scheduler without it would log a warning with a
    traceback into the user's logs."""
    backlog = parse_seconds(get("recorder.backlog") or 0)
    # A scheduler in this process (a LocalCluster's) is asked on its loop:
    # ``run_on_scheduler`` pickled this module's functions by value for it,
    # and its environment is this process's, read after the block
    # (``environment.cluster_environment``): ~10 ms of a first recorded block.
    address = str(getattr(client.scheduler, "address", ""))
    scheduler = link.local_scheduler(client, address)
    loop = link.scheduler_loop(scheduler)
    if loop is not None:
        asked = capture_on_scheduler(scheduler, backlog_s=backlog, environment=False)
        said = asyncio.run_coroutine_threadsafe(asked, loop)
        here = said.result(timeout=link.answer_timeout())
        return None if here is None else {**here, "in_process": True}
    _pickle_this_module_by_value()
    asked_at = time.time()
    found: dict[str, Any] | None = client.run_on_scheduler(
        capture_on_scheduler, backlog_s=backlog, callback_timeout=link.answer_timeout()
    )
    if found is None:
        return None
    # When it was asked and answered here: where the scheduler's clock is
    # against this one (``Recorder.clock_offset``).
    return {**found, "asked_at": asked_at, "answered_at": time.time()}


def profiles(client: Client, start: float, prefixes: list[str]) -> dict[str, Any]:
    """The cluster's profile since ``start`` (see :func:`profiles_since`), each
    tree merged over the workers."""
    from distributed import profile

    _pickle_this_module_by_value()
    found = client.run(
        profiles_since,
        start,
        prefixes,
        on_error="return",
        callback_timeout=answer_timeout(),
    )
    per_worker = [trees for trees in found.values() if isinstance(trees, dict)]
    return {
        key: profile.merge(*(trees[key] for trees in per_worker))
        for key in ["", *prefixes]
    }


async def native_profile_on(
    name: str, token: str, rate: int | None, dask_worker: Any
) -> dict[str, Any]:
    """Run on a worker (``Client.run``): start (``rate`` samples a second) or,
    with ``rate`` None, stop and answer the native profile of run ``token``
    (see the capture's ``nativeprofile``). Off the event loop: py-spy takes
    a moment to start and to write what it recorded."""
    plugin = dask_worker.plugins.get(name)
    if rate is None:
        stop = getattr(plugin, "native_profile_stop", None)
        return await asyncio.to_thread(stop, token) if stop is not None else {}
    start = getattr(plugin, "native_profile_start", None)
    if start is None:
        return {"reason": "this worker's dask-observe capture cannot record one"}
    return dict(await asyncio.to_thread(start, token, rate))


def native_profile(
    client: Client, token: str, rate: int | None
) -> dict[str, dict[str, Any]]:
    """Each worker's answer to :func:`native_profile_on` (a worker that failed
    is left out)."""
    _pickle_this_module_by_value()
    answers = client.run(
        native_profile_on,
        WORKER_PLUGIN,
        token,
        rate,
        on_error="return",
        callback_timeout=answer_timeout(),
    )
    return {w: a for w, a in answers.items() if isinstance(a, dict)}


def flush(
    client: Client,
    workers: list[str] | None = None,
    *,
    ship: bool = True,
    timeout: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Have every worker (with a heartbeat: it carries the fine performance
    metrics measured since the last one) and every nanny ship what it holds.
    Returns what each worker says of itself (see :func:`flush_shipped`).

    With ``ship`` False, only that: what the given ``workers`` (all: None) say
    of themselves, nothing shipped, within ``timeout`` seconds (TimeoutError)."""
    _pickle_this_module_by_value()
    bound: dict[str, Any] = {} if timeout is None else {"callback_timeout": timeout}
    # ``callback_timeout`` is Client.sync's, through which Client.run passes
    # what it does not take itself; a worker that fails is left out.
    answers = client.run(
        flush_shipped,
        WORKER_PLUGIN if ship else "",
        heartbeat=ship,
        workers=workers,
        on_error="return",
        **bound,
    )
    if ship:
        client.run(flush_shipped, NANNY_PLUGIN, nanny=True, **bound)
    return {
        str(worker): found
        for worker, found in answers.items()
        if isinstance(found, dict) and "memory" in found
    }

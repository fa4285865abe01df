"""Fixtures shared by tests/ and ui-tests/: real LocalClusters, a store per test."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dask.config
import pytest
from distributed import Client, LocalCluster

#: tests.hung: a process whose test hung fails its later tests at once;
#: tests.turns: no timing test beside one marked ``alone``.
pytest_plugins = ["pytest_jupyter.jupyter_server", "tests.hung", "tests.turns"]


def _hold_off_the_collector_in_current_frames() -> None:
    """In-process workers' profilers call ``sys._current_frames`` every 10 ms
    in this process, where distributed's GC diagnosis has a gc callback: on
    Pythons before 3.11.9 (this machine's 3.11.7) a collection inside it can
    deadlock with a thread starting (CPython gh-106883). It hung CI once: a
    P2P shuffle's pyarrow threads, four worker threads and the profiler all
    waiting for the GIL, out of reach of the tests' timeout. Guarded as our
    own capture guards its calls (``capture.stacks.guard_frames``), for every
    caller in this process."""
    import sys

    from dask_observe.capture.stacks import guard_frames

    sys._current_frames = guard_frames(sys._current_frames)


_hold_off_the_collector_in_current_frames()


@pytest.fixture(scope="session", autouse=True)
def _workers_forked_from_a_server() -> None:
    """The worker processes of this process's LocalClusters are forked from
    one server that imported distributed and its dependencies once
    (``distributed.worker.multiprocessing-method: forkserver``, which
    distributed's own code says "makes the test suite much faster"), not
    spawned as new interpreters that each import them again. A two-worker
    cluster starts in 0.16 s rather than 0.66; the suite's ~70 worker
    processes spent ~85 s importing (py-spy, 2026-11-28), on 2 cores that
    its tests keep busy. The processes a user starts (kernels, ``dask
    worker``, the CLI, the demo) keep distributed's default, spawn.

    The server starts here, before any test: with the environment a nanny
    sets before it spawns a worker (``distributed.nanny.pre-spawn-environ``:
    the malloc trim threshold the memory tests rely on, one BLAS thread) and
    with no test's environment (a worker forked from it has the server's
    environment, not the test's: a test gives its workers variables by the
    nanny's ``env``, as users do). ``DASK_OBSERVE_TEST_SPAWN=1`` spawns them
    as distributed does by default (to tell whether a failure is this)."""
    import multiprocessing.forkserver
    import os

    from distributed.utils import get_mp_context

    if os.environ.get("DASK_OBSERVE_TEST_SPAWN"):
        return
    dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
    get_mp_context()  # names the modules the server imports
    spawn_env = dask.config.get("distributed.nanny.pre-spawn-environ")
    before = dict(os.environ)
    os.environ.update({k: str(v) for k, v in spawn_env.items() if v is not None})
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        os.environ.clear()
        os.environ.update(before)


@pytest.fixture
def store_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh store location, made the configured default (as a user would).

    dask reads environment variables once, at import: this process is configured with
    ``dask.config.set``, the processes it starts with ``DASK_OBSERVE__STORE``.
    """
    path = tmp_path / "observe-store" / "observe.sqlite"
    monkeypatch.setenv("DASK_OBSERVE__STORE", str(path))
    with dask.config.set({"observe.store": str(path)}):
        yield path


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    """Two single-threaded workers shared by a module's tests, reached over
    TCP (kernels, scripts and CLI processes connect to it too).

    Threads of the test's process, unless the module is marked
    ``worker_processes``: then processes with nannies, as a notebook user's
    ``LocalCluster()`` has them. In-process is what most tests need (a run
    recorded, read and shown) and costs half: an idle cluster of two worker
    processes takes ~0.105 CPU-second a second (their event loops' ticks,
    heartbeats, profilers, GIL monitors and nannies), one of threads ~0.059
    (measured side by side, 20 s each, 2026-11-30), and the suite keeps three
    alive at a time: the README's command used 611 CPU-seconds, not 682
    (forked workers 108, not 154; every process's CPU read from /proc, one
    run each, 2026-11-30). The timing modules keep processes: their verdicts
    (GIL contention, a busy host, memory limits) were judged on them; so do
    the notebooks', whose truths (no flag, the naps' time is waiting) are of
    workers that the test process, busy with the suite, does not hold. Per
    module, not per session: an idle cluster's cost beside a module that does
    not use it was ~40 CPU-seconds of the suite (2026-11-29)."""
    processes = request.node.get_closest_marker("worker_processes") is not None
    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        dashboard_address=":0",
        processes=processes,
        protocol="tcp",
    ) as cluster:
        yield cluster


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster, set_as_default=True) as client:
        yield client


@pytest.fixture
def make_client() -> Iterator[Callable[..., Client]]:
    """Make a client on a LocalCluster of the test's own: ``make_client(n_workers=1,
    processes=False)`` takes LocalCluster's arguments (no dashboard port by default).
    Both are closed after the test, in the reverse order."""
    with contextlib.ExitStack() as stack:

        def make(**cluster: Any) -> Client:
            started = LocalCluster(**{"dashboard_address": ":0", **cluster})
            client: Client = stack.enter_context(Client(stack.enter_context(started)))
            return client

        yield make


#: Groups of tests, marked by where they live: the slow ones, so that a quick
#: run can leave them out (``-m "not browser and not remote and not
#: packaging"``; the README's test command and CI run them all), and those
#: that must run alone (``timing``, see scripts/test.sh).
GROUPS = {
    "browser": ("ui-tests/",),
    "remote": ("tests/test_remote.py",),
    "packaging": ("tests/test_packaging.py",),
    # Verdicts that depend on the machine's load (a stall judged against the
    # host's, a regression from timings): scripts/test.sh runs these apart
    # from the rest, two at a time, those marked ``alone`` with nothing
    # beside them (tests/turns.py). Elsewhere a test says so itself
    # (``@pytest.mark.timing``: a flood's answer times, a profile's shares).
    # Not test_hangs.py: its verdicts read the scheduler's state and the
    # tasks' stacks, not timings; 5 of 5 runs passed beside 2-3 processes that
    # only computed (2026-11-27), where running it alone cost the suite 38 s.
    "timing": ("tests/test_flags.py", "tests/test_compare.py"),
}


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Mark the slow groups (GROUPS); refuse a run of the whole suite in which
    a suite collected no test.

    pytest exits 5 only when nothing at all is collected; a suite that silently lost
    its tests (an import error hidden by a skip, a renamed folder) must fail too.
    """
    root = config.rootpath
    for item in items:
        where = item.path.relative_to(root).as_posix()
        for marker, prefixes in GROUPS.items():
            if where.startswith(prefixes):
                item.add_marker(marker)
        if item.get_closest_marker("alone") and not item.get_closest_marker("timing"):
            # Outside the timing group it would run beside the whole suite.
            raise pytest.UsageError(f"{item.nodeid} is marked alone, not timing")
    invoked = {(root / arg).resolve() for arg in config.args}
    for suite in config.getini("testpaths"):
        folder = (root / suite).resolve()
        if folder in invoked and not any(
            item.path.is_relative_to(folder) for item in items
        ):
            raise pytest.UsageError(f"the {suite}/ suite collected no tests")

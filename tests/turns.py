"""Who runs when: the ``timing`` tests first, two at a time, none beside one
marked ``alone``, then the rest of the suite, in one pytest-xdist session.

The ``timing`` tests judge what they measure against the machine's load
(stalls, GIL contention, a regression from timings), so they do not run
beside the rest of the suite (``scripts/test.sh``). Most of them leave a core
idle (they wait on naps, heartbeats, samplers): two at a time, each sees the
other's cluster as load it tolerates, as the flags are built to (five runs of
the whole group two at a time passed, 2026-11-29). Those marked ``alone``
load the machine on purpose (processes spinning, a flood of lines, threads
fighting for the GIL), or judge what one more busy process would change (an
example's GIL contention read 0.3-0.75 from pass to pass, alone): they wait
until no other timing test runs, and none starts beside them.

Three parts:

- A readers-writer lock between the test processes, with ``flock`` files in
  the run's temporary folder: ordinary timing tests hold ``room`` shared, an
  ``alone`` one holds it exclusively; ``turnstile`` lets an ``alone`` test
  that waits keep new ones from entering, so it is not starved.
- The scheduler (``TimingFirst``, for ``--dist loadscope``): each timing test
  is a unit of its own, handed out before anything else, to two test
  processes only, those marked ``alone`` first (among the others, each of
  them waited for the test beside it to end: 93-98 s for the timing tests
  alone against 103-104, 2026-11-29); the rest go a module at a time,
  longest first.
- A barrier: a test process starts a test that is not a timing test only
  when the scheduler says every timing test is done.

Two sessions one after the other (the timing tests, then the rest) did the
same with a second controller and two more test processes starting (~8 s:
what a pytest-xdist session of two processes and no test to run takes here).
Outside pytest-xdist nothing runs beside a test, nothing is locked, and the
timing tests still come first.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController


@pytest.fixture(autouse=True)
def _timing_tests_take_turns(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    node = request.node
    if "PYTEST_XDIST_WORKER" not in os.environ or not node.get_closest_marker("timing"):
        yield
        return
    # A worker's basetemp is popen-gwN in the folder of its run, not another's.
    folder = tmp_path_factory.getbasetemp().parent
    alone = node.get_closest_marker("alone") is not None
    with (
        open(folder / "timing-turnstile", "a") as turnstile,
        open(folder / "timing-room", "a") as room,
    ):
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)


#: The test processes that run timing tests (TimingFirst hands them to the
#: first two only): two at a time is what their verdicts were tried at.
TIMING_PROCESSES = 2


#: Where the test processes tell the controller which tests are timing tests
#: (a folder of the controller's, named in each worker's ``workerinput``).
TIMING_KEY = "dask_observe_timing"
_FOLDER = pytest.StashKey[Path]()
_SCHEDULER = pytest.StashKey["TimingFirst"]()
#: A worker holds a test that is not a timing test until the scheduler says
#: every timing test is done. Not for ever: a timing test that hangs fails at
#: pytest-timeout's 120 s, and then the rest may go on.
DONE, DONE_WAIT_S = "timing-done", 100.0


def _timing_folder(config: pytest.Config) -> str | None:
    """The controller's folder, in a test process run by TimingFirst."""
    folder: str | None = getattr(config, "workerinput", {}).get(TIMING_KEY)
    return folder


@pytest.hookimpl(trylast=True)  # after -m/-k deselected what does not run
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """The timing tests first, those marked ``alone`` first of them (one after
    the other: each waits only for the one before, where one among the
    others waited for the test beside it to end); their node ids to the
    controller's scheduler, which sees ids only."""
    items.sort(
        key=lambda item: (
            item.get_closest_marker("timing") is None,
            item.get_closest_marker("alone") is None,
        )
    )
    folder = _timing_folder(config)
    if folder is not None:
        timing = [item.nodeid for item in items if item.get_closest_marker("timing")]
        worker = config.workerinput["workerid"]  # type: ignore[attr-defined]
        written = Path(folder) / f"{worker}.tmp"
        written.write_text("".join(f"{nodeid}\n" for nodeid in timing))
        # Whole or not at all: the controller reads it when this worker's
        # collection arrives, which is sent after this hook.
        written.replace(Path(folder) / f"{worker}.timing")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    config: pytest.Config = node.config
    if config.getvalue("dist") != "loadscope":
        return  # no TimingFirst to say when the timing tests are done
    if _FOLDER not in config.stash:
        config.stash[_FOLDER] = Path(tempfile.mkdtemp(prefix="dask-observe-turns-"))
    node.workerinput[TIMING_KEY] = str(config.stash[_FOLDER])


def pytest_unconfigure(config: pytest.Config) -> None:
    if _FOLDER in config.stash:
        shutil.rmtree(config.stash[_FOLDER], ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadscope" or _FOLDER not in config.stash:
        return None
    scheduler = config.stash[_SCHEDULER] = TimingFirst(
        config, log, config.stash[_FOLDER]
    )
    return scheduler


#: Each module's seconds in the last run that wrote them (``TEST_SECONDS=write
#: bash scripts/test.sh``): the longest modules are handed out first, so that
#: none starts as the others end (a 20 s browser test did, last of all, when
#: modules went by their number of tests).
SECONDS = Path(__file__).with_name("seconds.json")
#: A module not in SECONDS yet: this much for each of its tests.
UNKNOWN_TEST_S = 1.0


class TimingFirst(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
    """``--dist loadscope``, but each timing test is a unit of its own, handed
    out before any other unit and to the first TIMING_PROCESSES test
    processes only; the other units go longest first (SECONDS). When every
    timing test has finished (run, or lost with a crashed worker), it says so
    in ``DONE``, which a test process waits for before any other test (it may
    be handed one while the other process runs the last timing tests)."""

    def __init__(self, config: pytest.Config, log: Any, folder: Path) -> None:
        super().__init__(config, log)
        self.folder = folder
        self.timing: set[str] = set()
        self.timing_left: set[str] = set()
        self.expected: dict[str, float] = (
            json.loads(SECONDS.read_text()) if SECONDS.exists() else {}
        )
        #: What each unit took in this run, but the timing tests'.
        self.took: dict[str, float] = {}

    def schedule(self) -> None:
        if self.collection is None:  # the first call: every collection is in
            for written in self.folder.glob("*.timing"):
                self.timing.update(written.read_text().splitlines())
            self.timing_left = set(self.timing)
            if not self.timing:
                (self.folder / DONE).touch()
        super().schedule()

    def _split_scope(self, nodeid: str) -> str:
        return nodeid if nodeid in self.timing else super()._split_scope(nodeid)

    def _assign_work_unit(self, node: WorkerController) -> None:
        if self.timing_left and node not in self.nodes[:TIMING_PROCESSES]:
            # A third test process would start its clusters, browser and
            # servers beside the two timing tests (one failed so): it is
            # handed its first tests when they are all done (_finished).
            return

        def cost(scope: str) -> float:
            if scope in self.timing:
                return float("inf")
            unit = self.workqueue[scope]
            return self.expected.get(scope, UNKNOWN_TEST_S * len(unit))

        # The first of equals: the timing tests in their order.
        self.workqueue.move_to_end(max(self.workqueue, key=cost), last=False)
        super()._assign_work_unit(node)

    def mark_test_complete(
        self, node: WorkerController, item_index: int, duration: float = 0
    ) -> None:
        super().mark_test_complete(node, item_index, duration)
        nodeid = self.registered_collections[node][item_index]
        if nodeid not in self.timing:
            scope = self._split_scope(nodeid)
            self.took[scope] = self.took.get(scope, 0.0) + duration
        self._finished(nodeid)

    def remove_node(self, node: WorkerController) -> str | None:
        """A test process that ended: at shutdown, or crashed in a test.

        ``--dist loadscope`` puts every unit the crashed process was handed
        back in the queue: the test it crashed in, which then ran again in
        each replacement (twelve crashes on three processes, until no
        replacement was left), and the units it had finished, which timing
        tests are (one test each). Those went first (their cost), so each
        process was handed an empty unit, and waited for the end of a test
        it was never given: the session hung for good (a CI run's Python
        3.12 group, 2026-12-01, after a segmentation fault). Here only what
        is left to run goes back; the crashed test is reported failed (by
        pytest-xdist) and not run again."""
        crashed = next(
            (
                nodeid
                for unit in self.assigned_work.get(node, {}).values()
                for nodeid, completed in unit.items()
                if not completed
            ),
            None,
        )
        work = self.assigned_work.get(node, {})
        if crashed is not None:
            work[self._split_scope(crashed)][crashed] = True
        for scope in [scope for scope, unit in work.items() if all(unit.values())]:
            del work[scope]
        super().remove_node(node)  # the rest of its tests queued again
        if crashed is not None:
            self._finished(crashed)
        return crashed

    def _finished(self, nodeid: str) -> None:
        if nodeid in self.timing_left:
            self.timing_left.discard(nodeid)
            if not self.timing_left:
                (self.folder / DONE).touch()
                for node in self.nodes:
                    self._reschedule(node)


def pytest_sessionfinish(session: pytest.Session) -> None:
    scheduler = session.config.stash.get(_SCHEDULER, None)
    if scheduler is not None and os.environ.get("TEST_SECONDS") == "write":
        took = {scope: round(s, 1) for scope, s in sorted(scheduler.took.items())}
        SECONDS.write_text(json.dumps(took, indent=0) + "\n")


@pytest.hookimpl(tryfirst=True)  # before its fixtures (a module's cluster, say)
def pytest_runtest_setup(item: pytest.Item) -> None:
    folder = _timing_folder(item.config)
    if folder is None or item.get_closest_marker("timing"):
        return
    done = Path(folder) / DONE
    deadline = time.monotonic() + DONE_WAIT_S
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)

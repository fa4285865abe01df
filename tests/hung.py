"""A pytest plugin (root conftest.py loads it): after a test of a process
hung, that process's later tests fail at once, naming it."""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from collections.abc import Generator

import psutil
import pytest

#: The test of this process that ran out of pytest-timeout's time, if any.
_hung: list[str] = []

#: Seconds the process of a test that hung has left to end. Its later tests
#: fail at once; what may still hang is the teardown of its fixtures (a
#: session's cluster whose scheduler's loop is stuck), which pytest-timeout
#: bounds once per test: a CI run's worker hung so in the second fixture it
#: closed, 2026-11-29, and the run waited on it until CI's limit.
EXIT_AFTER_S = float(os.environ.get("DASK_OBSERVE_TEST_HUNG_EXIT_S", "180"))

_config: list[pytest.Config] = []


def pytest_configure(config: pytest.Config) -> None:
    _config.append(config)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if (
        call.excinfo is not None
        and call.excinfo.errisinstance(pytest.fail.Exception)
        and "from pytest-timeout" in str(call.excinfo.value)
    ):
        _hung.append(item.nodeid)
        report.sections.append(("processes when it hung", processes()))
        _exit_later(report)
    return report


def _exit_later(report: pytest.TestReport) -> None:
    """Past ``EXIT_AFTER_S``, print the hung test's report and every thread's
    stack to the process's stderr, and end the process: pytest would print
    the report only at a session's end that does not come (pytest-xdist's
    controller, which has it already, then says the worker crashed and
    finishes the run)."""

    def watch() -> None:
        time.sleep(EXIT_AFTER_S)
        # pytest holds the process's stderr (its file descriptor) for the
        # test's report, which will not come: give it back first.
        capture = _config[0].pluginmanager.getplugin("capturemanager")
        if capture is not None:
            capture.suspend_global_capture(in_=False)
        out = sys.__stderr__
        assert out is not None
        out.write(
            f"\n{report.nodeid} hung, and its process had not ended"
            f" {EXIT_AFTER_S:g} s later: it exits now. The hung test's report:\n"
            f"{report.longreprtext}\n"
        )
        for title, text in report.sections:
            out.write(f"---- {title}\n{text}\n")
        out.write("---- every thread of the process now\n")
        out.flush()
        faulthandler.dump_traceback(out, all_threads=True)
        out.flush()
        os._exit(3)

    threading.Thread(target=watch, name="hung-exit", daemon=True).start()


def processes() -> str:
    """This process's children as they were when its test hung (a worker
    busy or not, a server gone): the threads' stacks say what the test
    waited for, not what kept it waiting."""
    lines = []
    for child in psutil.Process().children(recursive=True):
        try:
            with child.oneshot():
                cpu = sum(child.cpu_times()[:2])
                age = time.time() - child.create_time()
                said = " ".join(child.cmdline())[:160]
                lines.append(
                    f"{child.pid:>7} {child.status():<9} cpu {cpu:7.1f} s,"
                    f" up {age:7.1f} s: {said}"
                )
        except psutil.Error:  # gone meanwhile
            continue
    return "\n".join(lines) or "(none)"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """After a test of this process hung, the process's later tests fail at
    once, naming it, rather than each waiting out pytest-timeout's time in
    turn: what it left stuck (a thread holding a lock, a wedged shared
    cluster) is this process's for good. A fresh-clone CI run hung so,
    2026-11-28 (Python 3.12 or 3.13): 14 tests timing out one after another
    at 300 s each, until CI's own limit cut the run off before pytest could
    print a single report. Now the run ends, and the hung test's report
    holds every thread's stack (pytest-timeout prints them with it). The
    next hang (2026-11-29, Python 3.12) was a deadlock in the capture: a
    garbage collection's finalizer logging into the buffer it interrupted
    (``DropCountingBuffer``, mended)."""
    if _hung:
        pytest.fail(
            f"not run: {_hung[0]} hung earlier in this process (its report"
            " has every thread's stack); what it left stuck hangs the rest",
            pytrace=False,
        )

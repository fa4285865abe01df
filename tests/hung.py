"""A pytest plugin (root conftest.py loads it): after a test of a process
hung, that process's later tests fail at once, naming it."""

from __future__ import annotations

import time
from collections.abc import Generator

import psutil
import pytest

#: The test of this process that ran out of pytest-timeout's time, if any.
_hung: list[str] = []


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
    return report


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
    2026-11-28 (Python 3.12 or 3.13, not seen again in nine runs since): 14
    tests timing out one after another at 300 s each, until CI's own limit
    cut the run off before pytest could print a single report. Now the run
    ends, and the hung test's report holds every thread's stack
    (pytest-timeout prints them with it)."""
    if _hung:
        pytest.fail(
            f"not run: {_hung[0]} hung earlier in this process (its report"
            " has every thread's stack); what it left stuck hangs the rest",
            pytrace=False,
        )

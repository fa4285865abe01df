"""The suite's own guard against a hang (tests/hung.py), run as pytest runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent

STUCK = """
import os
import subprocess
import sys
import threading

#: What a hung test leaves behind: a lock nobody will release, and a thread
#: that waits for it too.
held = threading.Lock()
held.acquire()


def waiter():
    with held:
        pass


threading.Thread(target=waiter, daemon=True).start()
#: And a process it started (which ends with this one), that the report lists:
#: up before the tests start (a Python starting on a busy host may take more
#: than the test's 1 s to reach its loop; the suite once missed it asleep).
NAP = (
    "import os, time\\nprint('up', flush=True)\\n"
    f"while os.getppid() == {os.getpid()}: time.sleep(0.05)"
)
child = subprocess.Popen([sys.executable, "-c", NAP], stdout=subprocess.PIPE)
child.stdout.readline()


def test_first():
    held.acquire()


def test_second():
    held.acquire()


def test_third():
    held.acquire()
"""


def run_pytest(
    folder: Path, source: str, *options: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """pytest, with the plugin and a 1 s timeout, on ``source`` as a test file."""
    (folder / "test_stuck.py").write_text(source)
    plugins = ["-p", "tests.hung", "-p", "no:cacheprovider"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *plugins, "-o", "timeout=1", *options, "."],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_after_a_test_hangs_the_processs_later_tests_fail_at_once_naming_it(
    tmp_path: Path,
) -> None:
    done = run_pytest(tmp_path, STUCK, "-rA")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    # The first waits out its time; its report says where, and where every
    # other thread of the process was.
    assert "FAILED test_stuck.py::test_first - Failed: Timeout (>1.0s)" in out, out
    assert "def test_first():\n>       held.acquire()\nE       Failed: Timeout" in out
    assert ", in waiter\n    with held:" in out  # the other thread's stack
    assert "processes when it hung" in out
    # Its state as the report was taken: asleep in its loop, or woken and
    # waiting for a core on a busy host.
    assert re.search(
        r"\d+ (sleeping|running) +cpu +[0-9.]+ s, up +[0-9.]+ s: \S+ -c import os",
        out,
    ), out
    # The others do not wait their turn: they say which test hung before them.
    said = (
        "not run: test_stuck.py::test_first hung earlier in this process (its"
        " report has every thread's stack); what it left stuck hangs the rest"
    )
    # Counted in the errors' section: the short summary repeats each reason,
    # whole where CI is set (pytest cuts it to the terminal's width elsewhere).
    errors = out.partition(" ERRORS ")[2].partition(" FAILURES ")[0]
    for later in ("test_second", "test_third"):
        assert f"ERROR at setup of {later} _" in errors, out
    assert errors.count(said) == 2, out


STUCK_IN_TEARDOWN = """
import threading

import pytest

held = threading.Lock()
held.acquire()


@pytest.fixture(scope="session")
def first_cluster():
    yield
    held.acquire()  # its close waits on what hung


@pytest.fixture(scope="session")
def second_cluster():
    yield
    held.acquire()


def test_first(first_cluster, second_cluster):
    held.acquire()
"""


def test_a_process_whose_fixtures_hang_as_they_close_after_a_hang_ends_saying_so(
    tmp_path: Path,
) -> None:
    # pytest-timeout bounds a test's teardown once: the second fixture to
    # close waits for good (a CI run's worker did, on its session's cluster).
    done = run_pytest(
        tmp_path, STUCK_IN_TEARDOWN, env={"DASK_OBSERVE_TEST_HUNG_EXIT_S": "3"}
    )
    assert done.returncode == 3, done.stdout + done.stderr
    said = done.stderr
    assert (
        "test_stuck.py::test_first hung, and its process had not ended 3 s later:"
        " it exits now. The hung test's report:\n"
    ) in said, said
    assert "E       Failed: Timeout (>1.0s) from pytest-timeout." in said
    assert "---- processes when it hung" in said
    # Where each thread stood: the main one in the second fixture's close.
    assert re.search(r"line 1[89] in second_cluster", said), said

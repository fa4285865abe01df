"""The timing tests' turns (tests/turns.py), run as scripts/test.sh runs them:
first, those marked ``alone`` first and by themselves, the others two at a
time, then the rest."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent

#: What the tests below share: each logs when it ran. ``meet`` waits for the
#: other test process's ``meet``: it passes only if two ordinary timing tests
#: run at once.
TIMED = """
import json, os, time
from pathlib import Path

LOG = Path(os.environ["TURNS_LOG"])


def ran(name, seconds):
    start = time.monotonic()
    time.sleep(seconds)
    with LOG.open("a") as log:
        log.write(json.dumps([name, start, time.monotonic()]) + "\\n")


def meet(me, other):
    (LOG.parent / me).touch()
    deadline = time.monotonic() + 20
    while not (LOG.parent / other).exists():
        assert time.monotonic() < deadline, "the other test never ran beside me"
        time.sleep(0.01)
    ran(me, 0.2)
"""

#: The timing tests, each handed out on its own: the two marked ``alone``
#: first (each test process is handed one of them, and one waits for the
#: other), then two that meet; the last is long, so that the other process is
#: handed the rest while it runs.
TIMING = """
import pytest
from timed import meet, ran

pytestmark = pytest.mark.timing


@pytest.mark.parametrize("me, other", [("a", "b"), ("b", "a")])
def test_meet(me, other):
    meet(me, other)


@pytest.mark.alone
@pytest.mark.parametrize("n", range(2))
def test_alone(n):
    ran(f"alone {n}", 1.0)


@pytest.mark.parametrize("n", range(6))
def test_short(n):
    ran(f"short {n}", 0.3)


def test_last():  # the other process's tests are done long before
    ran("last", 1.5)
"""

#: The rest of the suite, two modules collected before the timing tests (so
#: that two processes have one each): they may start only when those are all
#: done.
REST = """
import pytest
from timed import ran


@pytest.mark.parametrize("n", range(2))
def test_rest(n):
    ran(f"rest {__name__} {n}", 0.3)
"""


def session(
    folder: Path, log: Path, processes: int, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """A pytest-xdist session of the test modules in ``folder``, as
    scripts/test.sh runs the suite (--dist loadscope, tests/turns.py), each
    test logging to ``log`` when it ran."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist", "-p", "tests.turns",
         "-o", "markers=timing\nalone", "-q", "-n", str(processes),
         "--dist", "loadscope", *args, "."],
        cwd=folder,
        # Only the two plugins: this process's others take seconds to import.
        # (Nor does it write the suite's module seconds, tests/turns.py.)
        env={
            **{k: v for k, v in os.environ.items() if k != "TEST_SECONDS"},
            "PYTHONPATH": str(ROOT),
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            "TURNS_LOG": str(log),
        },
        capture_output=True,
        text=True,
        timeout=timeout,
    )  # fmt: skip


@pytest.mark.parametrize("processes", [2, 3])
def test_timing_tests_run_two_at_a_time_first_none_beside_alone_or_the_rest(
    tmp_path: Path, processes: int
) -> None:
    for name, source in [
        ("timed", TIMED),
        ("test_a_rest", REST),
        ("test_a_rest_too", REST),
        ("test_b_timing", TIMING),
    ]:
        (tmp_path / f"{name}.py").write_text(source)
    log = tmp_path / "ran.jsonl"
    done = session(tmp_path, log, processes)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = {name: (start, end) for name, start, end in map(json.loads, log.open())}
    assert len(ran) == 15
    for alone in ("alone 0", "alone 1"):
        start, end = ran[alone]
        beside = [
            name
            for name, (s, e) in ran.items()
            if name != alone and s < end and e > start
        ]
        assert beside == [], f"ran beside {alone}: {beside}"
    # The alone tests first, though collected after two others.
    first = max(ran["alone 0"][1], ran["alone 1"][1]) <= ran["a"][0]
    assert first, "an ordinary timing test ran before the alone tests"
    rest = [ran.pop(name) for name in list(ran) if name.startswith("rest ")]
    assert len(rest) == 4
    # Never more than two timing tests at once, however many processes.
    edges = sorted(
        [(s, 1) for s, _ in ran.values()] + [(e, -1) for _, e in ran.values()]
    )
    at_once = max(itertools.accumulate(step for _, step in edges))
    assert at_once == 2, f"{at_once} timing tests ran at once"
    timing_ended = max(e for _, e in ran.values())
    early = [s for s, _ in rest if s < timing_ended]
    assert early == [], f"the rest started {timing_ended - min(early):.2f} s early"


#: A module whose second test crashes its test process (as a segmentation
#: fault in an extension would), between two that pass.
CRASHING = """
import os, signal
from timed import ran


def test_before():
    ran("before", 0.1)


def test_crashes():
    ran("crashes", 0.0)
    os.kill(os.getpid(), signal.SIGSEGV)


def test_after():
    ran("after", 0.1)
"""


def test_a_test_that_crashes_its_process_fails_once_and_the_rest_run(
    tmp_path: Path,
) -> None:
    """pytest-xdist replaces the crashed test process and reports the test
    failed; its module's other tests run in the replacement, the crashed one
    not again (it ran in every replacement, each crashing in turn, until
    none was left)."""
    for name, source in [
        ("timed", TIMED),
        ("test_a_rest", REST),
        ("test_crashing", CRASHING),
        ("test_b_timing", TIMING),
    ]:
        (tmp_path / f"{name}.py").write_text(source)
    log = tmp_path / "ran.jsonl"
    # ~6 s; it hung for good before.
    done = session(tmp_path, log, 2, "-p", "no:faulthandler", timeout=60)
    summary = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 1, done.stdout + done.stderr
    assert summary.startswith("1 failed, 15 passed"), done.stdout
    assert "crashed while running 'test_crashing.py::test_crashes'" in done.stdout
    ran = [json.loads(line)[0] for line in log.open()]
    assert ran.count("crashes") == 1, ran
    assert ran.count("before") == ran.count("after") == 1, ran

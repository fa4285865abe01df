"""The timing tests' turns (tests/turns.py), run as scripts/test.sh runs them:
two at a time, none beside one marked ``alone``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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

#: Two modules, one per test process (``--dist loadscope``, as the suite's).
#: Each meets the other; then the first's ``alone`` test comes while the
#: second still has tests to run.
FIRST = """
import pytest
from timed import meet, ran

pytestmark = pytest.mark.timing


def test_meet():
    meet("a", "b")


@pytest.mark.alone
def test_alone():
    ran("alone", 1.0)


@pytest.mark.parametrize("n", range(2))
def test_short(n):
    ran(f"first {n}", 0.3)
"""

SECOND = """
import pytest
from timed import meet, ran

pytestmark = pytest.mark.timing


def test_meet():
    meet("b", "a")


@pytest.mark.parametrize("n", range(4))
def test_short(n):
    ran(f"second {n}", 0.3)
"""


def test_two_timing_tests_run_at_once_but_none_beside_one_marked_alone(
    tmp_path: Path,
) -> None:
    for name, source in [
        ("timed", TIMED),
        ("test_first", FIRST),
        ("test_second", SECOND),
    ]:
        (tmp_path / f"{name}.py").write_text(source)
    log = tmp_path / "ran.jsonl"
    markers = ["-o", "markers=timing\nalone"]
    plugins = ["-p", "xdist", "-p", "tests.turns"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *plugins, *markers, "-q",
         "-n", "2", "--dist", "loadscope", "."],
        cwd=tmp_path,
        # Only the two plugins: this process's others take seconds to import.
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            "TURNS_LOG": str(log),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    ran = {name: (start, end) for name, start, end in map(json.loads, log.open())}
    assert len(ran) == 9
    start, end = ran.pop("alone")
    beside = [name for name, (s, e) in ran.items() if s < end and e > start]
    assert beside == [], f"ran beside the alone test: {beside}"

"""The watchdog beside each captured event loop (``capture.stalls``) leaves
with its capture. What it tells of a stall is judged on a real worker
(test_flags: a task's regular expression holding the GIL) and as written
telemetry (test_diagnose)."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dask_observe.capture import stacks, stalls
from dask_observe.capture.stalls import StallWatch

from .conftest import wait_until


def watchdogs() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "dask-observe-loop-watchdog"]


def test_the_watchdog_leaves_with_its_watch_stopped_or_dropped() -> None:
    before = len(watchdogs())
    stopped = StallWatch(0.1)
    dropped = StallWatch(0.1)
    assert len(watchdogs()) == before + 2
    stopped.stop()
    # A capture dropped without stop() (a worker closed past its teardown)
    # is not kept alive by its watchdog, which then ends.
    del dropped
    gc.collect()
    wait_until(lambda: len(watchdogs()) == before, "both watchdogs gone", 5)


#: A process whose thread ended, its stack unmapped at once (glibc keeps no
#: stack cache), then read through the watchdog's CPU clocks (or through
#: pthread_getcpuclockid, the hazard's control), printing what it read.
ENDED_THREAD = """
import sys, threading, time
from dask_observe.capture.stalls import threads_cpu

def mapped(address):
    with open("/proc/self/maps") as maps:
        for line in maps:
            low, high = (int(a, 16) for a in line.split()[0].split("-"))
            if low <= address < high:
                return True
    return False

spun = {}
def spin():
    end = time.thread_time() + 0.2
    while time.thread_time() < end:
        pass
    spun["read"] = threads_cpu([threading.get_ident()])[threading.get_ident()]
    spun["own"] = time.thread_time()

t = threading.Thread(target=spin)
t.start()
t.join()
# glibc unmaps an ended thread's stack as the next thread starts; that one's
# stack (larger: not in the hole) must not take the old one's place.
threading.stack_size(64 * 1024 * 1024)
for _ in range(20):
    other = threading.Thread(target=lambda: None)
    other.start()
    other.join()
    if not mapped(t.ident):
        break
else:
    sys.exit("the ended thread's stack stayed mapped")
if sys.argv[1] == "pthread":
    time.clock_gettime(time.pthread_getcpuclockid(t.ident))
print(spun["read"], spun["own"], threads_cpu([t.ident])[t.ident])
"""


def test_a_thread_that_ended_is_read_as_no_cpu_not_a_crash(tmp_path: Path) -> None:
    """The watchdog reads the CPU clocks of threads that may end meanwhile (a
    worker's executor threads as it closes): one seen in a look and gone by
    its read must not take the process (a worker) down with it."""
    script = tmp_path / "ended.py"
    script.write_text(ENDED_THREAD)
    env = {**os.environ, "GLIBC_TUNABLES": "glibc.pthread.stack_cache_size=0"}

    def run(how: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(script), how],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    # The control: the pthread handle of that ended thread kills the process,
    # so the setup does unmap its stack.
    assert run("pthread").returncode == -signal.SIGSEGV
    done = run("tid")
    assert done.returncode == 0, done.stderr
    read, own, ended = (float(x) for x in done.stdout.split())
    # While it ran, its clock read as the thread's own did.
    assert 0.2 <= read <= own
    assert ended == 0.0


@pytest.mark.timing  # a loop ticking on time: a host that starves it holds it
def test_the_watchdog_walks_the_loops_frames_only_while_the_loop_is_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Walking another thread's frames while it runs on can crash CPython
    3.11 (a segmentation fault in this walk, seen in the suite on 3.11.7):
    a loop that ticks on time is not walked; a held one is, and the
    watchdog still tells where it was held."""
    walked: list[int] = []
    real = stacks.where

    def where(frame: Any, limit: int = stalls.HELD_FRAMES) -> list[Any]:
        walked.append(1)
        return real(frame, limit)

    monkeypatch.setattr(stalls, "where", where)
    watch = StallWatch(0.05)  # made here: this thread is its loop's
    try:
        for _ in range(30):  # 1.5 s of a loop ticking on time
            time.sleep(0.05)
            watch.tick(time.time())
        free = len(walked)
        began = time.time()
        time.sleep(1.0)  # the loop held
        watch.tick(time.time())
        sample = watch.watchdog.held(began)
    finally:
        watch.stop()
    assert free == 0 and len(walked) > 0, (free, len(walked))
    assert sample is not None and sample["thread"] == "loop", sample
    names = [frame[2] for frame in sample["frames"]]
    assert (
        names[-1]
        == "test_the_watchdog_walks_the_loops_frames_only_while_the_loop_is_held"
    ), names

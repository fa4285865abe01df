"""Task functions of recorded runs, in a module that imports next to nothing.

A worker imports the module of a task's function on its event loop before it
runs it: a test module's imports (dask_observe, pandas, pytest) stalled a
fresh worker's loop past event-loop-blocked's tick at the lowest versions
pyproject.toml claims, and the run was flagged, rightly, for what it imported
(see ``load.spin``)."""

from __future__ import annotations

import ctypes
import gc
import logging
import mmap
import os
import signal
import sys
import time
from typing import Any


def chatter(n: int) -> int:
    """Log ``n`` lines with markup in them (never to be rendered as HTML)."""
    log = logging.getLogger("user.chatter")
    for i in range(n):
        log.warning("line %05d <script>alert(%d)</script>", i, i)
    return n


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def fail(x: int) -> int:
    raise RuntimeError(f"broken {x}")


def touched(nbytes: int) -> mmap.mmap:
    """``nbytes`` of memory of their own mapping, every page written with the
    GIL released (ctypes' memset); unmapped when the object goes.

    ``b"\\x01" * n`` holds the GIL while it writes, and a thread filling
    memory so starves the event loop's thread: its loop waited up to 0.44 s
    on a quiet host and 0.72 s beside six busy processes (64 MiB pieces with
    10 ms naps between them, as hold_memory's), against 4 ms for this; on CI,
    1.1 GB so took 6 s and the worker's loop stalled past a second, an
    event-loop-blocked that was true of the test's task, not of the workload
    it stood for. Not NumPy: it asks for huge pages for large arrays, and
    where the kernel compacts memory to find them (defrag "madvise", as
    here) 1.1 GB took 11 s to fill, against 1.3 s for this."""
    block = mmap.mmap(-1, nbytes)
    view = (ctypes.c_char * nbytes).from_buffer(block)
    ctypes.memset(view, 1, nbytes)
    del view  # its export would keep the mapping from closing
    return block


def eat_memory(line: str) -> None:
    """Say ``line``, then take memory until the nanny restarts the worker."""
    logging.getLogger("user.task").warning(line)
    chunks = []
    while True:  # until the nanny restarts this worker
        chunks.append(touched(50 * 2**20))
        time.sleep(0.02)


def spin(seconds: float) -> float:
    """Busy on the CPU for ``seconds`` of this thread's CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    return seconds


def say(line: str) -> str:
    """Log ``line`` as a task's own warning."""
    logging.getLogger("user.task").warning(line)
    return line


def leak(nbytes: int) -> None:
    """Hold ``nbytes`` where no task or spill can free them: unmanaged memory,
    touched."""
    import builtins

    builtins.dask_observe_leak = touched(nbytes)  # type: ignore[attr-defined]


def log_then_die(line: str) -> None:
    """Say ``line``, then die by SIGKILL: no code of the worker runs after it."""
    logging.getLogger("user.task").warning(line)
    time.sleep(0.5)  # "a process that dies a moment later"
    os.kill(os.getpid(), signal.SIGKILL)


def flood(n: int) -> int:
    log = logging.getLogger("user.flood")
    for i in range(n):
        log.warning("flood line %d", i)
    return n


def climb_until_killed() -> None:
    """~200 MiB a second: from a worker's baseline to 95% of 600 MiB in about
    two seconds, with one heartbeat or two on the way (the report that found
    this: 1.4 s, and the timeline showed 73 MiB of 500)."""
    held = []
    while True:
        held.append(touched(10 * 2**20))
        time.sleep(0.05)


def hold_memory(fraction: float, seconds: float) -> int:
    """Grow this worker's process to ``fraction`` of its memory limit for a while."""
    import psutil
    from distributed import get_worker

    limit = get_worker().memory_manager.memory_limit
    assert limit
    need = int(fraction * limit) - psutil.Process().memory_info().rss
    blocks = []
    # In pieces of 64 MiB, above glibc's largest mmap threshold (32 MiB), so
    # that the memory goes back to the OS when the task ends (smaller pieces
    # may stay in the heap).
    while need > 0:
        blocks.append(touched(min(need, 64 * 2**20)))
        need -= len(blocks[-1])
        time.sleep(0.01)
    time.sleep(seconds)
    return sum(map(len, blocks))


def array_of(mib: int, seed: int) -> bytes:
    """``mib`` MiB of one byte: a result that must be stored (or spilled)."""
    return bytes([seed % 256]) * (mib * 2**20)


def hog_the_gil(seconds: float) -> None:
    """Hold the GIL for ``seconds``: no other thread, the event loop's included,
    runs meanwhile (the switch interval is how long a thread may keep it)."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(seconds + 5)
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    finally:
        sys.setswitchinterval(previous)


class SlowToFree:
    """An object in a reference cycle whose finalizer takes ``seconds`` (a
    connection closed politely, say): only a full garbage collection frees
    it, and the collection lasts as long."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.me = self

    def __del__(self) -> None:
        time.sleep(self.seconds)


def collect_slowly(seconds: float) -> None:
    """A full garbage collection that takes ``seconds`` on the calling thread."""
    SlowToFree(seconds)
    gc.collect()


def short_nap(x: int) -> int:
    """Sleep 20 ms, then give ``x`` back."""
    time.sleep(0.02)
    return x


def drop_the_scheduler_then_die(line: str) -> None:
    """Say ``line``, close this worker's connection to the scheduler (which
    removes the worker at once), then die by SIGKILL 0.3 s later: the scheduler
    has seen the worker go while its process still runs, as it may for an
    instant while a killed process closes its files before it ends."""
    from distributed import get_worker

    logging.getLogger("user.task").warning(line)
    worker = get_worker()
    comm = worker.batched_stream.comm
    assert comm is not None
    comm.abort()
    time.sleep(0.3)
    os.kill(os.getpid(), signal.SIGKILL)


def leak_many(n: int) -> int:
    """Log ``n`` lines, every third with a password in it."""
    log = logging.getLogger("user.leaky")
    for i in range(n):
        secret = f" password=hunter{i}" if i % 3 == 0 else ""
        log.warning("line %05d%s", i, secret)
    return n


def divide(a: float, b: float) -> float:
    """A task that raises ZeroDivisionError for ``b == 0``."""
    return a / b


def undecodable(i: int) -> int:
    """Logs a line holding a lone surrogate (what ``os.fsdecode`` makes of a
    Latin-1 file name on Linux), then a plain one; raises with that name for
    ``i < 0``."""
    import logging
    import os

    name = os.fsdecode(b"caf\xe9.csv")
    logging.getLogger("user.files").warning("reading %s", name)
    logging.getLogger("user.files").warning("plain line %d", i)
    if i < 0:
        raise FileNotFoundError(f"no such file: {name}")
    return i


def quote_pushes(tag: str) -> None:
    """What distributed logs of a message it could not serialize (INFO, the
    whole message): of a push of ours, and of another op."""
    log = logging.getLogger("distributed.comm.utils")
    for op in ("dask_observe_push", "other_op"):
        log.info("Unserializable Message: %s", {"op": op, "records": [tag]})


def ship_unshippable(tag: str) -> str:
    """Puts a line no codec can carry (a lone surrogate) straight into this
    worker's capture buffer, between two lines ``tag`` logs: past the capture's
    making of every text it takes shippable, as a record that still cannot
    be shipped would be."""
    from distributed import get_worker

    log = logging.getLogger("user.batch")
    plugin: Any = get_worker().plugins["dask-observe-worker"]  # the bundle's
    buffer = plugin.shipper.buffer
    log.warning("before %s", tag)
    line = "\udcff travels not"
    buffer.append((time.time(), 30, "user.batch", line, None, None, None))
    log.warning("after %s", tag)
    return tag


def speak_every_way(tag: str) -> str:
    """Say ``tag`` as tasks do besides logging: a print, a line to stderr, a
    warning, and a log call with structured ``extra`` fields."""
    import warnings

    print(f"processing {tag}")
    print(f"retrying {tag}", file=sys.stderr)
    warnings.warn(f"a deprecated call in {tag}", stacklevel=1)
    logging.getLogger("user.structured").warning(
        "loaded %s", tag, extra={"partition": tag, "rows": 3}
    )
    return tag


def print_then_fail(tag: str) -> None:
    """Print ``tag``, then raise: the failure's own lines are the task's."""
    print(f"about to fail: {tag}")
    raise ValueError(tag)


def print_lines(n: int) -> int:
    """Print ``n`` numbered lines, the last without its newline."""
    for i in range(n - 1):
        print("row", i)
    print("row", n - 1, end="")
    return n


class Connection:
    """What a task should not return: it holds a lock, which cannot be
    pickled, so it cannot move to another worker."""

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()


def connect() -> Connection:
    return Connection()


def use(connection: Connection) -> int:
    return 1


#: The catastrophic pattern of ``validate_lines``.
BACKTRACKING = r"(a+)+$"


def validate_lines(seconds: float, lines: int = 2) -> int:
    """A catastrophic regular expression (nested quantifiers against lines
    that almost match): ``re`` backtracks in C with the GIL held, twice as
    long a character more (0.4-0.65 s a line of 24 characters here, by the
    day), and nothing else in the process runs meanwhile, its event loop
    neither. Lines of about ``seconds`` each, sized here, on the worker, as
    it runs (a client slowed by other work as it measured sized them too
    short). The lines that do not match."""
    import re

    n = backtracking_chars(seconds)
    pattern = re.compile(BACKTRACKING)
    bad = 0
    for _ in range(lines):
        if pattern.match("a" * n + "b") is None:
            bad += 1
    return bad


def backtracking_chars(seconds: float) -> int:
    """How long a line of ``validate_lines`` takes about ``seconds`` (within
    a factor of 1.4) of this thread's CPU to fail on this machine now: a
    short line timed (best of three), twice as long a character more. A test
    that must hold a loop beyond a threshold sizes its lines so, never by a
    count that held on a slower day (25 characters took 1.3 s a line once and
    0.83 s on a quiet one: under the 1 s tick of event-loop-blocked, no
    stall, no flag). Timed in CPU, not on the wall clock: on a busy host the
    short lines' wall time counted the moments the thread waited for a core,
    sized the lines too short, and two lines sized for 2 s each took 1.9 s
    together (the lowest versions' suite: no stall, no flag)."""
    import math
    import re

    pattern, short = re.compile(BACKTRACKING), 18
    taken = []
    for _ in range(3):
        started = time.thread_time()
        pattern.match("a" * short + "b")
        taken.append(time.thread_time() - started)
    # Rounded: within a factor of 1.4 of ``seconds`` either way.
    doublings = round(math.log2(seconds / max(min(taken), 1e-6)))
    return max(short, min(30, short + doublings))


def speak_below_python(tag: str) -> str:
    """Say ``tag`` as compiled code and subprocesses do: straight to fds 1 and
    2 (as a C library's fprintf does), C's own printf (flushed), and a child
    process writing to the stdout it inherited."""
    import ctypes
    import subprocess

    os.write(1, f"written from C {tag}\n".encode())
    os.write(2, f"C complains {tag}\n".encode())
    libc = ctypes.CDLL(None)
    libc.printf(f"printf says {tag}\n".encode())
    libc.fflush(None)
    subprocess.run(["sh", "-c", f"echo a child says {tag}"], check=True)
    return tag


def write_to_fd_beside(tag: str) -> str:
    """Write ``tag`` to fd 1 a second into the task, and run a second more:
    two of these started together run side by side as both write."""
    time.sleep(1.0)
    os.write(1, f"one of two says {tag}\n".encode())
    time.sleep(1.0)
    return tag


def say_over(tag: str, n: int, seconds: float) -> str:
    """Log ``n`` lines holding ``tag``, ``seconds`` apart, waiting on the
    monotonic clock (time.sleep fails under libfaketime: tests/remote.py)."""
    for i in range(n):
        logging.getLogger("user.task").warning("line %d of %s", i, tag)
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            pass
    return tag


def sleep_in_c(seconds: int) -> int:
    """Wait in a C call (libc's sleep), as a task stuck in a library does:
    its Python stack ends at the call."""
    import ctypes

    ctypes.CDLL(None).sleep(seconds)
    return seconds


def validate_with_pauses(seconds: float, lines: int) -> int:
    """``validate_lines`` with a pause after each line (``time.sleep``
    releases the GIL): a loop held in C, let go between its lines."""
    import re

    n = backtracking_chars(seconds)
    pattern = re.compile(BACKTRACKING)
    bad = 0
    for _ in range(lines):
        if pattern.match("a" * n + "b") is None:
            bad += 1
        time.sleep(0.05)
    return bad


def validate_until_read(seconds: float, wait_s: float = 30.0) -> int:
    """A line of ``validate_lines`` (the loop held in C), then a wait (the
    GIL let go between its steps: the loop and its watchdog run) until this
    process starts a py-spy dump of itself, then more lines until the dump
    ended. The truth by construction: py-spy, which takes milliseconds to
    start and attach, reads this thread in the regular expression's C, in
    this function (the wait is inline: a helper's frame would be where the
    watchdog saw the thread; a look between two lines takes ~0.1 ms of a
    line's seconds). 0 where no dump started within ``wait_s``."""
    import glob
    import os
    import re

    n = backtracking_chars(seconds)
    pattern = re.compile(BACKTRACKING)
    pattern.match("a" * n + "b")
    pid, until = str(os.getpid()).encode(), time.monotonic() + wait_s
    seen = False
    while time.monotonic() < until:
        # The guard shell around py-spy is a child of the thread that
        # started it (the loop's watchdog): the children of each thread.
        dumping = False
        for listing in glob.glob("/proc/self/task/*/children"):
            try:
                with open(listing) as f:
                    children = f.read().split()
            except OSError:  # a thread that ended as we read
                continue
            for child in children:
                try:
                    with open(f"/proc/{child}/cmdline", "rb") as f:
                        words = f.read().split(b"\0")
                except OSError:  # ended as we read
                    continue
                dumping = dumping or (b"dump" in words and pid in words)
        if dumping:  # held until the dump ended, however slow its start
            seen = True
            pattern.match("a" * n + "b")
        elif seen:
            return 1
    return 0

"""Native frames below a hung task's Python ones, read with py-spy.

A task stuck in compiled code (a lock in HDF5, a BLAS thread pool, a C call
that never returns) shows its Python stack down to the call into the library
and stops there. Where py-spy is installed on the worker (``pip install
'dask-observe[native]'``, or py-spy itself: nothing of ours is needed on the
cluster), the first time a long task's stack is shipped the worker's process
is read with ``py-spy dump --native`` (from a thread; py-spy pauses the
process while it reads it, tenths of a second, which it cannot avoid for
native frames), and the native frames beneath the
innermost Python frame of that task's thread are shipped as a
``task-native`` event. Where it cannot be read (py-spy missing, no
permission to trace the process) one event says why, once per worker
process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from .syscalls import SYSCALL, named_in_syscall

#: How long one dump may take before it is given up.
DUMP_TIMEOUT_S = 10.0
#: Native frames kept of a thread, the innermost ones.
MAX_NATIVE_FRAMES = 30
#: The most of py-spy's own words kept when it fails.
MAX_REASON_CHARS = 300
#: Tasks a process remembers it read (the oldest forgotten beyond): each is
#: read once, whoever asks.
MAX_READ_TASKS = 1024


def py_spy() -> str | None:
    """The py-spy program this worker can run: on its PATH, or beside its
    Python (a virtual environment not activated), or None."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else None


def native_part(frames: list[dict[str, Any]]) -> list[str]:
    """Of py-spy's frames of a thread (innermost first, Python's and native
    interleaved), the native ones beneath the innermost Python frame, as
    ``name (file:line)``, outermost first (as a traceback prints)."""
    below: list[str] = []
    for frame in frames:
        filename = str(frame.get("filename") or "")
        if filename.endswith(".py") or filename.startswith("<"):
            break
        name = str(frame.get("name") or "?")
        where = str(frame.get("short_filename") or os.path.basename(filename))
        line = frame.get("line") or 0
        below.append(f"{name} ({where}:{line})" if line else f"{name} ({where})")
        if len(below) >= MAX_NATIVE_FRAMES:
            break
    return below[::-1]


def not_installed() -> str:
    return (
        "py-spy is not installed on this worker "
        "(pip install 'dask-observe[native]', or py-spy)"
    )


def reason_of(done: subprocess.CompletedProcess[str]) -> str:
    said = (done.stderr or done.stdout or "").strip().splitlines()
    text = said[-1] if said else f"py-spy exited with {done.returncode}"
    text = text[:MAX_REASON_CHARS]
    if "ermission" in text or "not permitted" in text:
        text += (
            " (py-spy needs to trace the worker's process: root, CAP_SYS_PTRACE,"
            " or kernel.yama.ptrace_scope=0)"
        )
    return text


#: Runs py-spy (the arguments after the target's pid) so that the process it
#: reads is never left stopped. py-spy stops each thread it reads (ptrace); if
#: it dies while it holds them (killed at its time limit, or aborting inside
#: libunwind: py-spy#398), the stop it asked for can outlive it and freeze the
#: process for good (py-spy#416): a worker, or the kernel of an in-process
#: cluster, that nothing would ever resume, not even its own threads. So a
#: shell of its own, which py-spy does not trace, bounds py-spy's time
#: (``timeout``: SIGINT, the way py-spy lets go cleanly, then SIGKILL) and
#: resumes the process once py-spy has gone, however it went (SIGCONT does
#: nothing to a process that runs).
_GUARD = """
target=$1; limit=$2; shift 2
if command -v timeout >/dev/null 2>&1; then
  timeout -s INT -k 2 "$limit" "$@"
else
  "$@"
fi
status=$?
kill -CONT "$target" 2>/dev/null
exit "$status"
"""
#: ``timeout``'s status when it stopped py-spy at the limit.
_TIMED_OUT = (124, 137)


def dump(pid: int) -> tuple[dict[int, list[str]], str | None]:
    """The native frames beneath Python's of each thread of process ``pid``
    (by thread ident, as ``threading`` names threads), or why not."""
    started = start_dump(pid)
    if isinstance(started, str):
        return {}, started
    return finish_dump(started)


def start_dump(pid: int) -> subprocess.Popen[str] | str:
    """py-spy started on process ``pid`` (it reads it on its own, whatever
    holds the GIL here meanwhile), or why it cannot be."""
    program = py_spy()
    if program is None:
        return not_installed()
    limit = f"{DUMP_TIMEOUT_S:g}"
    command = ["sh", "-c", _GUARD, "guard", str(pid), limit]
    command += [program, "dump", "--native", "--json", "--pid", str(pid)]
    try:
        return subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a signal to this process is not py-spy's
        )
    except OSError as e:
        return f"py-spy could not run: {e}"[:MAX_REASON_CHARS]


def finish_dump(
    process: subprocess.Popen[str],
) -> tuple[dict[int, list[str]], str | None]:
    """What a dump ``start_dump`` began found, once it ended, or why not."""
    limit = f"{DUMP_TIMEOUT_S:g}"
    with process:
        try:
            out, err = process.communicate(timeout=DUMP_TIMEOUT_S + 10)
        except subprocess.TimeoutExpired:  # the guard itself is stuck
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return {}, f"py-spy did not end within {limit} s"
    done = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    if done.returncode in _TIMED_OUT:
        return {}, f"py-spy did not end within {limit} s"
    if done.returncode != 0:
        return {}, reason_of(done)
    try:
        threads = json.loads(done.stdout)
    except ValueError:
        return {}, "py-spy answered what is not JSON"
    # Only a thread still in a task: read a moment after it was asked for,
    # a thread may have finished its task (its native frames then were the
    # executor's queue waiting for the next, told as the task's).
    return name_syscalls(
        {
            int(thread["thread_id"]): native_part(thread.get("frames") or [])
            for thread in threads
            if isinstance(thread, dict)
            and "thread_id" in thread
            and _in_task(thread.get("frames") or [])
        }
    ), None


def name_syscalls(threads: dict[int, list[str]]) -> dict[int, list[str]]:
    """Each thread's native frames (``native_part``), its innermost named
    SYSCALL where py-spy could not name it and it is in a system call
    (``capture.syscalls``: libc's internal futex wait and wake). Only in the
    process py-spy read, whose mappings its addresses are of."""
    innermost = {ident: below[-1] for ident, below in threads.items() if below}
    for ident in named_in_syscall(innermost):
        library = innermost[ident].partition(" ")[2]  # "(libc.so.6)"
        threads[ident][-1] = f"{SYSCALL} {library}".rstrip()
    return threads


def _in_task(frames: list[dict[str, Any]]) -> bool:
    """Whether py-spy's frames of a thread run a task (distributed's worker
    called them)."""
    return any(
        str(frame.get("filename") or "").endswith("distributed/worker.py")
        for frame in frames
    )


class NativeStacks:
    """One dump at a time per process, from a thread of its own."""

    def __init__(self) -> None:
        self._running = False
        self._lock = threading.Lock()
        #: Set while no dump is under way.
        self._idle = threading.Event()
        self._idle.set()
        #: Whether this process said already why it cannot be read.
        self._said = False
        #: The tasks read so far, oldest first (an ordered set).
        self._read: dict[str, None] = {}

    def request(
        self,
        tasks: dict[int, str],
        ship: Callable[[dict[str, Any]], None],
        *,
        at_once: bool = False,
        again: bool = False,
    ) -> None:
        """Read the native frames of these tasks' threads (thread ident ->
        key) and ``ship`` one event a task; nothing if a dump is under way.
        A task is read once (each dump pauses the process): the loop's
        watchdog and the stack sampler both asked for a task that held the
        loop and then moved to new lines, and it was read twice, or up to
        once a new stack; ``again`` reads it however often (the last look,
        as a recording stops). ``at_once``: py-spy is started from the
        calling thread, not from the dump's own: one that holds the GIL only
        a moment (the loop's watchdog, between two long C calls of a task
        that holds it) starts py-spy, which reads the process whoever holds
        the GIL next; a new thread would first wait for the GIL, until the
        task let it go."""
        with self._lock:
            if not again:
                tasks = {t: k for t, k in tasks.items() if k not in self._read}
            if self._running or not tasks or self._said:
                return
            self._running = True
            self._idle.clear()
            self._read.update(dict.fromkeys(tasks.values()))
            while len(self._read) > MAX_READ_TASKS:
                del self._read[next(iter(self._read))]
        started = start_dump(os.getpid()) if at_once else None
        threading.Thread(
            target=self._dump,
            args=(dict(tasks), ship, started),
            name="dask-observe-native-stacks",
            daemon=True,
        ).start()

    def _dump(
        self,
        tasks: dict[int, str],
        ship: Callable[[dict[str, Any]], None],
        started: subprocess.Popen[str] | str | None,
    ) -> None:
        try:
            if started is None:
                started = start_dump(os.getpid())
            found: dict[int, list[str]] = {}
            reason: str | None = started if isinstance(started, str) else None
            if not isinstance(started, str):
                found, reason = finish_dump(started)
            if reason is not None:
                self._said = True
                key = next(iter(tasks.values()))
                ship({"key": key, "thread": None, "native": [], "reason": reason})
                return
            for thread, key in tasks.items():
                native = found.get(thread)
                if native:
                    ship({"key": key, "thread": thread, "native": native})
        except Exception as e:  # extra evidence: never the worker's failure
            ship({"key": next(iter(tasks.values())), "thread": None,
                  "native": [], "reason": f"native stacks failed: {e}"})  # fmt: skip
        finally:
            with self._lock:
                self._running = False
                self._idle.set()

    def busy(self) -> bool:
        """Whether a dump is under way."""
        return not self._idle.is_set()

    def wait(self, timeout: float) -> bool:
        """Wait until no dump is under way (its events shipped), up to
        ``timeout`` seconds: whether none is."""
        return self._idle.wait(timeout)

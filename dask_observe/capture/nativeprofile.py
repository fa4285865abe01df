"""A profile of a worker's process that sees compiled code, recorded on
request for a run's window with ``py-spy record --native``.

distributed's profiler reads Python's frames only: the time a NumPy- or
pandas-heavy task spends in a sort, a copy or a hash join sits on the Python
line that called it. py-spy unwinds the native stack too. It pauses the
process at each sample to do so (``--native`` cannot be non-blocking), so it
runs at a bounded rate (``observe.profile.native-rate``, 10 a second by
default) and only while a run asked for it.

py-spy writes a Chrome trace: per thread, when each frame began and ended on
the stack (microseconds since it started). Its idle threads are kept
(``--idle``), so that a thread's last stack does not seem to last until its
next task. Read when the run ends: each thread's stacks as intervals of this
worker's (and then the scheduler's) clock; the client attributes them to the
tasks that ran on that thread meanwhile (``analysis.native``).

A process holds one such recording a run at once, however many workers it
runs (an in-process cluster): the first of them starts it and answers it at
the end; the others say whose it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
from typing import Any

from .pyspy import MAX_REASON_CHARS, not_installed, py_spy, reason_of
from .syscalls import SYSCALL, named_in_syscall

#: The most seconds a native profile records before it stops by itself (a
#: client that never ended its run: py-spy must not pause a worker forever).
MAX_RECORD_S = 4 * 3600.0
#: The most stack intervals a process answers; later ones are counted only.
MAX_INTERVALS = 200_000
#: How long py-spy may take to write its trace once told to stop.
STOP_TIMEOUT_S = 30.0
#: The highest sampling rate asked of py-spy (each sample pauses the process).
MAX_RATE = 200
#: The largest trace read (py-spy writes an event each time a stack changes:
#: a busy thread's every sample; an hour at 10 a second is ~100 MB).
MAX_TRACE_BYTES = 256 * 2**20
#: Why a run has no native profile of a process another run records.
BUSY = "another run's native profile is recording this worker's process"
#: How long a run's start waits for py-spy to attach and sample.
ATTACH_TIMEOUT_S = 3.0

#: py-spy's root frame of a thread, with --threads: "thread (<tid>): name"
#: (the kernel's thread id) or, in older versions, "thread (0x<ident>)".
_THREAD = re.compile(r"thread \((0x[0-9A-Fa-f]+|\d+)\)")

#: As native.py's guard (py-spy stops the process at each sample; one that
#: dies holding it must not leave it stopped), but for a recording: py-spy
#: runs until told to stop, and the shell resumes the process after it ended.
_GUARD = """
target=$1; shift
"$@"
status=$?
kill -CONT "$target" 2>/dev/null
exit "$status"
"""


class _Recording:
    def __init__(self, token: str, rate: int) -> None:
        self.token = token
        self.rate = rate
        handle, self.path = tempfile.mkstemp(
            prefix="dask-observe-native-", suffix=".json"
        )
        os.close(handle)
        program = py_spy()
        assert program is not None
        command = ["sh", "-c", _GUARD, "guard", str(os.getpid()), program, "record"]
        # --function: a frame's line is where its function starts, as in
        # distributed's profile, with which its samples are joined.
        command += ["--native", "--idle", "--threads", "--function"]
        command += ["--rate", str(rate), "--format", "chrometrace"]
        command += ["--output", self.path, "--pid", str(os.getpid())]
        # What py-spy says goes to a file, not a pipe: one nobody read would
        # fill, and py-spy, blocked on it, could hold the process paused. It
        # appends; this process reads the file through a handle of its own.
        handle, self._said = tempfile.mkstemp(prefix="dask-observe-", suffix=".txt")
        os.close(handle)
        # Its time origin: py-spy counts from its own start, a few
        # milliseconds after this (the client aligns it: analysis.native).
        self.origin = time.time()
        with open(self._said, "ab") as said:
            self.process = subprocess.Popen(
                command, stdout=said, stderr=said, start_new_session=True
            )
        self._limit = threading.Timer(MAX_RECORD_S, self._interrupt)
        self._limit.daemon = True
        self._limit.start()

    def wait_sampling(self, timeout: float) -> str | None:
        """Wait until py-spy samples (it attaches first: a tenth of a second,
        in which a run's first tasks would go unseen), up to ``timeout``
        seconds; None once it does, else why not (it ended: what it said)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "Sampling process" in self._text():
                return None
            if self.process.poll() is not None:
                return self._reason()
            time.sleep(0.01)
        return None  # slow to attach: it records from whenever it can

    def _text(self) -> str:
        try:
            with open(self._said, errors="replace") as said:
                return said.read(64 * 1024)
        except OSError:
            return ""

    def _reason(self) -> str:
        code = self.process.returncode
        return reason_of(subprocess.CompletedProcess([], code, "", self._text()))

    def _py_spy_pid(self) -> int | None:
        """The guard shell's child: py-spy."""
        path = f"/proc/{self.process.pid}/task/{self.process.pid}/children"
        for _ in range(100):
            try:
                with open(path) as children:
                    found = children.read().split()
            except OSError:
                return None
            if found:
                return int(found[0])
            if self.process.poll() is not None:
                return None
            time.sleep(0.01)
        return None

    def _interrupt(self) -> None:
        pid = self._py_spy_pid()
        if pid is not None:
            # SIGINT: py-spy's own way to stop and write what it has.
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGINT)

    def stop(self) -> tuple[dict[str, Any] | None, str | None]:
        """What py-spy recorded, or why nothing."""
        self._limit.cancel()
        self._interrupt()
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self._remove()
            return None, f"py-spy did not end within {STOP_TIMEOUT_S:g} s"
        try:
            size = os.path.getsize(self.path)
            if size > MAX_TRACE_BYTES:  # (read whole, it would be 10 times that)
                return None, f"py-spy's trace is too large to read ({size} bytes)"
            with open(self.path) as trace:
                events = json.load(trace)
        except (OSError, ValueError):
            return None, self._reason()
        finally:
            self._remove()
        return parse_trace(events, self.origin), None

    def _remove(self) -> None:
        for path in (self.path, self._said):
            with contextlib.suppress(OSError):
                os.unlink(path)


def parse_trace(events: list[dict[str, Any]], origin: float) -> dict[str, Any]:
    """py-spy's Chrome trace as stack intervals: ``frames`` (name, filename,
    line), ``stacks`` (frame indexes, outermost first) and ``threads``
    (ident -> [start, stop, stack] in epoch seconds, from ``origin``, the
    time py-spy began); ``dropped``: intervals past MAX_INTERVALS."""
    native_to_ident = {t.native_id: t.ident for t in threading.enumerate()}
    frames: dict[tuple[str, str, int], int] = {}
    stacks: dict[tuple[int, ...], int] = {}
    open_frames: dict[int, list[int]] = {}
    since: dict[int, int] = {}
    idents: dict[int, int] = {}
    threads: dict[int, list[list[float | int]]] = {}
    kept = dropped = 0
    for event in events:
        phase, tid, ts = event.get("ph"), event.get("tid"), event.get("ts")
        if phase not in ("B", "E") or not isinstance(tid, int):
            continue
        if not isinstance(ts, (int, float)):
            continue
        stack = open_frames.setdefault(tid, [])
        began = since.get(tid)
        if began is not None and ts != began and len(stack) > 1:
            key = tuple(stack[1:])  # without the thread's own root frame
            if kept < MAX_INTERVALS:
                index = stacks.setdefault(key, len(stacks))
                ident = idents.get(tid, tid)
                threads.setdefault(ident, []).append(
                    [round(origin + began / 1e6, 4), round(origin + ts / 1e6, 4), index]
                )
                kept += 1
            else:
                dropped += 1
        since[tid] = int(ts)
        if phase == "E":
            if stack:
                stack.pop()
            continue
        name = str(event.get("name", ""))
        args = event.get("args") or {}
        if not stack:
            found = _THREAD.match(name)
            if found is not None:
                number = found.group(1)
                if number.startswith("0x"):
                    idents[tid] = int(number, 16)
                elif int(number) in native_to_ident:
                    idents[tid] = native_to_ident[int(number)] or tid
        frame = (name, str(args.get("filename") or ""), int(args.get("line") or 0))
        stack.append(frames.setdefault(frame, len(frames)))
    return {
        "frames": _name_syscalls([list(f) for f in frames], stacks),
        "stacks": [list(s) for s in stacks],
        "threads": {str(ident): spans for ident, spans in threads.items()},
        "dropped": dropped,
    }


def _name_syscalls(
    frames: list[list[Any]], stacks: dict[tuple[int, ...], int]
) -> list[list[Any]]:
    """The frames, those that are a thread's innermost, unnamed (an address)
    and in a system call named SYSCALL (``capture.syscalls``)."""
    innermost = {stack[-1] for stack in stacks if stack}
    for i in named_in_syscall({i: frames[i][0] for i in innermost}):
        frames[i][0] = SYSCALL
    return frames


class NativeProfiles:
    """The native profile this process records, one a run at once."""

    _lock = threading.Lock()
    _recording: _Recording | None = None

    @classmethod
    def start(cls, token: str, rate: int) -> dict[str, Any]:
        """Start recording for run ``token``: ``{"started": True}``, or
        ``{"shared": True}`` where another worker of this process did, or
        ``{"reason": ...}`` why it cannot."""
        where = {"pid": os.getpid(), "host": socket.gethostname()}
        with cls._lock:
            current = cls._recording
            if current is not None:
                if current.token == token:  # another worker of this process
                    return {**where, "shared": True}
                # A run recording while another does (nested, or another
                # client's): py-spy can trace a process once; the later run
                # says why it has none, not an empty table.
                return {**where, "reason": BUSY}
            if py_spy() is None:  # said each run: its report says why not
                return {**where, "reason": not_installed()}
            try:
                recording = _Recording(token, max(1, min(int(rate), MAX_RATE)))
            except OSError as e:
                reason = f"py-spy could not run: {e}"
                return {**where, "reason": reason[:MAX_REASON_CHARS]}
            failed = recording.wait_sampling(ATTACH_TIMEOUT_S)
            if failed is not None:  # it could not attach (no permission...)
                recording.stop()
                return {**where, "reason": failed}
            cls._recording = recording
            return {**where, "started": True}

    @classmethod
    def stop(cls, token: str, offset: float = 0.0) -> dict[str, Any]:
        """The recording of run ``token``, if this process holds it: its
        trace (``parse_trace``) with times ``offset`` seconds later (this
        worker's clock to the scheduler's), or ``{"reason": ...}``."""
        with cls._lock:
            current = cls._recording
            if current is None or current.token != token:
                return {}
            cls._recording = None
        trace, reason = current.stop()
        if trace is None:
            return {"reason": reason}
        if offset:
            for spans in trace["threads"].values():
                for span in spans:
                    span[0] = round(span[0] + offset, 4)
                    span[1] = round(span[1] + offset, 4)
        return {"rate": current.rate, **trace}

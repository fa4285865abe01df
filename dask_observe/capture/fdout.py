"""Capture of what a worker process writes to its file descriptors 1 and 2.

A C or C++ library (XGBoost, GDAL, HDF5), a Fortran routine, a subprocess a
task starts: none of them write through ``sys.stdout``, so the tees of
:mod:`.output` never see them, and on a remote cluster their words went to the
worker pod's stdout and died with it. In a worker's own process (never the
client's kernel, whose fd 1 is the notebook's), fds 1 and 2 are made the
write ends of pipes that a thread of ours reads: each chunk is written on to
the descriptor they replaced (the terminal or the pod's log gets everything,
as before) and its whole lines are handed to the log router as lines of
``stdout`` / ``stderr``, with ``fields`` ``{"fd": 1}``.

Such a line is tied to the task that wrote it only where that can be told:
when exactly one task was running on the worker as it was read; else it
names no task and says how many ran (``{"fd": 1, "running": 3}``).

What Python itself writes does not come back through the pipes: the tees on
``sys.stdout`` / ``sys.stderr`` and the logging handlers that wrote to the
streams as they were write to the replaced descriptors directly (they are
captured already, by their thread's task; a second copy would name none).

C's stdio buffers a pipe where it line-buffers a terminal: ``printf`` output
arrives when the library flushes it (or at the process's end), as it would in
a pod whose stdout is a pipe already.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import logging
import os
import select
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from .logs import LogTuple
from .text import shippable

try:  # POSIX: how many bytes a pipe holds unread
    import fcntl
    import termios

    _FIONREAD: int | None = termios.FIONREAD
except ImportError:  # pragma: no cover (Windows: no pipes put on fds here)
    _FIONREAD = None

STREAMS = {1: "stdout", 2: "stderr"}

#: Bytes read at a time from a pipe.
CHUNK = 64 * 1024

#: A partial line (no newline yet) older than this is taken as a line.
PARTIAL_AFTER_S = 1.0

#: A line longer than this (bytes) is cut into lines of it.
MAX_LINE_BYTES = 16 * 1024

#: Lines written on fds 1 and 2 kept of one task; the rest are counted as
#: dropped (the same bound as a task's Python-level output).
TASK_LINES = 10_000

#: How long taking the descriptors back waits for the reader's last lines.
STOP_WAIT_S = 2.0
#: How long a sync (a run's end) waits for them: what a task wrote is in a
#: pipe, read in microseconds unless this process's threads hold the GIL.
SYNC_WAIT_S = 0.5
#: How long a task's end waits for the lines its pipes hold unread (the
#: worker's event loop waits meanwhile; only where a pipe holds some).
SETTLE_WAIT_S = 0.05
#: Tasks' ends whose unread bytes a pipe keeps count of at most (beyond,
#: the reader tells their lines by what runs as it reads them).
MAX_OWED = 1024


class FdCapture:
    """The pipes on fds 1 and 2 of this process, until :meth:`uninstall`.

    ``emit(record)`` receives each line as a LogTuple, from the reading
    thread; ``running()`` lists the keys of the tasks running now;
    ``lost(n)`` counts lines not kept (a task's beyond TASK_LINES)."""

    def __init__(
        self,
        emit: Callable[[LogTuple], None],
        running: Callable[[], list[str]],
        lost: Callable[[int], None] = lambda n: None,
    ) -> None:
        self._emit = emit
        self._running = running
        self._lost = lost
        #: fd -> (the descriptor it replaced, the pipe's read end).
        self._fds: dict[int, tuple[int, int]] = {}
        #: fd -> the bytes of its partial line, and since when.
        self._partial: dict[int, tuple[bytes, float]] = {}
        #: Lines each task wrote so far (tasks no longer running pruned).
        self._said: dict[str, int] = {}
        #: Python's writers moved to the replaced descriptors: the stream
        #: objects we made, and what each writer wrote to before.
        self._streams: dict[int, TextIO] = {}
        self._moved: list[tuple[Any, str, Any, TextIO]] = []
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None
        #: Set by the reader when it has handed on what a sync asked for.
        self._synced = threading.Event()
        self._sync_lock = threading.Lock()
        #: Held by the reader while it reads and hands on, and by a task's
        #: end while it counts what the pipes hold unread: bytes are read
        #: either before that count (and told while their task runs) or
        #: after (and owed to it).
        self._reading = threading.Lock()
        #: fd -> [task, bytes]: what a task that ran alone left unread in
        #: the pipe as it ended, the next bytes read there, in order.
        self._owed: dict[int, list[list[Any]]] = {}
        #: Whether the reader holds bytes it read and has not handed on.
        self._in_hand = False

    @property
    def installed(self) -> bool:
        return self._thread is not None

    def install(self, tees: dict[str, Any]) -> None:
        """Put the pipes on; ``tees``: the Python-level tees by stream name,
        moved to write to the replaced descriptors."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                if stream is not None:
                    stream.flush()
        for fd in STREAMS:
            try:
                saved = os.dup(fd)
            except OSError:  # closed (a daemon): nothing writes there
                continue
            read, write = os.pipe()
            os.dup2(write, fd)  # inheritable: a task's subprocess writes here too
            os.close(write)
            self._fds[fd] = (saved, read)
        if not self._fds:
            return
        self._move_python_writers(tees)
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(
            target=self._read, name="dask-observe-fd-output", daemon=True
        )
        self._thread.start()

    def _move_python_writers(self, tees: dict[str, Any]) -> None:
        """Point what Python writes to fds 1 and 2 (the tees, and logging
        handlers holding the streams as they were) at the replaced
        descriptors."""
        ours: dict[int, TextIO] = {}
        for fd, name in STREAMS.items():
            tee = tees.get(name)
            original = (
                tee._dask_observe_stream if tee is not None else getattr(sys, name)
            )
            if fd not in self._fds or original is None:
                continue
            stream = io.TextIOWrapper(
                io.FileIO(self._fds[fd][0], "w", closefd=False),
                encoding=getattr(original, "encoding", None) or "utf-8",
                errors=getattr(original, "errors", None) or "backslashreplace",
                line_buffering=True,
            )
            self._streams[fd] = stream
            ours[id(original)] = stream
            if tee is not None:
                self._move(tee, "_dask_observe_stream", stream)
        for handler in _stream_handlers():
            moved = ours.get(id(handler.stream))
            if moved is not None:
                self._move(handler, "stream", moved)
        # A crash's traceback must reach the terminal from a dying process,
        # whose reading thread dies with it.
        if faulthandler.is_enabled() and 2 in self._streams:
            faulthandler.enable(self._streams[2])

    def _move(self, owner: Any, attribute: str, stream: TextIO) -> None:
        self._moved.append((owner, attribute, getattr(owner, attribute), stream))
        setattr(owner, attribute, stream)

    def uninstall(self) -> None:
        """Give fds 1 and 2 back, with the last lines read first."""
        if self._thread is None:
            return
        for stream in self._streams.values():
            with contextlib.suppress(Exception):
                stream.flush()
        for owner, attribute, before, stream in reversed(self._moved):
            if getattr(owner, attribute, None) is stream:  # else replaced since
                setattr(owner, attribute, before)
        self._moved.clear()
        if faulthandler.is_enabled() and 2 in self._streams:
            faulthandler.enable(2)  # before the stream it wrote to closes
        for fd, (saved, _) in self._fds.items():
            os.dup2(saved, fd)  # closes this process's write end of the pipe
        os.write(self._wake_w, b"x")
        self._thread.join(STOP_WAIT_S)
        self._thread = None
        for saved, read in self._fds.values():
            for descriptor in (saved, read):
                with contextlib.suppress(OSError):
                    os.close(descriptor)
        for descriptor in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(descriptor)
        self._fds.clear()
        self._streams.clear()

    def sync(self, timeout: float = SYNC_WAIT_S) -> None:
        """Hand on every line written so far, partial ones too (a run's end:
        a task's last write may be in a pipe still, or not yet a line)."""
        if self._thread is None:
            return
        with self._sync_lock:
            self._synced.clear()
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"s")
                self._synced.wait(timeout)

    def settle(self, task: str) -> None:
        """At ``task``'s end, while it still counts as running: hand on what
        the pipes hold unread (written as it ran). The reader may be slower
        than the worker's loop to run (a busy host, a thread holding the
        GIL): what it has not read within SETTLE_WAIT_S is counted, and the
        next that many bytes of each pipe are the task's when they are read
        (they named no task, a child process's line in a loaded suite). A
        look at each pipe (an ioctl) where nothing waits."""
        if self._thread is None:
            return
        if any(_unread(read) for _, read in self._fds.values()):
            self.sync(SETTLE_WAIT_S)
        elif not self._in_hand:
            return  # the common case: nothing written, or all handed on
        # A read in the reader's hands is handed on first, while the task
        # still runs (uncontended, the lock costs a fraction of a microsecond).
        if not self._reading.acquire(timeout=SETTLE_WAIT_S):
            return
        try:
            if self._running() != [task]:
                return  # not its alone: the reader tells what it can
            for fd, (_, read) in self._fds.items():
                owed = self._owed.setdefault(fd, [])
                # Beyond what earlier tasks left unread there (owed first).
                left = _unread(read) - sum(n for _, n in owed)
                if left > 0 and len(owed) < MAX_OWED:
                    owed.append([task, left])
        finally:
            self._reading.release()

    # -- the reading thread ----------------------------------------------------
    def _read(self) -> None:
        reads = {read: fd for fd, (_, read) in self._fds.items()}
        poller = select.poll()
        for read in reads:
            poller.register(read, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        stopping = False
        while True:
            try:
                ready = poller.poll(PARTIAL_AFTER_S * 1000)
            except InterruptedError:
                continue
            for descriptor, _ in ready:
                if descriptor == self._wake_r:
                    asked = os.read(self._wake_r, 64)
                    stopping = stopping or b"x" in asked
                    if b"s" in asked:
                        self._drain(reads)
                        self._flush_partial(0.0)
                        self._synced.set()
                    continue
                fd = reads[descriptor]
                with self._reading:
                    self._in_hand = True
                    try:
                        data = os.read(descriptor, CHUNK)
                    except OSError:
                        data = b""
                    if data:
                        self._write_on(fd, data)
                        self._take(fd, data)
                    self._in_hand = False
                if not data:
                    poller.unregister(descriptor)
            if stopping:
                self._drain(reads)
                self._flush_partial(0.0)
                return
            self._flush_partial(PARTIAL_AFTER_S)

    def _drain(self, reads: dict[int, int]) -> None:
        """What is in the pipes as the descriptors are given back (a task's
        subprocess may hold a write end still: no waiting for its end)."""
        for read, fd in reads.items():
            os.set_blocking(read, False)
            while True:
                with self._reading:
                    try:
                        data = os.read(read, CHUNK)
                    except OSError:
                        break
                    if not data:
                        break
                    self._in_hand = True
                    self._write_on(fd, data)
                    self._take(fd, data)
                    self._in_hand = False

    def _write_on(self, fd: int, data: bytes) -> None:
        """Everything goes where it went before: never swallowed."""
        saved = self._fds[fd][0]
        view = memoryview(data)
        while view:
            try:
                written = os.write(saved, view)
            except InterruptedError:
                continue
            except OSError:
                return  # the original went away: the lines are still kept
            view = view[written:]

    def _take(self, fd: int, data: bytes) -> None:
        """Bytes read from ``fd``: those a task that ended left unread are its
        lines (its last one whole, newline or not), the rest as they come."""
        owed = self._owed.get(fd)
        while owed and data:
            task, left = owed[0]
            part, data = data[:left], data[left:]
            self._lines(fd, part, task)
            if len(part) < left:
                owed[0][1] = left - len(part)
                return
            owed.pop(0)
            rest, _ = self._partial.pop(fd, (b"", 0.0))
            if rest:
                self._line(fd, rest, task)
        if data:
            self._lines(fd, data)

    def _lines(self, fd: int, data: bytes, task: str | None = None) -> None:
        """``data`` read from ``fd``, in lines; ``task``: whose they are (else
        the task running alone as they are read)."""
        before, since = self._partial.pop(fd, (b"", time.time()))
        data = before + data
        *whole, rest = data.split(b"\n")
        for line in whole:
            self._line(fd, line, task)
        while len(rest) >= MAX_LINE_BYTES:
            self._line(fd, rest[:MAX_LINE_BYTES], task)
            rest = rest[MAX_LINE_BYTES:]
        if rest:
            self._partial[fd] = (rest, since if not whole else time.time())

    def _flush_partial(self, older_than: float) -> None:
        now = time.time()
        for fd, (rest, since) in list(self._partial.items()):
            if now - since >= older_than:
                del self._partial[fd]
                self._line(fd, rest)

    def _line(self, fd: int, data: bytes, owner: str | None = None) -> None:
        if b"\r" in data:  # a terminal shows what follows the last one
            data = data.rstrip(b"\r").rpartition(b"\r")[2]
        text = data.decode("utf-8", "surrogateescape")
        if not text or text.isspace():
            return
        try:
            running = self._running()
        except Exception:  # the worker's state, read from another thread
            running = []
        task = owner or (running[0] if len(running) == 1 else None)
        fields: dict[str, Any] = {"fd": fd}
        if task is None and running:
            fields["running"] = len(running)
        if task is not None and not self._admitted(task, running):
            self._lost(1)
            return
        name = STREAMS[fd]
        level = logging.INFO if fd == 1 else logging.WARNING
        record = (time.time(), level, name, shippable(text), task, json.dumps(fields))
        self._emit(record)

    def _admitted(self, task: str, running: list[str]) -> bool:
        said = self._said.get(task, 0) + 1
        self._said[task] = said
        if len(self._said) > 1024:  # ended tasks' counts go
            self._said = {k: n for k, n in self._said.items() if k in running}
        return said <= TASK_LINES


def _unread(descriptor: int) -> int:
    """How many bytes a pipe holds not read yet (a task's end asks: two
    system calls, ~1 us each)."""
    if _FIONREAD is None:  # no such call here: the reader alone tells
        return 0
    try:
        said = fcntl.ioctl(descriptor, _FIONREAD, b"\0\0\0\0")
    except OSError:
        return 0
    return int.from_bytes(said, sys.byteorder)


def _stream_handlers() -> list[logging.StreamHandler[Any]]:
    """Every plain logging StreamHandler of the loggers (files and logging's
    last resort, which writes to ``sys.stderr`` as it is, are not)."""
    loggers: list[Any] = [logging.getLogger()]
    loggers += list(logging.Logger.manager.loggerDict.values())
    return [
        handler
        for logger in loggers
        for handler in getattr(logger, "handlers", ())
        if type(handler) is logging.StreamHandler
    ]

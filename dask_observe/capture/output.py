"""Capture of what tasks print and warn: their stdout, stderr and warnings,
as log lines (loggers ``stdout``, ``stderr``, ``py.warnings``), each with the
key of the task whose thread wrote it.

Most of what users' code says does not go through ``logging``: a ``print``,
a line to ``sys.stderr``, a ``warnings.warn``. On a remote cluster those went
to the worker's stdout and died with it. Here ``sys.stdout`` and
``sys.stderr`` are stood in for by a tee that writes on as before and hands
each whole line to the process's log router; ``warnings.showwarning`` is
wrapped the same way. What is written goes where it went before, unchanged.

A line is captured when a task's thread wrote it, or when the process is a
worker's own (every capture sink in it is a worker's): the kernel of a
LocalCluster, whose scheduler is captured, prints the notebook's own output,
which is not the cluster's. What bypasses ``sys.stdout`` (compiled code,
child processes) is read from fds 1 and 2 in a worker's own process
(:mod:`.fdout`).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, TextIO

from .logs import LogTuple, task_text, thread_state
from .text import MAX_TEXT_BYTES, bounded, shippable

STDOUT, STDERR, WARNINGS = "stdout", "stderr", "py.warnings"

#: The level of a line by where it was written: stderr is where programs say
#: what went wrong (a traceback printed, a retry), stdout what they did.
LEVELS = {STDOUT: logging.INFO, STDERR: logging.WARNING}

#: A line longer than this (in characters) is cut into lines of it: a
#: progress bar without a newline must not grow without bound.
MAX_LINE_CHARS = MAX_TEXT_BYTES // 4

#: A partial line (no newline yet) older than this is taken as a line.
PARTIAL_AFTER_S = 1.0

#: Lines of output (prints, stderr, warnings) kept of one task; the rest are
#: counted as dropped and said as the task ends.
TASK_LINES = 10_000

#: The logger of that saying.
OUTPUT_NOTE = "dask_observe.output"


class _Pending:
    """A thread's partial line on one stream, and the task that wrote it."""

    __slots__ = ("key", "live", "parts", "since", "size", "stream", "task")

    def __init__(self, key: object, stream: str) -> None:
        #: The task's key as distributed holds it (its text is made only for
        #: a whole line: a print writes four or six times).
        self.key = key
        self.stream = stream
        self.parts: list[str] = []
        self.size = 0
        self.since = time.time()
        #: False once handed on by a flush: its thread starts another.
        self.live = True
        #: The key's text and whether its lines are kept, once a line asked.
        self.task: tuple[str | None, bool] | None = None


class Lines:
    """Assembles what each thread writes into lines and hands them on.

    ``emit(record)`` receives a LogTuple; ``wanted(task)`` says whether a line
    written outside (None) or inside a task is the cluster's to keep;
    ``lost(task, n)`` counts lines of a task not kept.
    """

    def __init__(
        self,
        emit: Callable[[LogTuple], None],
        wanted: Callable[[str | None], bool],
        lost: Callable[[str | None, int], None] = lambda task, n: None,
    ) -> None:
        self._emit = emit
        self._wanted = wanted
        self._lost_of = lost
        #: Lines of output each running task wrote so far.
        self._said: dict[object, int] = {}
        #: Each thread's partial line by stream (``_mine``), and all of them
        #: (``_pending``), for a flush from another thread.
        self._mine = threading.local()
        self._pending: set[_Pending] = set()
        # Reentrant: a garbage collection inside a locked part runs finalizers
        # on this thread, and one that logs writes to stderr, here again (a
        # plain lock waited for itself, and a LocalCluster's event loop with
        # it: see buffer.DropCountingBuffer).
        self._lock = threading.RLock()
        #: Whether a line written outside any task is kept (a worker's own
        #: process): set by the log router as capture sinks come and go.
        self.outside = False
        #: Set on a thread while a warning it raised is written to stderr:
        #: that text is the warning, kept as one already.
        self.quiet = threading.local()
        #: Set on a thread while a tee writes on (see ``_Tee.write``).
        self.teeing = threading.local()

    def wrote(self, stream: str, text: str) -> None:
        # Each word a print writes comes here: the common case (part of a
        # line, on the thread's own pending line of the same task) is one
        # thread-local read, a lock and an append.
        key = getattr(thread_state, "key", None)
        if key is None and not self.outside:  # the kernel's own, say
            return
        mine = self._mine.__dict__
        pending = mine.get(stream)
        if (
            pending is not None
            and pending.key is key
            and "\n" not in text
            and "\r" not in text
        ):
            with self._lock:
                if pending.size + len(text) < MAX_LINE_CHARS and pending.live:
                    if not pending.parts:  # a new line: its age counts from here
                        pending.since = time.time()
                    pending.parts.append(text)
                    pending.size += len(text)
                    return
        if getattr(self.quiet, "on", False):
            return
        done: list[tuple[_Pending, str]] = []
        with self._lock:
            if pending is None or pending.key is not key or not pending.live:
                if pending is not None and pending.live and pending.parts:
                    done.append((pending, "".join(pending.parts)))
                self._forget(pending)
                pending = mine[stream] = _Pending(key, stream)
                self._pending.add(pending)
                if key is not None:  # its end then has something to do
                    self._said.setdefault(key, 0)
            self._split(pending, text, done)
        for owner, line in done:
            self._line(owner, line)

    def _forget(self, pending: _Pending | None) -> None:
        if pending is not None:
            pending.live = False
            self._pending.discard(pending)

    @staticmethod
    def _split(pending: _Pending, text: str, done: list[tuple[_Pending, str]]) -> None:
        """Add ``text`` to ``pending``; its whole lines to ``done``."""
        *lines, rest = text.split("\n")
        for line in lines:
            pending.parts.append(line)
            done.append((pending, "".join(pending.parts)))
            pending.parts, pending.size = [], 0
        if lines or not pending.parts:
            pending.since = time.time()
        if "\r" in rest:  # a terminal shows what follows the last one
            pending.parts, pending.size = [], 0
            rest = rest.rpartition("\r")[2]
        if rest:
            pending.parts.append(rest)
            pending.size += len(rest)
        if pending.size >= MAX_LINE_CHARS:
            done.append((pending, "".join(pending.parts)))
            pending.parts, pending.size = [], 0

    def _line(self, pending: _Pending, line: str) -> None:
        if "\r" in line:  # a terminal shows what follows the last one
            line = line.rstrip("\r").rpartition("\r")[2]
        if not line or line.isspace():
            return
        if pending.task is None:
            task = task_text(pending.key)
            pending.task = (task, self._wanted(task))
        task, wanted = pending.task
        if not wanted:
            return
        level, stream = LEVELS[pending.stream], pending.stream
        for start in range(0, len(line), MAX_LINE_CHARS):
            if self._admitted(pending.key):
                part = shippable(line[start : start + MAX_LINE_CHARS])
                self._emit((time.time(), level, stream, part, task, None))

    def _admitted(self, key: object) -> bool:
        """Whether one more line of task ``key`` is kept: at most TASK_LINES
        a task (a task printing a gigabyte would evict every other line of
        the capture's bounded buffer); the rest are counted, and said as
        the task ends. (Lines outside tasks are bounded by that buffer.)"""
        if key is None:
            return True
        said = self._said.get(key, 0) + 1
        self._said[key] = said
        return said <= TASK_LINES

    def _lost(self, key: object, n: int) -> None:
        self._lost_of(task_text(key), n)

    def ended(self, key: object) -> None:
        """Task ``key`` ended: its partial lines are lines now, and the lines
        it wrote beyond TASK_LINES are said (and counted as dropped)."""
        if key not in self._said:  # it wrote nothing: the worker's hot path
            return
        with self._lock:
            due = [p for p in list(self._pending) if p.key == key and p.parts]
            for pending in due:
                self._forget(pending)
        for pending in due:
            self._line(pending, "".join(pending.parts))
        said = self._said.pop(key, 0)
        if said > TASK_LINES:
            task = task_text(key)
            note = (
                f"this task wrote {said:,} lines of output; the first "
                f"{TASK_LINES:,} are kept, {said - TASK_LINES:,} were not"
            )
            self._emit((time.time(), logging.WARNING, OUTPUT_NOTE, note, task, None))
            self._lost(key, said - TASK_LINES)

    def flush(self, older_than: float = 0.0) -> None:
        """Hand on the partial lines written more than ``older_than`` seconds
        ago (all with 0: a run's end)."""
        now = time.time()
        with self._lock:
            due = [p for p in list(self._pending) if now - p.since >= older_than]
            for pending in due:  # (an empty one too: its thread may be gone)
                self._forget(pending)
            due = [p for p in due if p.parts]
        for pending in due:
            self._line(pending, "".join(pending.parts))

    def warned(self, text: Callable[[], str]) -> None:
        """A warning was shown; ``text()`` formats it, only if it is kept:
        formatting reads the warning's source line (``linecache``), and one
        raised on a kernel's event loop (distributed's large-graph warning in
        its scheduler, a 9,000-line file read) is not the cluster's."""
        key = getattr(thread_state, "key", None)
        task = task_text(key)
        if (task is not None or self.outside) and self._wanted(task):
            if not self._admitted(key):
                return
            message = shippable(bounded(text().rstrip()))
            self._emit((time.time(), logging.WARNING, WARNINGS, message, task, None))


class _Tee:
    """Stands in for ``sys.stdout`` or ``sys.stderr``: writes on to the stream
    it replaced, and hands the text to ``lines``. Everything else (flush,
    fileno, encoding, isatty) is the stream's own."""

    def __init__(self, stream: TextIO, name: str, lines: Lines) -> None:
        self._dask_observe_stream = stream
        self._dask_observe_name = name
        self._dask_observe_lines: Lines | None = lines

    def write(self, text: str) -> int:
        lines = self._dask_observe_lines
        if lines is None:
            return self._dask_observe_stream.write(text)
        # A tee of ours beneath another of ours (someone's stream wrapped
        # between them) writes on only: the outer one takes the text.
        teeing = lines.teeing
        if getattr(teeing, "on", False):
            return self._dask_observe_stream.write(text)
        teeing.on = True
        try:
            written = self._dask_observe_stream.write(text)
        finally:
            teeing.on = False
        if isinstance(text, str):
            # (try, not contextlib.suppress: this runs for every write.)
            try:  # noqa: SIM105
                lines.wrote(self._dask_observe_name, text)
            except Exception:  # capture must never fail a task's print
                pass
        return written

    def writelines(self, texts: Any) -> None:
        for text in texts:
            self.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dask_observe_stream, name)


class OutputCapture:
    """The tees on ``sys.stdout``/``sys.stderr`` and the wrapped
    ``warnings.showwarning`` of one process, until :meth:`uninstall`."""

    def __init__(self, lines: Lines) -> None:
        self.lines = lines
        #: The tees by stream name (stdout, stderr), the newest of each.
        self.tees: dict[str, _Tee] = {}
        #: Every tee made (a replaced one may be put back by whoever
        #: replaced it: it must still be let go of at the end).
        self._made: list[_Tee] = []
        self._showwarning: Callable[..., Any] | None = None

    def install(self) -> None:
        self.wrap_streams()
        self.wrap_warnings()

    def wrap_streams(self) -> None:
        """Stand a tee in for ``sys.stdout`` and ``sys.stderr`` (again, where
        someone replaced ours since: a test runner's capture, a
        ``redirect_stdout`` that entered before the capture was installed
        and put back what it found as it left). Called as each task starts."""
        for name in (STDOUT, STDERR):
            stream = getattr(sys, name)
            if stream is None:  # pythonw, or a daemon with its streams closed
                continue
            if getattr(stream, "_dask_observe_lines", None) is self.lines:
                continue
            tee = _Tee(stream, name, self.lines)
            self.tees[name] = tee
            self._made.append(tee)
            setattr(sys, name, tee)

    def wrap_warnings(self) -> None:
        """Wrap ``warnings.showwarning`` (again): ``warnings.catch_warnings``
        puts back, as it leaves, the function it found as it entered, and a
        block that entered before the capture was installed (pandas', in
        another thread; a test runner's around each test) took the wrapper
        off for good. Called as each task starts: one attribute read."""
        current = warnings.showwarning
        if getattr(current, "_dask_observe", False):
            return
        self._showwarning = current
        lines = self.lines

        def showwarning(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            # Under logging.captureWarnings the warning is a log record of
            # py.warnings, which the log capture takes already. A wrapper of
            # ours beneath another's (someone wrapped between) sees the
            # warning taken already: it only passes it on.
            taken = getattr(lines.quiet, "on", False)
            if not taken and getattr(current, "__module__", None) != "logging":
                with contextlib.suppress(Exception):  # never fail a warning
                    lines.warned(
                        lambda: warnings.formatwarning(
                            message, category, filename, lineno, line
                        )
                    )
            lines.quiet.on = True
            try:
                current(message, category, filename, lineno, file, line)
            finally:
                lines.quiet.on = taken

        showwarning._dask_observe = True  # type: ignore[attr-defined]
        warnings.showwarning = showwarning

    def uninstall(self) -> None:
        """Give the process its streams back. A stream someone replaced on top
        of a tee since is left to them; the tee beneath only writes on."""
        self.lines.flush()
        for tee in reversed(self._made):
            tee._dask_observe_lines = None
            name = tee._dask_observe_name
            if getattr(sys, name) is tee:
                setattr(sys, name, tee._dask_observe_stream)
        self.tees.clear()
        self._made.clear()
        if getattr(warnings.showwarning, "_dask_observe", False):
            assert self._showwarning is not None
            warnings.showwarning = self._showwarning
        self._showwarning = None

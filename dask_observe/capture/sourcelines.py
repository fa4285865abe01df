"""Source lines of sampled frames, read from files on a thread of their own.

A stack sampled on an event loop (a long task's, on its worker's tick; a
task's that held the GIL, at a stall's tick) needs each frame's source line.
``linecache`` reads a file whole the first time one of its lines is asked
for: a 9,000-line module on a loaded host once held a worker's loop 1.24 s,
which the watchdog then reported as the loop blocked by linecache. Here the
loop only looks lines up in ``linecache``'s cache; a file not read yet is
handed to one reader thread, so the next sample of that stack has its lines.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import queue
import threading

#: Files waiting for the reader at most; more are asked again at the next
#: sample (each is read once, then kept by linecache).
MAX_WAITING = 256


class SourceLines:
    """Lines of files from ``linecache``'s cache, never read on the caller's
    thread: what is missing is read by a daemon thread, started at the first
    miss."""

    def __init__(self) -> None:
        self._waiting: set[str] = set()
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._reader: threading.Thread | None = None

    def line(self, filename: str, lineno: int) -> str:
        """The stripped line if its file was read, else "" (and it is read
        for the next time)."""
        entry = linecache.cache.get(filename)
        if entry is None or len(entry) == 1:  # unread, or only a lazy loader
            self._ask(filename)
            return ""
        lines = entry[2]
        return lines[lineno - 1].strip() if 1 <= lineno <= len(lines) else ""

    def _ask(self, filename: str) -> None:
        if filename.startswith("<") and filename.endswith(">"):
            return  # no file: linecache only knows what was put there
        with self._lock:
            if filename in self._waiting or len(self._waiting) >= MAX_WAITING:
                return
            self._waiting.add(filename)
            if self._reader is None:
                self._reader = threading.Thread(
                    target=self._read, name="dask-observe-source-lines", daemon=True
                )
                self._reader.start()
            asked = self._queue
        asked.put(filename)

    def forked(self) -> None:
        """In a forked child: none of the parent's reader is here (its thread,
        maybe its lock held): start over."""
        self.__init__()  # type: ignore[misc]

    def _read(self) -> None:
        asked = self._queue  # this process's
        while True:
            filename = asked.get()
            # An unreadable file: its lines stay "".
            with contextlib.suppress(Exception):
                linecache.getlines(filename)
            with self._lock:
                self._waiting.discard(filename)


#: The process's one reader.
source_lines = SourceLines()
os.register_at_fork(after_in_child=source_lines.forked)

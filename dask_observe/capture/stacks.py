"""Stacks of tasks that run far longer than expected, sampled on the worker.

A task that hangs says nothing: no log line, no transition, no error. The
worker's tick already knows its running tasks and since when
(``worker.LongTasks``); one running past ``hung-task.after`` has the stack of
its thread sampled every SAMPLE_EVERY_S. A stack seen before only counts up and
is shipped again when its count doubles, so a task stuck for an hour ships a
dozen events, not thousands. Tasks that finish in time cost nothing here.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import linecache
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from dask.utils import key_split

from .sourcelines import source_lines

#: Frames kept of a stack, the innermost ones: where it waits is what says why.
MAX_FRAMES = 40
#: Distinct stacks shipped per task; later ones are sampled but not shipped.
MAX_STACKS_PER_TASK = 5
#: How often a long task's stack is sampled.
SAMPLE_EVERY_S = 1.0


#: Pythons whose ``sys._current_frames`` can deadlock: a garbage collection
#: inside it runs the gc callbacks (distributed's GC diagnosis, installed in
#: every scheduler and worker) while it holds the interpreter's thread list,
#: and a thread then starting or ending waits on that list with the GIL
#: (CPython gh-106883; fixed in 3.11.9, 3.12.3, 3.13). Seen here: a P2P
#: shuffle's pyarrow threads, a worker's profiler and the GC diagnosis hung
#: a whole test process on 3.11.7.
_FRAMES_DEADLOCK = (3, 11) <= sys.version_info < (3, 11, 9) or (
    (3, 12) <= sys.version_info < (3, 12, 3)
)


class _CollectorHold:
    """The garbage collector held off while any thread is inside, and put
    back as the last leaves if it was on as the first came (each turning it
    back on as it left, a second thread still inside ran unguarded; CPython's
    own fix holds it per call, in C)."""

    def __init__(self) -> None:
        # Reentrant: a collection between two of its lines may run a callback
        # that samples stacks on the same thread.
        self._lock = threading.RLock()
        self._inside = 0
        self._was_on = False

    def __enter__(self) -> None:
        with self._lock:
            if self._inside == 0:
                self._was_on = gc.isenabled()
                gc.disable()
            self._inside += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0 and self._was_on:
                gc.enable()


collector_held = _CollectorHold()


def guard_frames(read: Callable[[], dict[int, Any]]) -> Callable[[], dict[int, Any]]:
    """``read`` (``sys._current_frames`` or a wrapper of it), with the
    collector held off during each call where that can deadlock (the
    upstream fix, done here); ``read`` itself elsewhere."""
    if not _FRAMES_DEADLOCK:
        return read

    @functools.wraps(read)
    def guarded() -> dict[int, Any]:
        with collector_held:
            return read()

    return guarded


def current_frames() -> dict[int, Any]:
    """``sys._current_frames()``, guarded (``guard_frames``). Read them
    through :func:`thread_frames`, which lets go of them."""
    return _guarded_frames()


@contextlib.contextmanager
def thread_frames() -> Iterator[dict[int, Any]]:
    """Every thread's current frame (:func:`current_frames`), emptied as the
    block ends, however it ends. The dict holds the frame of the thread that
    reads it, whose locals hold the dict: a cycle that only a full garbage
    collection frees, and until then every frame read stays alive, with the
    locals of the functions that returned since. A task of 770 MiB that ran
    past hung-task.after, its stack sampled in such a cycle, kept all of it
    after it returned (memory-pressure and spilling then followed in the
    next runs: the memory was the capture's)."""
    frames = current_frames()
    try:
        yield frames
    finally:
        frames.clear()


_guarded_frames = guard_frames(lambda: sys._current_frames())


@functools.cache
def _library_roots() -> tuple[str, ...]:
    """Where the standard library and installed packages live on this worker:
    a frame under them is library code, and the innermost frame that is not
    is where the user's code waits. Read at the first stack sampled, not as
    the capture is set up (``sysconfig`` takes 1-2 ms to import: each
    worker's part of a first recorded block)."""
    return tuple(
        sorted(
            {
                path
                for name in ("stdlib", "platstdlib", "purelib", "platlib")
                if (path := sysconfig.get_paths().get(name))
            }
        )
    )


#: A frame as shipped: file, line, function, source line, library code or not.
Frame = tuple[str, int, str, str, bool]


def is_library(filename: str) -> bool:
    """Whether a frame's file is the standard library's or a package's.
    ``<dynamic-code>`` (a function cloudpickle shipped by value: one defined
    in a notebook or script) is the user's."""
    return (
        filename.startswith("<frozen")
        or filename.startswith(_library_roots())
        or "site-packages" in filename
        or "dist-packages" in filename
    )


def where(frame: Any, limit: int = MAX_FRAMES) -> list[tuple[str, int, str]]:
    """A thread's innermost ``limit`` frames (file, line, function),
    outermost first: names only, no source line read."""
    found: list[tuple[str, int, str]] = []
    while frame is not None and len(found) < limit:
        code = frame.f_code
        found.append((code.co_filename, frame.f_lineno or 0, code.co_name))
        frame = frame.f_back
    found.reverse()
    return found


def shipped(stack: list[tuple[str, int, str]], read: bool = False) -> list[Frame]:
    """Frames as the capture ships them, with their source lines: those
    already read (``sourcelines``: never a file read on an event loop), or
    with ``read``, read now."""
    return [
        (
            file,
            line,
            name,
            linecache.getline(file, line).strip()
            if read
            else source_lines.line(file, line),
            is_library(file),
        )
        for file, line, name in stack
    ]


class StackSampler:
    """Samples, counts and ships the stacks of a worker's long tasks."""

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        #: key -> digest of a stack -> times it was sampled.
        self._counts: dict[str, dict[str, int]] = {}
        self._next_at: dict[str, float] = {}

    def ended(self, key: str) -> None:
        self._counts.pop(key, None)
        self._next_at.pop(key, None)

    def sample(
        self,
        now: float,
        running: Mapping[str, float],
        threads: Mapping[int, Any],
        ship: Callable[[dict[str, Any]], None],
        *,
        every: bool = False,
        native: Callable[[dict[int, str]], None] | None = None,
    ) -> None:
        """Sample the tasks of ``running`` (key -> start) that have run past
        ``after_s`` and are due; with ``every``, every running task now, and
        ship each stack whatever its count (a run that stops keeps them).
        ``threads`` is the worker's ``active_threads`` (thread id -> key);
        ``native`` is asked for the native frames of the threads whose stack
        was seen for the first time (thread id -> key)."""
        if not every and not any(now - t >= self.after_s for t in running.values()):
            return  # the common case: one pass over the running tasks, no more
        # Where each due task is, read while the frames are held; hashing,
        # shipping and native dumps after, without them.
        due: list[tuple[int, Any, str, float, list[tuple[str, int, str]]]] = []
        with thread_frames() as current:
            for thread, task in list(threads.items()):
                key = str(task)
                since = running.get(key)
                if since is None or thread not in current:
                    continue
                if not every and (
                    now - since < self.after_s or now < self._next_at.get(key, 0.0)
                ):
                    continue
                due.append((thread, task, key, since, where(current[thread])))
        new: dict[int, str] = {}
        for thread, task, key, since, stack in due:
            self._next_at[key] = now + SAMPLE_EVERY_S
            # Where it is, not its source lines: a line read since the last
            # sample does not make it another stack.
            digest = hashlib.sha1(repr(stack).encode()).hexdigest()
            counts = self._counts.setdefault(key, {})
            if digest not in counts and len(counts) >= MAX_STACKS_PER_TASK:
                continue
            count = counts[digest] = counts.get(digest, 0) + 1
            if count == 1 or every:
                new[thread] = key
            if every or count & (count - 1) == 0:  # 1, 2, 4, 8...
                ship(
                    {
                        "key": key,
                        "prefix": key_split(task),
                        "thread": thread,
                        "since": since,
                        "count": count,
                        # At a stop (every), read now: it is the last.
                        "frames": [list(f) for f in shipped(stack, read=every)],
                    }
                )
        if new and native is not None:
            native(new)

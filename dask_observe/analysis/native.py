"""A run's native profile (py-spy's, recorded on request: the capture's
``nativeprofile``): its samples given to the tasks that ran on each thread
meanwhile, how much of each task prefix's time was in compiled code and in
which libraries, and its native frames grafted beneath the Python frames of
distributed's profile, so that the icicle descends into them."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from typing import Any

from dask_observe.capture.syscalls import SYSCALL
from dask_observe.plaintext import library

#: A call path's Python part: (filename, the line its function starts on,
#: name) of each frame; the first two as distributed's profile names its
#: nodes, the name as py-spy has it (a method with its class).
PyPath = tuple[tuple[str, int, str], ...]
#: The compiled frames beneath a Python frame: (name, filename, line) each.
NativePath = tuple[tuple[str, str, int], ...]

#: Distinct (Python path, native frames) pairs kept a prefix, most time first.
MAX_PATHS = 400
#: The dynamic loader: a frame in it beneath Python's is the interpreter
#: finding its thread's state (``__tls_get_addr``, on Python 3.13: 3-9 % of
#: a pure-Python loop's samples), not compiled code the task ran.
_LOADER = re.compile(r"(^|/)ld-[^/]*\.so[^/]*$")
#: Where distributed's worker calls a task: its profile starts below.
_WORKER_FILE = "distributed/worker.py"


def is_native(filename: str) -> bool:
    """A py-spy frame of compiled code (a shared library, or unknown)."""
    return not (filename.endswith(".py") or filename.startswith("<"))


def _split(
    frames: list[list[Any]], stack: list[int]
) -> tuple[PyPath, NativePath, bool]:
    """A stack (outermost first) as its Python path below distributed's
    worker (as distributed's profile has it), the compiled frames beneath
    its innermost Python frame, and whether it runs a task (distributed's
    worker called what is below; an idle executor thread waits for work)."""
    named = [frames[i] for i in stack]
    start = 0
    for i, (_, filename, _) in enumerate(named):
        if str(filename).endswith(_WORKER_FILE):
            start = i + 1
    python: list[tuple[str, int, str]] = []
    native: list[tuple[str, str, int]] = []
    for name, filename, line in named[start:]:
        if _LOADER.search(str(filename)):
            continue  # the interpreter's thread-local lookups (3.13), no task's
        if is_native(str(filename)):
            native.append((str(name), str(filename), int(line)))
        else:
            python.append((str(filename), int(line), str(name)))
            native = []  # compiled frames with Python beneath: the Python's
    return tuple(python), tuple(native), start > 0


#: The offsets tried between py-spy's clock and the tasks' (seconds): its
#: origin is its start, a few milliseconds after it was asked to start, and
#: a sample's time is when its threads were unwound, not read.
_OFFSETS = [i * 0.005 for i in range(-30, 31)]
#: Samples a process's offset is judged on at most.
_JUDGED = 4000

Span = tuple[float, float, str]
Point = tuple[list[Span], list[float], float, int]


def _inside(spans: list[Span], starts: list[float], at: float) -> int:
    """The index of the span ``at`` falls in, or -1."""
    i = bisect.bisect_right(starts, at) - 1
    return i if i >= 0 and at <= spans[i][1] else -1


#: Samples this far inside a task (seconds) tell which Python paths its
#: prefix runs, whatever the clocks' offset (it is less than this).
_INTERIOR_S = 0.16


def _offset(
    points: list[Point], paths: list[PyPath], busy: list[bool]
) -> tuple[float, dict[PyPath, set[str]]]:
    """The shift of py-spy's times that best agrees with the tasks' windows:
    a sample of a running task inside one of a prefix that runs its Python
    path (as the samples well inside that prefix's tasks show), of an idle
    thread outside any; the middle of the best shifts, nearest zero on a
    tie. (Idle and busy alone say little where a thread runs one task after
    another: there the paths tell where one prefix's task gave way to
    another's.) With it, the prefixes each Python path was seen to run in."""
    step = max(1, len(points) // _JUDGED)
    judged = list(zip(points[::step], paths[::step], busy[::step], strict=True))
    runs: dict[PyPath, set[str]] = {}
    for (spans, starts, at, _), path, running in judged:
        i = _inside(spans, starts, at)
        if running and i >= 0:
            start, stop, prefix = spans[i]
            if start + _INTERIOR_S <= at <= stop - _INTERIOR_S:
                runs.setdefault(path, set()).add(prefix)

    def agrees(spans: list[Span], starts: list[float], at: float, path: PyPath,
               running: bool) -> bool:  # fmt: skip
        i = _inside(spans, starts, at)
        if i < 0 or not running:
            return i < 0 and not running
        known = runs.get(path)
        return known is None or spans[i][2] in known

    scores = [
        sum(
            agrees(spans, starts, at + shift, path, running)
            for (spans, starts, at, _), path, running in judged
        )
        for shift in _OFFSETS
    ]
    best = max(scores)
    tied = [
        shift for shift, score in zip(_OFFSETS, scores, strict=True) if score == best
    ]
    middle = (tied[0] + tied[-1]) / 2
    return min(tied, key=lambda shift: (abs(shift - middle), abs(shift))), runs


def attribute(
    answers: Iterable[tuple[list[str], dict[str, Any]]],
    tasks: Iterable[tuple[str, int, float, float, str]],
) -> dict[str, dict[tuple[PyPath, NativePath], float]]:
    """Seconds of each (Python path, native frames) by task prefix ("" for
    all): ``answers`` are the processes' recordings, each with the workers
    it ran; ``tasks`` (worker, thread, start, stop, prefix) the run's, on the
    same clock. A stack counts where it was seen running a task while a
    task of the run ran on its thread; idle threads and others' tasks are
    left out.

    py-spy's trace says when a thread's stack was seen and when it was next
    seen different: its samples are not evenly spaced (a slow native unwind
    is followed by quick ones that catch up), so each stack counts for the
    time it held, from when it was seen to when another was, within the
    task it was seen in and the next ones of its prefix: the rest of such a
    stretch is of no task it can tell (the thread went idle, or another
    prefix's task began, whose own stack is seen at its next sample). So a
    prefix's sampled time is at most its tasks' time, short by up to a
    sample where another prefix's task ended. py-spy's clock is aligned with the tasks'
    first (``_offset``): off by tens of milliseconds, a sample at the edge
    of each task went to its neighbour (11 % of a Python loop's time read
    as NumPy's). What is left of that is told by the code: a stack whose
    Python path ran only in another prefix's tasks (seen well inside them)
    is not counted for this one (2-8 % of the loop's time, still)."""
    windows: dict[tuple[str, int], list[Span]] = {}
    for worker, thread, start, stop, prefix in tasks:
        windows.setdefault((worker, int(thread)), []).append((start, stop, prefix))
    found: dict[str, dict[tuple[PyPath, NativePath], float]] = {"": {}}
    for workers, trace in answers:
        frames, stacks = trace.get("frames") or [], trace.get("stacks") or []
        split = [_split(frames, stack) for stack in stacks]
        seen: list[tuple[Point, float]] = []
        for ident, intervals in (trace.get("threads") or {}).items():
            spans = sorted(s for w in workers for s in windows.get((w, int(ident)), []))
            if spans:
                starts = [s[0] for s in spans]
                seen += [
                    ((spans, starts, t0, index), t1) for t0, t1, index in intervals
                ]
        if not seen:
            continue
        shift, runs = _offset(
            [p for p, _ in seen],
            [split[p[3]][0] for p, _ in seen],
            [split[p[3]][2] for p, _ in seen],
        )
        for (spans, starts, t0, index), t1 in seen:
            python, native, running = split[index]
            if not running:
                continue  # an idle thread (between tasks, or at their edges)
            # The task it was seen in; or, seen running in the gap before a
            # task (the clocks a few milliseconds apart), the task that came.
            i = _inside(spans, starts, t0 + shift)
            if i < 0:
                i = bisect.bisect_right(starts, t0 + shift)
                if i >= len(spans) or spans[i][0] >= t1 + shift:
                    continue  # no task of the run meanwhile
            prefix, key = spans[i][2], (python, native)
            known = runs.get(python)
            if known is not None and prefix not in known:
                continue  # another prefix's code, seen at a task's edge
            # The time it held in its task and in the next tasks of the same
            # prefix (a map's chunks run the same loop, seen unchanged from
            # one task to the next); another prefix's task has its own.
            held = 0.0
            while i < len(spans) and spans[i][0] < t1 + shift:
                if spans[i][2] == prefix:
                    held += min(t1 + shift, spans[i][1]) - max(t0 + shift, spans[i][0])
                i += 1
            for part in (prefix, ""):
                into = found.setdefault(part, {})
                into[key] = into.get(key, 0.0) + held
    return found


#: Compiled frames that wait (for a lock, the GIL, a sleep, I/O), or hand
#: a lock over: a thread in them is not working in compiled code. A Python loop's
#: thread waits for the GIL in pthread_cond_timedwait, beneath the loop's
#: own frame: counted as compiled work, a pure-Python prefix read 19 %
#: "in compiled code (libc)".
WAITS = frozenset({
    "pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait",
    "sem_wait", "sem_timedwait", "sem_clockwait", "__new_sem_wait_slow64",
    "__futex_abstimed_wait_common", "__lll_lock_wait", "futex_wait",
    "take_gil", "PyThread_acquire_lock_timed", "nanosleep", "clock_nanosleep",
    "usleep", "epoll_wait", "poll", "ppoll", "select", "pselect", "recv",
    "recvfrom", "accept", "accept4", "wait4", "waitpid",
    # Handing a lock (the GIL) over: a moment of the same waiting.
    "pthread_cond_signal", "pthread_cond_broadcast", "pthread_mutex_lock",
    "pthread_mutex_unlock", "drop_gil", "sem_post", "__lll_lock_wake",
    # An unnamed frame in the kernel (capture.syscalls): libc's internal
    # futex wait and wake, which a stripped libc does not name.
    SYSCALL,
})  # fmt: skip


def innermost_named(frames: Sequence[str]) -> str | None:
    """Of py-spy's compiled frames as shipped ("function (library)",
    outermost first), the innermost that names its function. A frame py-spy
    could not symbolize is an address ("0x7f08ef78b874 (libc.so.6)"), which
    tells a reader nothing: a regular expression's C, in libc beneath
    sre_ucs1_match, read "in compiled code at 0x7f08ef78b874 (libc.so.6)".
    None for no frames; the innermost address where none is named."""
    named = [f for f in frames if not f.startswith("0x")]
    found = named or list(frames)
    return found[-1] if found else None


#: The kernel's code mapped into every process, where a thread reads the
#: clock. A thread whose innermost frame is there is in the interpreter's
#: timed wait for the GIL, which reads the clock at each turn (a task that
#: reads the clock itself spends nanoseconds a call there): under load, 6 %
#: of a pure Python loop's samples, which read "6 % in compiled code
#: ([vdso])".
KERNEL_MAPPED = "[vdso]"


def shipped_waits(frames: Sequence[str]) -> bool:
    """Whether py-spy's compiled frames as shipped ("function (library)")
    wait rather than work (``WAITS``), as :func:`is_waiting` tells of
    parsed ones."""
    return any(frame.split(" (", 1)[0] in WAITS for frame in frames) or (
        bool(frames) and frames[-1].endswith(f"({KERNEL_MAPPED})")
    )


def is_waiting(native: NativePath) -> bool:
    """Whether compiled frames beneath Python's wait rather than work: a
    waiting function among them (``WAITS``), or the innermost in the
    kernel's mapped code (``KERNEL_MAPPED``)."""
    return any(name in WAITS for name, _, _ in native) or (
        bool(native) and native[-1][1] == KERNEL_MAPPED
    )


def summarize(
    paths: dict[tuple[PyPath, NativePath], float],
) -> dict[str, Any]:
    """A prefix's native profile as stored: seconds sampled; working in
    compiled code (a stack whose innermost frame is compiled and does not
    wait: ``WAITS``), by library (of that innermost frame); waiting in
    compiled code; and its MAX_PATHS heaviest paths."""
    sampled = sum(paths.values())
    libraries: dict[str, float] = {}
    waiting = 0.0
    for (_, native), seconds in paths.items():
        if native and is_waiting(native):
            waiting += seconds
        elif native:
            lib = library(native[-1][1])
            libraries[lib] = libraries.get(lib, 0.0) + seconds
    heaviest = sorted(paths.items(), key=lambda item: -item[1])[:MAX_PATHS]
    return {
        "sampled_s": round(sampled, 4),
        "compiled_s": round(sum(libraries.values()), 4),
        "waiting_s": round(waiting, 4),
        "libraries": {
            k: round(v, 4) for k, v in sorted(libraries.items(), key=lambda i: -i[1])
        },
        "paths": [
            [[list(f) for f in python], [list(f) for f in native], round(s, 4)]
            for (python, native), s in heaviest
        ],
    }


def graft(profile: dict[str, Any], native: dict[str, Any]) -> dict[str, Any]:
    """distributed's pruned profile tree (``analysis.trees``) with the native
    profile's compiled frames beneath the Python frames they ran under.

    Each of the native profile's paths is grafted at the deepest node of its
    Python frames that distributed's tree has with samples of its own (those
    no callee took; distributed's tree may lack the innermost Python frame,
    NumPy's ``sort`` wrapper, whose samples it left with its caller): that
    node's own samples are shared out as the native profile shares its time
    between its own Python lines and what ran beneath, the Python frames the
    tree lacks and then the compiled ones. A compiled node has ``native``
    True; a node the native profile never saw is left as it was."""
    nodes: dict[tuple[tuple[str, int], ...], dict[str, Any]] = {}

    def index(node: dict[str, Any], path: tuple[tuple[str, int], ...]) -> None:
        nodes[path] = node
        for child in node["children"]:
            index(child, (*path, (str(child["filename"]), int(child["line"]))))

    def own(node: dict[str, Any]) -> int:
        return int(node["count"]) - sum(int(c["count"]) for c in node["children"])

    index(profile["root"], ())
    shares: dict[int, dict[tuple[tuple[str, str, int, bool], ...], float]] = {}
    for python, below, seconds in native.get("paths") or []:
        frames = [
            (str(f[0]), int(f[1]), str(f[2]) if len(f) > 2 else "") for f in python
        ]
        for depth in range(len(frames), 0, -1):
            point = nodes.get(tuple((f, line) for f, line, _ in frames[:depth]))
            if point is not None and own(point) > 0:
                break
        else:
            continue  # nowhere in distributed's tree with samples of its own
        tail = tuple(
            (name, f, line, False) for f, line, name in frames[depth:]
        ) + tuple((str(n), str(f), int(line), True) for n, f, line in below)
        into = shares.setdefault(id(point), {})
        into[tail] = into.get(tail, 0.0) + float(seconds)

    def chain(
        frames: tuple[tuple[str, str, int, bool], ...], count: int
    ) -> dict[str, Any]:
        name, filename, line, compiled = frames[0]
        node: dict[str, Any] = {
            "name": name,
            "filename": filename,
            "line": line,
            "count": count,
            "children": [chain(frames[1:], count)] if len(frames) > 1 else [],
        }
        if compiled:
            node["native"] = True
        return node

    def copy(node: dict[str, Any]) -> dict[str, Any]:
        children = [copy(c) for c in node["children"]]
        found = shares.get(id(node))
        mine = own(node)
        if found and mine > 0:
            total = sum(found.values())
            grafted: dict[tuple[str, str, int], dict[str, Any]] = {}
            left = mine  # (rounded shares never take more than the node had)
            for tail, seconds in sorted(found.items(), key=lambda i: -i[1]):
                count = min(round(mine * seconds / total), left)
                if not tail or count <= 0:
                    continue  # its own lines' share stays its own
                left -= count
                _merge_into(grafted, chain(tail, count))
            children += list(grafted.values())
        return {**node, "children": children}

    return {**profile, "root": copy(profile["root"])}


def _merge_into(
    siblings: dict[tuple[str, str, int], dict[str, Any]], node: dict[str, Any]
) -> None:
    key = (node["name"], node["filename"], node["line"])
    same = siblings.get(key)
    if same is None:
        siblings[key] = {**node, "children": list(node["children"])}
        return
    same["count"] += node["count"]
    kids = {(c["name"], c["filename"], c["line"]): c for c in same["children"]}
    for child in node["children"]:
        _merge_into(kids, child)
    same["children"] = list(kids.values())


def stored(run: Any) -> dict[str, Any] | None:
    """The native profile a run stored (its last ``native-profile`` event's
    data), or None."""
    found = run.event_rows("native-profile")
    return found[-1][3] if found else None


NATIVE_COLUMNS = (
    "prefix", "sampled_s", "compiled_s", "compiled_share", "waiting_s", "libraries",
)  # fmt: skip
NativeRow = tuple[str, float, float, float, float, str]


def native_rows(native: dict[str, Any] | None) -> list[NativeRow]:
    """``Run.native``'s rows (NATIVE_COLUMNS): each prefix's sampled seconds,
    its seconds working in compiled code and their share, its seconds
    waiting in compiled code, and the libraries it worked in with their
    shares, most first; the whole run ("") first."""
    rows = []
    for prefix, found in ((native or {}).get("prefixes") or {}).items():
        sampled = float(found.get("sampled_s") or 0.0)
        compiled = float(found.get("compiled_s") or 0.0)
        libraries = ", ".join(
            f"{name} {seconds / sampled:.0%}"
            for name, seconds in (found.get("libraries") or {}).items()
            if sampled
        )
        share = compiled / sampled if sampled else 0.0
        waiting = float(found.get("waiting_s") or 0.0)
        rows.append((prefix, sampled, compiled, share, waiting, libraries))
    return sorted(rows, key=lambda row: (row[0] != "", -row[1]))

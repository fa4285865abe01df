"""The data of the events the capture ships, typed for the readers.

An event's data travels and is stored as a JSON object; its producer writes
it as a dict, fields absent where they do not apply. Readers go through one
class per kind here, whose ``from_data`` is tolerant: a field that is missing
or of the wrong type (another version's capture, a partial run) reads as its
default, and data that is not an object reads as None.
"""

from __future__ import annotations

from typing import Any, NamedTuple

#: A shipped frame: [file, line, function, source line, in a library].
Frame = list[Any]


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _count(value: object) -> int:
    found = _number(value)
    return int(found) if found is not None else 0


def _text(value: object) -> str | None:
    return str(value) if value is not None and value != "" else None


def _frames(value: object) -> list[Frame]:
    if not isinstance(value, list | tuple):
        return []
    return [list(f) for f in value if isinstance(f, list | tuple)]


class HostSample(NamedTuple):
    """``host-load`` (``capture.hostload``): how oversubscribed a process's host
    was over ``seconds`` (one, or the run's whole window where ``run``)."""

    seconds: float = 1.0
    #: Share of the time some runnable thread waited for a core.
    waiting: float | None = None
    runnable: int | None = None
    cores: int = 1
    run: bool = False

    @classmethod
    def from_data(cls, data: object) -> HostSample | None:
        if not isinstance(data, dict):
            return None
        runnable = _number(data.get("runnable"))
        return cls(
            _number(data.get("seconds")) or 1.0,
            _number(data.get("waiting")),
            None if runnable is None else int(runnable),
            max(1, int(_number(data.get("cores")) or 1)),
            bool(data.get("run")),
        )


class Held(NamedTuple):
    """What the watchdog saw hold an event loop through a stall
    (``capture.stacks``): the thread (``task``, ``loop`` or ``other``), a
    task thread's ident and key, its frames; ``since`` and ``until`` are the
    stall's."""

    thread: str | None
    key: str | None
    ident: int | None
    frames: list[Frame]
    since: float
    until: float

    @classmethod
    def from_data(cls, data: object, since: float, until: float) -> Held | None:
        if not isinstance(data, dict) or not isinstance(data.get("frames"), list):
            return None
        ident = _number(data.get("ident"))
        return cls(
            _text(data.get("thread")),
            _text(data.get("key")),
            None if ident is None else int(ident),
            _frames(data.get("frames")),
            since,
            until,
        )

    @property
    def importing(self) -> bool:
        """Whether it was the loop's own thread, inside Python's import
        machinery."""
        return self.thread == "loop" and any(
            f and str(f[0]).startswith("<frozen importlib") for f in self.frames
        )


class LoopStall(NamedTuple):
    """``event-loop-stall`` (``capture.stalls``): an event loop's tick that
    came ``seconds`` late, and what its process did meanwhile."""

    seconds: float
    #: When it began (epoch seconds).
    since: float
    #: CPU seconds of the whole process, and of the loop's own thread.
    cpu: float | None
    loop_cpu: float | None
    #: Seconds its worker spent moving data to or from disk.
    spilled: float
    #: Seconds of full garbage collections.
    gc: float
    #: Modules imported, and their top-level packages.
    imported: int
    packages: list[str]
    held: Held | None
    #: Seconds the loop's thread was ready to run but waited for a core (the
    #: kernel's run queue); None unknown (a capture before it, not Linux).
    loop_queued: float | None = None

    @classmethod
    def from_data(cls, data: object, time: float) -> LoopStall:
        found = data if isinstance(data, dict) else {}
        since = _number(found.get("since")) or time
        packages = found.get("packages")
        return cls(
            _number(found.get("seconds")) or 0.0,
            since,
            _number(found.get("cpu")),
            _number(found.get("loop_cpu")),
            _number(found.get("spilled")) or 0.0,
            _number(found.get("gc")) or 0.0,
            max(0, _count(found.get("imported"))),
            [str(p) for p in packages] if isinstance(packages, list) else [],
            Held.from_data(found.get("held"), since, time),
            _number(found.get("loop_queued")),
        )


class TaskStack(NamedTuple):
    """``task-stack`` (``capture.stacks``): a long task's stack as sampled."""

    key: str
    prefix: str | None
    thread: int | None
    #: Times this stack was sampled so far.
    times: int
    frames: list[Frame]

    @classmethod
    def from_data(cls, data: object) -> TaskStack | None:
        if not isinstance(data, dict):
            return None
        thread = _number(data.get("thread"))
        return cls(
            str(data.get("key")),
            _text(data.get("prefix")),
            None if thread is None else int(thread),
            _count(data.get("count")) or 1,
            _frames(data.get("frames")),
        )


class TaskNative(NamedTuple):
    """``task-native`` (``capture.pyspy``): the compiled frames beneath a
    task's Python ones (innermost last), or why none could be read."""

    key: str | None
    native: list[str]
    reason: str | None

    @classmethod
    def from_data(cls, data: object) -> TaskNative | None:
        if not isinstance(data, dict):
            return None
        native = data.get("native")
        return cls(
            _text(data.get("key")),
            [str(f) for f in native] if isinstance(native, list) else [],
            _text(data.get("reason")),
        )


class TaskRunning(NamedTuple):
    """``task-running`` (``capture.worker``): a task running for a second or
    more, and since when (epoch seconds, the worker's clock moved onto the
    scheduler's)."""

    key: str
    since: float

    @classmethod
    def from_data(cls, data: object) -> TaskRunning | None:
        if not isinstance(data, dict) or "key" not in data:
            return None
        since = _number(data.get("since"))
        return None if since is None else cls(str(data["key"]), since)


class ClockOffset(NamedTuple):
    """``clock-offset`` (``capture.worker``, and the recorder's own with
    ``of`` "client"): seconds a process's times were moved to be on the
    scheduler's clock."""

    seconds: float
    of: str | None

    @classmethod
    def from_data(cls, data: object) -> ClockOffset | None:
        if not isinstance(data, dict):
            return None
        seconds = _number(data.get("seconds"))
        return None if seconds is None else cls(seconds, _text(data.get("of")))


class Transfer(NamedTuple):
    """``transfer`` (``capture.worker``): a second's incoming transfers of one
    worker from one peer and type of data, summed."""

    peer: str | None
    type: str | None
    bytes: int
    seconds: float
    transfers: int
    keys: int

    @classmethod
    def from_data(cls, data: object) -> Transfer | None:
        if not isinstance(data, dict):
            return None
        return cls(
            _text(data.get("from")),
            _text(data.get("type")),
            _count(data.get("bytes")),
            _number(data.get("seconds")) or 0.0,
            _count(data.get("count")),
            _count(data.get("keys")),
        )


class WorkerAdded(NamedTuple):
    """``worker-added`` (``capture.scheduler``)."""

    nthreads: int | None
    memory_limit: float | None

    @classmethod
    def from_data(cls, data: object) -> WorkerAdded:
        found = data if isinstance(data, dict) else {}
        nthreads = _number(found.get("nthreads"))
        return cls(
            None if nthreads is None else int(nthreads),
            _number(found.get("memory_limit")),
        )


class WorkerRemoved(NamedTuple):
    """``worker-removed`` (``capture.scheduler``): the stimulus says why
    (heartbeat missing, worker closed, connection lost...)."""

    stimulus_id: str

    @classmethod
    def from_data(cls, data: object) -> WorkerRemoved:
        found = data if isinstance(data, dict) else {}
        return cls(str(found.get("stimulus_id") or ""))


class MemoryRestart(NamedTuple):
    """``worker-restart-memory`` (``capture.nanny``): a nanny restarted its
    worker for memory; the RSS it measured."""

    worker: str | None
    pid: int | None
    #: Bytes.
    rss: int | None

    @classmethod
    def from_data(cls, data: object) -> MemoryRestart:
        found = data if isinstance(data, dict) else {}
        pid, rss = (_number(found.get(k)) for k in ("pid", "rss"))
        return cls(
            _text(found.get("worker")),
            None if pid is None else int(pid),
            None if rss is None else int(rss),
        )


class SchedulerAction(NamedTuple):
    """An event of distributed's own scheduler log (its kind a worker's
    address or "all"): ``action`` says what (``worker-status-change`` with
    the new ``status``; ``restart-workers`` with the ``workers``)."""

    action: str | None
    status: str | None
    workers: list[str]

    @classmethod
    def from_data(cls, data: object) -> SchedulerAction | None:
        if not isinstance(data, dict) or "action" not in data:
            return None
        workers = data.get("workers")
        return cls(
            _text(data.get("action")),
            _text(data.get("status")),
            [str(w) for w in workers] if isinstance(workers, list | tuple) else [],
        )


def _names(value: object) -> list[str]:
    if not isinstance(value, list | tuple):
        return []
    return [str(v) for v in value]


def _amounts(value: object) -> dict[str, float]:
    if not isinstance(value, dict):
        return {}
    amounts = {str(k): _number(v) for k, v in value.items()}
    return {k: v for k, v in amounts.items() if v is not None}


def _all_of(kind: Any, value: object) -> list[Any]:
    if not isinstance(value, list | tuple):
        return []
    return [found for v in value if (found := kind.from_data(v)) is not None]


class PictureTask(NamedTuple):
    """A task in a run's picture (:class:`RunPicture`): one a worker runs, or
    one no worker can run (then what it asks for: ``resources``, ``workers``,
    ``hosts``)."""

    key: str
    prefix: str
    #: Seconds it had run (its worker's last word, and the time since); None
    #: where nobody said: assigned, not yet executing, or unknown.
    elapsed: float | None
    #: The typical duration of its prefix's tasks, where known.
    typical: float | None
    #: Its client let go of it while its worker still ran it (capture.letgo).
    let_go: bool
    resources: dict[str, float]
    workers: list[str]
    hosts: list[str]

    @classmethod
    def from_data(cls, data: object) -> PictureTask | None:
        if not isinstance(data, dict) or data.get("key") is None:
            return None
        return cls(
            str(data["key"]),
            str(data.get("prefix") or ""),
            _number(data.get("elapsed")),
            _number(data.get("typical")),
            bool(data.get("let_go")),
            _amounts(data.get("resources")),
            _names(data.get("workers")),
            _names(data.get("hosts")),
        )


class PictureWorker(NamedTuple):
    """A worker in a run's picture: its state, memory (bytes) and the tasks it
    had processing, the longest-running first (up to ``MAX_TASKS``)."""

    worker: str
    status: str
    nthreads: int
    resources: dict[str, float]
    managed: float
    unmanaged: float
    spilled: float
    #: Its memory limit, 0 for none.
    limit: float
    n_processing: int
    n_executing: int
    processing: list[PictureTask]

    @property
    def memory(self) -> float:
        """What its process holds: managed and unmanaged (spilled is on disk)."""
        return self.managed + self.unmanaged

    @classmethod
    def from_data(cls, data: object) -> PictureWorker | None:
        if not isinstance(data, dict) or data.get("worker") is None:
            return None
        return cls(
            str(data["worker"]),
            str(data.get("status") or "unknown"),
            _count(data.get("nthreads")),
            _amounts(data.get("resources")),
            _number(data.get("managed")) or 0.0,
            _number(data.get("unmanaged")) or 0.0,
            _number(data.get("spilled")) or 0.0,
            _number(data.get("limit")) or 0.0,
            _count(data.get("n_processing")),
            _count(data.get("n_executing")),
            _all_of(PictureTask, data.get("processing")),
        )


class RunPicture(NamedTuple):
    """``stall`` and ``run-stopped`` (``capture.progress.describe``): the
    cluster as a run saw it when it stopped moving, or was stopped with tasks
    running. Bounded: the busiest workers and a few tasks each."""

    #: The run's span (None from a capture that did not say).
    span: str | None
    #: When the run last finished a task (epoch seconds).
    since: float
    #: Seconds since then, when the picture was taken.
    stalled_s: float
    n_workers: int
    n_threads: int
    n_queued: int
    workers: list[PictureWorker]
    n_unrunnable: int
    #: Tasks no worker can run (up to ``MAX_TASKS``).
    unrunnable: list[PictureTask]

    @property
    def waiting(self) -> int:
        """Tasks waiting: queued, and those no worker can run."""
        return self.n_queued + self.n_unrunnable

    @classmethod
    def from_data(cls, data: object) -> RunPicture | None:
        if not isinstance(data, dict):
            return None
        unrunnable = _all_of(PictureTask, data.get("unrunnable"))
        return cls(
            _text(data.get("span")),
            _number(data.get("since")) or 0.0,
            _number(data.get("stalled_s")) or 0.0,
            _count(data.get("n_workers")),
            _count(data.get("n_threads")),
            _count(data.get("n_queued")),
            _all_of(PictureWorker, data.get("workers")),
            _count(data.get("n_unrunnable")) or len(unrunnable),
            unrunnable,
        )

"""One log handler per process, routing each record to the plugin it belongs to.

A LocalCluster runs the scheduler and every nanny inside the client's process, and
``processes=False`` puts workers there too: several plugins then share one logging
tree. Each record goes to exactly one of them: by logger (``distributed.nanny*`` to a
nanny, ``distributed.worker*`` to a worker, the rest of ``distributed`` to the
scheduler), then among several of that role (two clusters in one kernel) to those of
the event loop that logged it, by the worker whose task is logging, or by the worker
address or process id that the message names. The process's capture of what
tasks print (``output``), put on by the first worker sink that asks for it,
hands its lines to the same routing, and so does the capture of what is
written to fds 1 and 2 (``fdout``: C libraries, subprocesses), put on in a
worker's own process only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .fdout import FdCapture
from .logs import CaptureHandler, LogTuple
from .output import Lines, OutputCapture

#: Roles in the order a record falls back to when its own role is absent.
_FALLBACK = ("scheduler", "worker", "nanny")


@dataclass(eq=False)
class Sink:
    """A plugin that takes records: its role, where they go, who it speaks for."""

    role: str
    append: Callable[[LogTuple, str | None], None]
    worker: Callable[[], str | None] = lambda: None
    pid: Callable[[], int | None] = lambda: None
    levels: Mapping[str, int] = field(default_factory=dict)
    #: Whether what tasks print and warn is captured too (``capture.output``).
    output: bool = False
    #: Counts records of its process not kept (a task's output beyond its cap).
    lost: Callable[[int], None] = lambda n: None
    #: The keys of the tasks running on its worker now (a worker's).
    running: Callable[[], list[str]] = lambda: []
    #: The thread of the event loop it runs on (a plugin makes its sink
    #: there): two LocalClusters of one kernel each log from their own.
    thread: int = field(default_factory=threading.get_ident)

    def names(self, message: str) -> bool:
        worker, pid = self.worker(), self.pid()
        return bool(
            (worker and worker in message) or (pid and f"process {pid} " in message)
        )


def _role_of(logger_name: str) -> str:
    if logger_name.startswith("distributed.nanny"):
        return "nanny"
    if logger_name.startswith("distributed.worker"):
        return "worker"
    if logger_name.startswith("distributed"):
        return "scheduler"
    return "worker"  # user code logs from tasks


def _task_worker() -> str | None:
    """The address of the worker whose task runs on this thread, if any."""
    from distributed.worker import thread_state  # type: ignore[attr-defined]

    state = getattr(thread_state, "execution_state", None)
    worker = state.get("worker") if isinstance(state, dict) else None
    return getattr(worker, "address", None)


class LogRouter:
    """The process's single capture handler and the sinks it feeds."""

    _lock = threading.Lock()
    _instance: LogRouter | None = None

    def __init__(self, levels: Mapping[str, int]) -> None:
        self.sinks: list[Sink] = []
        self.handler = CaptureHandler(levels, self._route)
        self.output: OutputCapture | None = None
        self.fds: FdCapture | None = None

    @classmethod
    def attach(cls, sink: Sink) -> None:
        with cls._lock:
            if cls._instance is None:
                cls._instance = LogRouter(sink.levels)
                cls._instance.handler.install()
            router = cls._instance
            router.sinks = [*router.sinks, sink]
            if sink.output and router.output is None:
                lines = Lines(router._route, router._wanted, router._lost)
                router.output = OutputCapture(lines)
                router.output.install()
                router.handler.quiet = router.output.lines.quiet
            router._sinks_changed()

    @classmethod
    def task_starting(cls) -> None:
        """A task of this process is about to run: what it prints and warns
        is caught, whoever replaced the capture's hooks since (see
        ``OutputCapture.wrap_streams`` and ``wrap_warnings``)."""
        router = cls._instance
        if router is not None and router.output is not None:
            router.output.wrap_streams()
            router.output.wrap_warnings()

    @classmethod
    def task_ended(cls, key: object) -> None:
        """A task of this process ended, and still counts as running: what
        it wrote to fds 1 and 2 is handed on (``FdCapture.settle``), and its
        Python output's last partial line (``Lines.ended``)."""
        router = cls._instance
        if router is None:
            return
        if router.fds is not None:
            router.fds.settle(str(key))
        if router.output is not None:
            router.output.lines.ended(key)

    def _lost(self, task: str | None, n: int) -> None:
        sink, _ = self._sink_of(("stdout", ""))
        if sink is not None:
            sink.lost(n)

    @classmethod
    def flush_output(cls, older_than: float = 0.0) -> None:
        """Hand on the partial lines tasks wrote (see ``Lines.flush``)."""
        router = cls._instance
        if router is not None and router.output is not None:
            if router.fds is not None and not older_than:
                router.fds.sync()
            router.output.lines.flush(older_than)

    def _sinks_changed(self) -> None:
        if self.output is None:
            return
        own = self._wanted(None)
        self.output.lines.outside = own
        # fds 1 and 2 are the process's: a worker's own, or none of ours.
        if own and self.fds is None:
            self.fds = FdCapture(self._route, self._running, self._lost_lines)
            self.fds.install(self.output.tees)
        elif not own and self.fds is not None:
            self.fds.uninstall()
            self.fds = None

    def _running(self) -> list[str]:
        return [key for sink in self.sinks for key in sink.running()]

    def _lost_lines(self, n: int) -> None:
        self._lost(None, n)

    def _wanted(self, task: str | None) -> bool:
        """Whether a line written in ``task`` (None: outside any) is the
        cluster's: a task's always; else only in a worker's own process, not
        in one that also runs the scheduler or a nanny (the client's kernel,
        whose own prints are the notebook's)."""
        sinks = self.sinks
        if task is not None:
            return bool(sinks)
        return bool(sinks) and all(s.role == "worker" for s in sinks)

    @classmethod
    def detach(cls, sink: Sink) -> None:
        with cls._lock:
            router = cls._instance
            if router is None:
                return
            remaining = [s for s in router.sinks if s is not sink]
            if router.fds is not None and not remaining:
                # Its last lines read while the sink is there to take them.
                router.fds.uninstall()
                router.fds = None
            router.sinks = remaining
            router._sinks_changed()
            if not router.sinks:
                router.handler.uninstall()
                if router.output is not None:
                    router.output.uninstall()
                cls._instance = None

    def _route(self, record: LogTuple) -> None:
        sink, worker = self._sink_of((record[2], record[3]))
        if sink is not None:
            sink.append(record, worker)

    def _sink_of(self, said: tuple[str, str]) -> tuple[Sink | None, str | None]:
        """The sink of a record (its logger, message) and the worker it names."""
        sinks = self.sinks  # replaced, never mutated: safe to read from any thread
        if not sinks:
            return None, None
        role = _role_of(said[0])
        for wanted in (role, *_FALLBACK):
            candidates = [s for s in sinks if s.role == wanted]
            if candidates:
                break
        if len(candidates) > 1:
            # A plugin of the event loop that logged it: a second cluster's
            # scheduler in this process took the first one's lines before.
            here = threading.get_ident()
            candidates = [s for s in candidates if s.thread == here] or candidates
        sink = candidates[0]
        worker = sink.worker()
        if len(candidates) > 1:
            address = _task_worker()
            named = [
                s
                for s in candidates
                if (address and s.worker() == address) or s.names(said[1])
            ]
            if named:
                sink = named[0]
                worker = sink.worker()
        return sink, worker

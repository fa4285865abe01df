"""The scheduler side of capture.

Everything the cluster says lands in one bounded, numbered buffer here: the
scheduler's own log records, those that workers and nannies push, a record per
finished or failed task, sampled metrics, and lifecycle events. Recorders pull from
it by cursor (``dask_observe_pull``), so nothing here waits for a reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import SchedulerPlugin
from tornado.ioloop import PeriodicCallback

from .buffer import DropCountingBuffer, SequencedBuffer
from .clock import CLOCK_HANDLER, clock_reading
from .hostload import INTERVAL_S, HostSampler
from .logs import replay
from .metrics import WorkerSamples, cluster_metrics
from .router import LogRouter, Sink
from .runwatch import RunWatch
from .settings import CaptureSettings
from .shipper import pushed
from .stalls import StallWatch
from .text import shippable
from .wire import (
    RUN_ANNOTATION,
    EventRecord,
    LogRecord,
    MemorySample,
    MetricsRecord,
    PushedEvent,
    PushedLog,
    TaskRecord,
)
from .wire import VERSION as WIRE_VERSION

if TYPE_CHECKING:
    from distributed import Scheduler

logger = logging.getLogger(__name__)

PLUGIN_NAME = "dask-observe"

#: Most records one pull returns; keeps each reply (and its serialisation) small.
PULL_LIMIT = 10_000

#: Event topics not kept: "all" repeats every other topic.
_SKIPPED_TOPICS = frozenset({"all"})

#: How long a closing scheduler waits for a recorder to read its last records.
CLOSE_WAIT_S = 2.0
#: ...and, from the same start, for the end of a run whose block has returned
#: (its recorder said so): milliseconds on a quiet host, but on a busy one
#: (a full test suite on two cores) past 2 s, and the run's end was lost.
#: A client's close waits for the same ends (``ending.CLOSE_WAIT_S``).
RUN_END_WAIT_S = 10.0

#: Host names that mean "every interface": no address to reach a dashboard at.
_ANY_HOST = frozenset({"", "0.0.0.0", "::"})

#: startstops actions, summed per task.
_PHASES = ("compute", "transfer", "disk-read", "disk-write", "deserialize")


def phase_seconds(
    startstops: Iterable[dict[str, Any]],
) -> tuple[list[float], float | None, float | None]:
    """A task's seconds in each of _PHASES, and its compute's start and stop,
    from distributed's ``startstops``."""
    phases = dict.fromkeys(_PHASES, 0.0)
    begin = end = None
    for ss in startstops:
        action = ss["action"]
        if action in phases:
            phases[action] += ss["stop"] - ss["start"]
        if action == "compute":
            begin, end = ss["start"], ss["stop"]
    return list(phases.values()), begin, end


def _span_ids(ts: Any) -> Sequence[str]:
    """The spans of a task, and the runs it was submitted in where its group
    kept an older span. (On the hot path: no copy where there are no runs.)"""
    annotations = ts.annotations or {}
    span_ids: Sequence[str] = (annotations.get("span") or {}).get("ids", ())
    runs = annotations.get(RUN_ANNOTATION)
    if runs:
        span_ids = (*span_ids, *(r for r in runs if r not in span_ids))
    return span_ids


def _scheduler_exception(kwargs: dict[str, Any]) -> str | None:
    """The text of an error the scheduler raised itself (KilledWorker): it sends
    only the pickled exception, which it made, so reading it back is safe."""
    exception = kwargs.get("exception")
    if not isinstance(exception, bytes):
        return None
    try:
        error = pickle.loads(exception)
    except Exception:
        return None
    return f"{type(error).__name__}: {error}"


class ObserveSchedulerPlugin(SchedulerPlugin):
    """Collects the cluster's telemetry for recorders to pull.

    It also counts the tasks that finish in each span a run watches: exact counts
    that do not depend on how much of the buffer a recorder managed to read.
    """

    name = PLUGIN_NAME
    # Registering again must not replace (and so reset) a plugin that another
    # recorder, in this kernel or another one, is using.
    idempotent = True

    def __init__(self, settings: CaptureSettings) -> None:
        # Only settings here: the plugin is pickled on the client; what it runs
        # with is made in start(), on the scheduler.
        self.settings = settings

    # -- lifecycle ---------------------------------------------------------------
    async def start(self, scheduler: Scheduler) -> None:
        #: Changes when the scheduler (and so the numbering) starts afresh.
        self.instance = uuid.uuid4().hex
        self.buffer = SequencedBuffer(self.settings.buffer_size)
        # The scheduler logs from helper threads too: those records wait in a
        # thread-safe buffer until the event loop moves them into the numbered one.
        self._own_logs = DropCountingBuffer(self.settings.buffer_size)
        self._sink = Sink(
            "scheduler",
            lambda record, worker: self._own_logs.append(pushed(record, worker)),
            levels=self.settings.levels,
        )
        self._scheduler: Scheduler | None = scheduler
        #: The scheduler's event loop: a recorder in this same process calls
        #: pull() on it directly rather than over RPC.
        self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        #: Records that workers, nannies and the scheduler's own log buffer had to
        #: drop, since start. A counter, not a record: it must not be droppable.
        self.dropped_upstream = 0
        scheduler.handlers["dask_observe_pull"] = self.pull
        scheduler.handlers["dask_observe_push"] = self.push
        scheduler.handlers["dask_observe_hello"] = self.hello
        # A recorder asks for a sample to mark a run's start: of every worker.
        scheduler.handlers["dask_observe_sample"] = lambda: self.sample(every=True)
        # A worker asks it once: one that reads this clock moves no time.
        scheduler.handlers[CLOCK_HANDLER] = clock_reading
        #: When a recorder last called (monotonic): a closing scheduler waits
        #: for a recorder that is reading, not for one that left.
        self.reader_seen_at = -float("inf")
        #: The runs it watches, and the calls around them (their handlers).
        self.runs = RunWatch(scheduler, self.settings, self)
        LogRouter.attach(self._sink)
        deque = getattr(getattr(scheduler, "_deque_handler", None), "deque", ())
        earlier = replay(deque, self.settings.levels, self.settings.since, time.time())
        self._own_logs.prepend([(*record, None) for record in earlier])
        self._samples = WorkerSamples()
        self._sampler = PeriodicCallback(self.sample, self.settings.metrics_interval_ms)
        self._sampler.start()
        # The scheduler's own event loop, watched as the workers watch theirs.
        self._stalls = StallWatch(self.settings.memory_interval_ms / 1000)
        #: Its own sampler: its stalls are judged against its own host's load.
        self._host = HostSampler()
        self._ticker = PeriodicCallback(self._tick, self.settings.memory_interval_ms)
        self._ticker.start()

    async def before_close(self) -> None:
        """The scheduler is closing (a signal, ``client.shutdown()``,
        ``cluster.close()``): give a recorder that is reading the chance to
        take the last records, the scheduler's "Closing scheduler" lines
        among them, and to end the runs it watches. Bounded."""
        if time.monotonic() - self.reader_seen_at > CLOSE_WAIT_S:
            return
        # A recorder reads through a client: with none connected (the user
        # closed theirs, then the cluster), nobody will come. Waiting anyway
        # made every recorded cluster take 2 s longer to close.
        assert self._scheduler is not None
        if not set(self._scheduler.clients) - {"fire-and-forget"}:
            return
        self._move_own_logs()
        started = time.monotonic()
        deadline = started + CLOSE_WAIT_S
        # What the workers logged last is in their buffers until their next
        # flush (flush-interval): asked for now, as a run's end does, so a
        # task's last line is not lost with its scheduler. Within the bound.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*self.runs.flushes(heartbeat=False)), CLOSE_WAIT_S
            )
        # A run's end comes after its block returned (the recorder's end
        # thread): a script that closes its cluster at once, its client still
        # connected, had its run end "failed", the scheduler gone before it.
        # A run still in its block (the block closing the cluster) is not
        # waited for past the first bound: its end comes after this close.
        watched = self.runs.watched
        while watched or self.buffer.read_upto < self.buffer.last:
            ending = self.runs.ending & watched.keys()
            bound = started + RUN_END_WAIT_S if ending else deadline
            if time.monotonic() >= bound:
                if ending:
                    logger.warning(
                        "dask-observe: the scheduler closes before the end of "
                        "%d recorded run(s) came (waited %.0f s): their "
                        "recorder will call them failed",
                        len(ending),
                        RUN_END_WAIT_S,
                    )
                break
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        self._sampler.stop()
        self._ticker.stop()
        self._stalls.stop()
        LogRouter.detach(self._sink)
        # What was read is stored: not held on by a scheduler distributed
        # keeps (its dashboard's documents do), 100,000 records at most each.
        self.buffer.release_read()

    # -- hooks: the hot path -----------------------------------------------------
    def _released(self, key: Any) -> None:
        """A task of a watched run let go of while processing: it may run on
        (see ``letgo``)."""
        assert self._scheduler is not None
        ts = self._scheduler.tasks.get(key)
        if ts is not None:
            self.runs.let_go.released(_span_ids(ts), key, ts.prefix.name)

    def transition(
        self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any
    ) -> None:
        # The scheduler's hottest path: leave at once unless a task ran and ended.
        if start != "processing":
            return
        if finish != "memory" and finish != "erred":
            if finish == "released" and self.runs.watched:  # its client let go
                self._released(key)
            return
        assert self._scheduler is not None
        ts = self._scheduler.tasks.get(key)
        if ts is None:
            return
        span_ids = _span_ids(ts)
        watched = self.runs.watched
        if watched:
            for span_id in span_ids:
                counter = watched.get(span_id)
                if counter is not None:
                    counter[ts.prefix.name, finish] += 1
        phases, begin, end = phase_seconds(kwargs.get("startstops", ()))
        compute, transfer, disk_read, disk_write, deserialize = phases
        exception = kwargs.get("exception_text")
        if exception is None and finish == "erred":  # KilledWorker: see below
            exception = _scheduler_exception(kwargs)
        traceback = kwargs.get("traceback_text")
        if finish == "erred":  # an error's text may name an undecodable path
            exception = None if exception is None else shippable(exception)
            traceback = None if traceback is None else shippable(traceback)
        self.buffer.append(
            TaskRecord(
                "task",
                time.time(),
                str(key),
                ts.prefix.name,
                " ".join(span_ids),
                kwargs.get("worker"),
                kwargs.get("thread"),
                begin,
                end,
                finish,
                kwargs.get("nbytes"),
                compute,
                transfer,
                disk_read,
                disk_write,
                deserialize,
                exception,
                traceback,
            )
        )

    def update_graph(
        self,
        scheduler: Scheduler,
        *,
        annotations: dict[str, dict[Any, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        # Only tasks a watched run submitted carry the annotation.
        adopting = self.runs.adopted
        runs_by_key = (annotations or {}).get(RUN_ANNOTATION) if adopting else None
        if not runs_by_key:
            return
        for key, runs in runs_by_key.items():
            ts = scheduler.tasks.get(key)
            if ts is None:
                continue
            ids = ((ts.annotations or {}).get("span") or {}).get("ids", ())
            for run in runs:
                adopted = adopting.get(run)
                if adopted is not None and run not in ids:
                    adopted[ts.prefix.name] += 1

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        ws = scheduler.workers.get(worker)
        data = {"nthreads": ws.nthreads, "memory_limit": ws.memory_limit} if ws else {}
        if ws is not None:
            self.runs.joined(worker, ws.nanny)
        self.event("worker-added", worker, data)

    def remove_worker(
        self, scheduler: Scheduler, worker: str, *, stimulus_id: str, **kwargs: Any
    ) -> None:
        # The stimulus says why: heartbeat missing, worker closed, comm lost, ...
        self._samples.forget(worker)
        self.runs.worker_left(worker)
        self.event("worker-removed", worker, {"stimulus_id": stimulus_id})

    def restart(self, scheduler: Scheduler) -> None:
        self.event("cluster-restart", None, {})

    def log_event(self, topic: str, msg: Any) -> None:
        if topic in _SKIPPED_TOPICS:
            return
        worker = msg.get("worker") if isinstance(msg, dict) else None
        self.event(topic, worker if isinstance(worker, str) else None, msg)

    def event(self, kind: str, worker: str | None, data: Any) -> None:
        self.buffer.append(EventRecord("event", time.time(), kind, worker, data))

    # -- periodic ----------------------------------------------------------------
    def _tick(self) -> None:
        now = time.time()
        stall = self._stalls.tick(now)
        if stall is not None:
            self.event("event-loop-stall", None, stall)
        self.tell_host()

    def tell_host(self, at_least: float = INTERVAL_S) -> None:
        """Record the scheduler's host sample due now if it shows pressure
        (``at_least``: see ``HostSampler.sample``; a run's end: ``TAIL_S``)."""
        host = self._host.pressured(at_least)
        if host is not None:
            self.event("host-load", None, host)

    def sample(self, every: bool = False) -> None:
        """Metrics of the workers with news (``WorkerSamples``; ``every``: of
        all of them) and of the cluster, every metrics interval."""
        assert self._scheduler is not None
        now = time.time()
        workers = self._scheduler.workers.values()
        for address, values in self._samples.changed(workers, every):
            self.buffer.append(MetricsRecord("metrics", now, address, values))
        self.buffer.append(
            MetricsRecord("metrics", now, None, cluster_metrics(self._scheduler))
        )
        self._move_own_logs()
        self.runs.check_progress(now)

    def _move_own_logs(self) -> None:
        records, dropped = self._own_logs.drain(len(self._own_logs) + 1)
        self._add_logs("scheduler", records, dropped)

    def _add_logs(self, source: str, records: list[PushedLog], dropped: int) -> None:
        for t, level, name, message, worker, task, fields in records:
            self.buffer.append(
                LogRecord("log", t, level, source, worker, name, message, task, fields)
            )
        self.dropped_upstream += dropped

    # -- handlers (RPC) ----------------------------------------------------------
    def push(
        self,
        source: str,
        records: list[PushedLog],
        dropped: int = 0,
        samples: Sequence[MemorySample] = (),
        events: Sequence[PushedEvent] = (),
    ) -> None:
        """Log records from a worker or nanny, each naming its worker; a
        worker's own fast samples of its process memory, (time, worker, rss);
        events it saw itself, (time, kind, worker, data)."""
        self._add_logs(source, records, dropped)
        for t, worker, rss in samples:
            self.buffer.append(MetricsRecord("metrics", t, worker, {"memory_rss": rss}))
        for t, kind, worker, data in events:
            self.buffer.append(EventRecord("event", t, kind, worker, data))

    def pull(
        self,
        cursor: int = 0,
        instance: str | None = None,
        ending: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Records numbered above ``cursor``; from the start for another instance.
        ``ending``: the watched spans whose block has returned in the reader's
        process, their end on its way (see ``before_close``).

        ``dropped`` holds running totals, by kind of record, of what was dropped
        unread: here, or (log lines) in a worker, nanny or the scheduler's own log
        buffer before it got here.
        """
        self.reader_seen_at = time.monotonic()
        self.runs.ending_soon(ending)
        self._move_own_logs()
        if instance != self.instance:
            cursor = 0
        records = self.buffer.after(cursor, PULL_LIMIT)
        reply = {
            "wire": WIRE_VERSION,
            "instance": self.instance,
            "last": self.buffer.last,
            "dropped": self._dropped(),
            "records": records,
        }
        assert self._scheduler is not None
        if self._scheduler.status.name in ("closing", "closed"):
            # Read from before_close's wait: a headless recording ends here.
            reply["closing"] = True
        return reply

    def _dropped(self) -> dict[str, int]:
        dropped = dict(self.buffer.lost)
        dropped["log"] = dropped.get("log", 0) + self.dropped_upstream
        return dropped

    def hello(self, backlog_s: float = 30.0) -> dict[str, Any]:
        """Which capture runs here, and where the dashboard listens: ``host``
        (None when it listens on every interface: the recorder then uses the
        host it reaches the scheduler at), ``port`` and ``tls``; and where a
        store that never read this cluster starts (``recent``: the cursor
        before its last ``backlog_s`` seconds of records)."""
        assert self._scheduler is not None
        self.reader_seen_at = time.monotonic()  # a recorder about to read
        dashboard = None
        server = self._scheduler.services.get("dashboard")
        port = getattr(server, "port", None)
        if port:
            host = getattr(server, "address", None)
            dashboard = {
                "host": None if host in _ANY_HOST else host,
                "port": int(port),
                "tls": bool(getattr(server, "ssl_options", None)),
            }
        return {
            "wire": WIRE_VERSION,
            "package": __package__,
            "dashboard": dashboard,
            # Where a store that never read this cluster starts: at its recent
            # records, not the whole buffer (up to 100,000 records of a
            # long-lived cluster, copied before a new store's first line).
            "instance": self.instance,
            "recent": self.buffer.since(time.time() - backlog_s),
            "dropped": self._dropped(),
            # A run's end (``dask_observe_end``) takes a cursor and brings its
            # last records: the wire's version 2, extended.
            "end_pulls": True,
            # A pull may say which runs are ending (``ending``): a closing
            # scheduler waits longer for them.
            "ending": True,
            # A run's end has the nannies of workers that just left ship too.
            "gone_nannies": True,
            # The recorder's client puts its runs' start and end on this
            # clock (``clock.offset_from``).
            "clock": clock_reading(),
        }

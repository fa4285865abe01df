"""The calls a recorder makes around a run, on the scheduler: watch a run's
span and count its tasks (``dask_observe_begin``), end it (flush every worker
and nanny, keep where a stopped run stood: ``dask_observe_end``), its progress
and fine performance metrics. :class:`RunWatch` is the scheduler plugin's part
that answers them: it registers its own handlers and holds the state of the
runs it watches; the plugin's hooks tell it what the scheduler does."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tornado.ioloop import IOLoop

from . import hostload
from .letgo import LetGo, still_running
from .progress import ProgressWatch, describe, pace, work_remains
from .wire import FLUSH_HANDLER, RUNNING_HANDLER, STACKS_HANDLER

if TYPE_CHECKING:
    from distributed import Scheduler

    from .settings import CaptureSettings

logger = logging.getLogger(__name__)

#: A run's end asks the nanny of a worker that left this long ago or less for
#: its last lines, as it asks those of the workers still there: a nanny says
#: how its worker died ("was killed by signal 9") once its worker is gone
#: from the scheduler, and its restarted worker may not be back yet. Later,
#: the nanny has shipped them on its own (every flush-interval).
GONE_NANNY_S = 30.0
#: How long a run's end waits for such a nanny, which may be gone too (its
#: host down: a connection attempt would wait distributed's connect timeout).
GONE_NANNY_WAIT_S = 2.0


def fine_rows(totals: Any) -> list[tuple[str, str, str, str, float]]:
    """Fine performance metrics (a span's, or the scheduler's for the whole
    cluster) as (context, prefix, activity, unit, value). Keys without a prefix,
    (context, activity, unit) such as the memory monitor's spilling, get "" as
    prefix; keys of other shapes (distributed has some, and may add more) are
    left out."""
    if totals is None:
        return []
    rows = []
    for key, value in totals.items():
        if not isinstance(key, tuple) or not all(isinstance(k, str) for k in key):
            continue
        if len(key) == 4:
            rows.append((*key, float(value)))
        elif len(key) == 3:
            rows.append((key[0], "", key[1], key[2], float(value)))
    return rows


def busy_seconds(span: Any) -> dict[str, float]:
    """Seconds the span's tasks spent in each activity (thread-cpu,
    thread-noncpu...) so far, as the workers' heartbeats have reported them;
    threads' idle time left out. O(prefixes x activities)."""
    busy: dict[str, float] = {}
    if span is None:
        return {}
    for context, _, activity, unit, value in fine_rows(span.cumulative_worker_metrics):
        idle = activity == "idle or other spans"
        if context == "execute" and unit == "seconds" and not idle:
            busy[activity] = busy.get(activity, 0.0) + value
    return busy


def _handlers_on_this_loop(name: str) -> dict[str, Callable[..., Any]]:
    """That handler of each worker and nanny that runs in this process on
    this event loop (``processes=False``; a LocalCluster's nannies), by
    address. A run's end calls those directly, where a message to each took
    50 ms for 200 workers of one process, all on this one loop."""
    from distributed import Nanny, Worker

    loop = IOLoop.current()
    found = {}
    for server in [*Worker._instances, *Nanny._instances]:
        handler = server.handlers.get(name)
        if handler is not None and server.loop is loop and server.address:
            found[server.address] = handler
    return found


class Capture(Protocol):
    """What a :class:`RunWatch` asks of the plugin it is part of."""

    #: When a recorder last called (monotonic).
    reader_seen_at: float

    def sample(self, every: bool = False) -> None: ...

    def event(self, kind: str, worker: str | None, data: Any) -> None: ...

    def tell_host(self, at_least: float = ...) -> None: ...

    def pull(
        self, cursor: int = 0, instance: str | None = None, ending: Sequence[str] = ()
    ) -> dict[str, Any]: ...


class RunWatch:
    """The runs the scheduler watches, and the calls that begin, follow and
    end them (see the module)."""

    def __init__(
        self, scheduler: Scheduler, settings: CaptureSettings, capture: Capture
    ) -> None:
        self._scheduler = scheduler
        self._capture = capture
        #: Per watched span: tasks that ended, by (prefix, memory|erred).
        self.watched: dict[str, Counter[tuple[str, str]]] = {}
        #: Per watched span: tasks submitted in its run that distributed filed
        #: under an older span (their task group had one), by prefix.
        self.adopted: dict[str, Counter[str]] = {}
        #: Per watched span: its tasks let go of while processing.
        self.let_go = LetGo()
        #: Watched spans whose block has returned, their end on its way (a pull
        #: says so): a closing scheduler waits longer for them.
        self.ending: set[str] = set()
        #: When each watched span last finished a task: a run that stops
        #: moving is described (``stall`` events).
        self._progress = ProgressWatch(
            settings.no_progress_after_s, settings.no_progress_factor
        )
        #: The nanny of each worker (``joined``), and which worker of each
        #: nanny left and when (``worker_left``; monotonic): see GONE_NANNY_S.
        self._nanny_of = {
            address: ws.nanny for address, ws in scheduler.workers.items() if ws.nanny
        }
        self._gone_nannies: dict[str, tuple[str, float]] = {}
        #: Per worker a call of ``_calls`` waits on: a future its removal sets.
        self._leaving: dict[str, asyncio.Future[None]] = {}
        #: Per watched span: where the host's pressure window of its run began.
        self._host_marks: dict[str, hostload.Mark] = {}
        handlers = scheduler.handlers
        handlers["dask_observe_watch"] = self.watch
        handlers["dask_observe_unwatch"] = self.unwatch
        handlers["dask_observe_progress"] = self.progress
        handlers["dask_observe_fine_metrics"] = self.fine_metrics
        handlers["dask_observe_begin"] = self.begin
        handlers["dask_observe_end"] = self.end

    # -- what the plugin's hooks tell it ----------------------------------------
    def joined(self, worker: str, nanny: str | None) -> None:
        if nanny:
            self._nanny_of[worker] = nanny

    def ending_soon(self, spans: Sequence[str]) -> None:
        """A recorder says these runs' blocks returned, their ends on the way."""
        self.ending.update(s for s in spans if s in self.watched)

    def check_progress(self, now: float) -> None:
        """A watched run that stopped moving with work remaining is described
        (``capture.progress``): O(watched runs) while runs move."""
        if not self.watched:
            return
        idle = not work_remains(self._scheduler)
        for span_id, ended in self.watched.items():
            done = sum(ended.values())
            stalled = self._progress.stalled_for(span_id, done, now, idle)
            # pace() walks the tasks processing: only past the plain bar.
            if stalled < self._progress.after_s:
                continue
            if self._progress.due(span_id, now, pace(self._scheduler)):
                described = describe(self._scheduler, span_id, now - stalled)
                self._capture.event("stall", None, described)

    # -- the calls ---------------------------------------------------------------
    def watch(self, span_id: str) -> None:
        """Count the span's tasks from now on. A metrics sample marks the run's
        start, so that even a run shorter than the sampling interval has one."""
        self._capture.reader_seen_at = time.monotonic()
        self.watched.setdefault(span_id, Counter())
        self.adopted.setdefault(span_id, Counter())
        self.let_go.watch(span_id)
        self._progress.watch(span_id)
        self._host_marks[span_id] = hostload.mark()
        self._capture.sample(every=True)

    def unwatch(self, span_id: str) -> dict[str, int]:
        """Stop counting the span's tasks; its totals by ``memory`` / ``erred``.
        A last metrics sample marks the run's end: of the workers with news
        (every worker's whole row at the end too was 3,800 rows of a 200
        worker run's last write; a value holds until the next sample)."""
        self._capture.sample()
        self.ending.discard(span_id)
        self.adopted.pop(span_id, None)
        self.let_go.unwatch(span_id)
        self._progress.unwatch(span_id)
        totals: Counter[str] = Counter()
        for (_, finish), n in self.watched.pop(span_id, Counter()).items():
            totals[finish] += n
        return dict(totals)

    def begin(self, span_id: str) -> list[tuple[str, str, str, str, float]]:
        """A run starts: watch its span, and return the cluster's fine metrics
        totals (what the run's own are measured from, where its span cannot
        hold them). One round trip, as a run's start must cost next to nothing."""
        self.watch(span_id)
        return self.fine_metrics(None)

    async def end(
        self,
        span_id: str,
        stopped: bool = False,
        cursor: int | None = None,
        instance: str | None = None,
    ) -> dict[str, Any]:
        """A run ends: stop watching its span, have every worker and nanny ship
        what it holds (a worker's heartbeat brings its last fine metrics), and
        return the span's task counts and the fine metrics after that.
        ``adopted``: some of its tasks went to an older span, which holds their
        fine metrics; the span's own are then not the run's. A run ``stopped``
        (interrupted, raising) while tasks still run keeps where it stood
        (a ``run-stopped`` event, and the stacks of the running tasks).

        With a ``cursor``, the reply also holds ``pull``: :meth:`pull`'s reply
        after the flush, so that the run's last records come in the same round
        trip (at 200 workers, a second one waited its turn on the loop)."""
        adopted = bool(self.adopted.get(span_id))
        # The scheduler's host in the run's last second, which no sample
        # covers yet (the workers tell theirs as they flush, below).
        self._capture.tell_host(hostload.TAIL_S)
        began = self._host_marks.pop(span_id, None)
        if began is not None:  # the scheduler's host over the run's window
            window = {**hostload.since_mark(began), "run": True}
            self._capture.event("host-load", None, window)
        # Counted together with the tasks let go of so far: one whose release
        # reaches the scheduler while the workers are asked below is in this
        # count already (the demo's hung task read "2 tasks, 2 still running").
        running = _processing(self._scheduler, span_id)
        counted_apart = self.let_go.keys(span_id)
        still: set[str] = set()
        if stopped:
            still = await self._stopped(span_id)
        elif self.let_go.any(span_id):
            still = await self._let_go_running(span_id)
        running += len(still & counted_apart)
        counts = self.unwatch(span_id)
        if running:
            counts["running"] = running
        await asyncio.gather(*self.flushes())
        ended = {
            "adopted": adopted,
            "counts": counts,
            "fine": self.fine_metrics(None),
            "span_fine": self.fine_metrics(span_id),
            "workers": list(self._scheduler.workers),
            # Ended from ``before_close``'s wait: the recorder asks no more.
            "closing": self._scheduler.status.name in ("closing", "closed"),
        }
        if cursor is not None:
            ended["pull"] = self._capture.pull(cursor, instance)
        return ended

    async def _answers(self, name: str, addresses: list[str]) -> dict[str, Any]:
        """The handler ``name`` of each worker at ``addresses``, called
        together: their answers by address (none from one that failed)."""
        replies: dict[str, Any] = {}
        calls: list[tuple[str, dict[str, Any]]] = [(a, {}) for a in addresses]
        await asyncio.gather(*self._calls(name, calls, replies=replies))
        return replies

    async def _let_go_running(self, span_id: str) -> set[str]:
        """A run that finished: the tasks its client let go of (a caught
        timeout) that still run on its workers."""
        replies = await self._answers(RUNNING_HANDLER, list(self._scheduler.workers))
        still = still_running(self._scheduler, self.let_go.unwatch(span_id), replies)
        return _keys(still)

    async def _stopped(self, span_id: str) -> set[str]:
        """A run stopped: where it stood (a ``run-stopped`` event), the stacks
        of its running tasks, and those that ran that the scheduler no longer
        holds (its client let go of them: ``letgo``)."""
        let_go = self.let_go.any(span_id)
        remains = work_remains(self._scheduler)
        if not (remains or let_go):
            return set()
        since = self._progress.since(span_id) or time.time()
        # Every worker running tasks samples their stacks, to ship with the
        # flush that follows; with tasks let go of, every worker, to say
        # which of them it still runs.
        asked = [
            ws.address
            for ws in self._scheduler.workers.values()
            if ws.processing or let_go
        ]
        replies = await self._answers(STACKS_HANDLER, asked)
        still = still_running(self._scheduler, self.let_go.unwatch(span_id), replies)
        if not (remains or still):
            return set()
        described = describe(self._scheduler, span_id, since, still)
        self._capture.event("run-stopped", None, described)
        return _keys(still)

    def flushes(self, heartbeat: bool = True) -> list[Awaitable[Any]]:
        """A flush of every worker (with a heartbeat, which carries its fine
        performance metrics) and nanny, to await together; and of the nannies
        whose worker left in the last GONE_NANNY_S, within GONE_NANNY_WAIT_S."""
        calls: list[tuple[str, dict[str, Any]]] = []
        nannies = set()
        for worker in self._scheduler.workers.values():
            calls.append((worker.address, {"heartbeat": heartbeat}))
            if worker.nanny:
                calls.append((worker.nanny, {"heartbeat": False}))
                nannies.add(worker.nanny)
        gone = [
            (nanny, {"heartbeat": False, "left": worker})
            for nanny, worker in self._nannies_of_gone_workers()
            if nanny not in nannies
        ]
        return [
            *self._calls(FLUSH_HANDLER, calls),
            *self._calls(FLUSH_HANDLER, gone, timeout=GONE_NANNY_WAIT_S),
        ]

    def worker_left(self, worker: str) -> None:
        """``worker`` left the scheduler: its nanny, if it had one, is asked
        at the ends of runs for a while (GONE_NANNY_S)."""
        left = self._leaving.pop(worker, None)
        if left is not None and not left.done():
            left.set_result(None)
        nanny = self._nanny_of.pop(worker, None)
        if nanny is not None:
            self._nannies_of_gone_workers()  # a cluster that scales all day
            self._gone_nannies[nanny] = (worker, time.monotonic())

    def _nannies_of_gone_workers(self) -> list[tuple[str, str]]:
        """The (nanny, worker) of each worker that left in the last
        GONE_NANNY_S (older ones forgotten: the list stays as short as a
        cluster's recent losses)."""
        now = time.monotonic()
        for nanny, (_, left) in list(self._gone_nannies.items()):
            if now - left > GONE_NANNY_S:
                del self._gone_nannies[nanny]
        return [(nanny, worker) for nanny, (worker, _) in self._gone_nannies.items()]

    def _calls(
        self,
        name: str,
        calls: list[tuple[str, dict[str, Any]]],
        timeout: float | None = None,
        replies: dict[str, Any] | None = None,
    ) -> list[Awaitable[Any]]:
        """The handler ``name`` of each (address, arguments), to await
        together: called directly for a server on this event loop, elsewhere
        a message over the scheduler's pooled connections (``broadcast``
        would open new ones each time: a few milliseconds a run's end). A
        server gone, without the plugin, or not done within ``timeout``
        seconds, has nothing to give: skipped; so has a worker of another
        process that the scheduler removes while it is called
        (``_unless_it_leaves``). With ``replies``, each answer is kept there
        by address."""
        here = _handlers_on_this_loop(name) if calls else {}
        present = self._scheduler.workers
        workers = {address for address, _ in calls if address in present}

        async def call(address: str, arguments: dict[str, Any]) -> None:
            try:
                handler = here.get(address)
                if handler is None:
                    done = getattr(self._scheduler.rpc(address), name)(**arguments)
                else:
                    done = handler(**arguments)
                if inspect.isawaitable(done):
                    if timeout is not None:
                        done = asyncio.wait_for(done, timeout)
                    if handler is None and address in workers:  # a message
                        done = await self._unless_it_leaves(address, done)
                    else:
                        done = await done
                if replies is not None:
                    replies[address] = done
            except Exception as e:
                logger.debug("dask-observe: no %s of %s: %s", name, address, e)

        return [call(address, arguments) for address, arguments in calls]

    async def _unless_it_leaves(self, address: str, done: Awaitable[Any]) -> Any:
        """Await ``done``, a call to the worker at ``address``, unless the
        scheduler removes that worker first. A call to a worker that died
        retries its refused connection for distributed's connect timeout
        (30 s), as after a ``client.restart()`` that kills the workers a
        run's end flushes. What a worker that left had not shipped is lost
        with it."""
        if address not in self._scheduler.workers:  # left before the call
            with contextlib.suppress(Exception):
                done.close()  # type: ignore[attr-defined]
            return
        left = self._leaving.get(address)
        if left is None or left.done():
            left = self._leaving[address] = asyncio.get_running_loop().create_future()
        call = asyncio.ensure_future(done)
        try:
            await asyncio.wait([call, left], return_when=asyncio.FIRST_COMPLETED)
        finally:  # left, or this wait cancelled (a closing scheduler's bound)
            if not call.done():
                call.cancel()
        if call.done():
            return call.result()  # or its error, for the caller to log
        logger.debug("dask-observe: %s left while called", address)
        return None

    def fine_metrics(
        self, span_id: str | None = None
    ) -> list[tuple[str, str, str, str, float]]:
        """The span's fine performance metrics (see ``fine_rows``); without a
        span, the whole cluster's since the scheduler started."""
        if span_id is None:
            return fine_rows(self._scheduler.cumulative_worker_metrics)
        span = self._span(span_id)
        return fine_rows(span.cumulative_worker_metrics if span else None)

    def _span(self, span_id: str) -> Any:
        """The scheduler's span of that id, or None."""
        spans = self._scheduler.extensions.get("spans")
        return getattr(spans, "spans", {}).get(span_id)

    def progress(self, span_id: str) -> dict[str, Any]:
        """A watched span's progress by prefix, and every worker's memory.

        ``prefixes`` maps a prefix to ``[total, done, erred]``: the total from the
        span's task groups (they count every task ever added) and the run's
        tasks filed under older spans, done and erred from the transitions
        counted since ``watch``. O(groups + workers), never O(tasks), so it is
        cheap at any graph size.
        """
        prefixes: dict[str, list[int]] = {}
        span = self._span(span_id)
        if span is not None:
            for group in span.traverse_groups():
                row = prefixes.setdefault(group.prefix.name, [0, 0, 0])
                row[0] += len(group)
        for prefix, n in self.adopted.get(span_id, Counter()).items():
            prefixes.setdefault(prefix, [0, 0, 0])[0] += n
        for (prefix, finish), n in self.watched.get(span_id, Counter()).items():
            row = prefixes.setdefault(prefix, [0, 0, 0])
            row[1 if finish == "memory" else 2] += n
        workers = {
            ws.address: [
                ws.memory.managed,
                ws.memory.unmanaged,
                ws.memory.spilled,
                ws.memory_limit or 0,
                len(ws.processing),
            ]
            for ws in self._scheduler.workers.values()
        }
        return {
            "time": time.time(),
            "prefixes": prefixes,
            "workers": workers,
            "activities": busy_seconds(span),
        }


def _keys(still: dict[str, list[dict[str, Any]]]) -> set[str]:
    """The keys of ``letgo.still_running``'s tasks, of every worker."""
    return {task["key"] for tasks in still.values() for task in tasks}


def _processing(scheduler: Scheduler, span_id: str) -> int:
    """The span's tasks processing now (running on a worker, or assigned to
    one): a run that ends with them, stopped by a timeout, still ran them."""
    spans = getattr(scheduler, "extensions", {}).get("spans")
    span = getattr(spans, "spans", {}).get(span_id)
    if span is None:
        return 0
    try:
        return int(span.states.get("processing", 0))
    except Exception:  # another distributed's spans
        return 0

"""The calls a recorder makes around a run, on the scheduler: watch a run's
span and count its tasks (``dask_observe_begin``), end it (flush every worker
and nanny, keep where a stopped run stood: ``dask_observe_end``), its progress
and fine performance metrics. Methods of the scheduler plugin (a mixin: they
share its state, made in its ``start``)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from tornado.ioloop import IOLoop

from . import host
from .hangs import ProgressWatch, describe, work_remains
from .letgo import LetGo, still_running
from .wire import FLUSH_HANDLER, RUNNING_HANDLER, STACKS_HANDLER

if TYPE_CHECKING:
    from distributed import Scheduler

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


class RunCalls:
    """The run calls of ``ObserveSchedulerPlugin`` (see the module)."""

    _scheduler: Scheduler | None
    #: Per watched span: tasks that ended, by (prefix, memory|erred).
    _watched: dict[str, Counter[tuple[str, str]]]
    #: Per watched span: tasks of its run filed under an older span, by prefix.
    _adopted: dict[str, Counter[str]]
    #: Per watched span: its tasks let go of while processing.
    _let_go: LetGo
    _progress: ProgressWatch
    _reader_seen_at: float
    #: Watched spans whose block has returned, their end on its way (a pull
    #: says so): a closing scheduler waits longer for them.
    _ending: set[str]
    #: The nanny of each worker (``add_worker``), and which worker of each
    #: nanny left and when (``remove_worker``; monotonic): see GONE_NANNY_S.
    _nanny_of: dict[str, str]
    _gone_nannies: dict[str, tuple[str, float]]
    #: Per worker a call of ``_calls`` waits on: a future its removal sets.
    _leaving: dict[str, asyncio.Future[None]]
    #: Per watched span: where the host's pressure window of its run began.
    _host_marks: dict[str, host.Mark]

    def sample(self, every: bool = False) -> None:  # the plugin's
        raise NotImplementedError

    def _event(self, kind: str, worker: str | None, data: Any) -> None:  # the plugin's
        raise NotImplementedError

    def pull(  # the plugin's
        self,
        cursor: int = 0,
        instance: str | None = None,
        ending: Sequence[str] = (),
    ) -> dict[str, Any]:
        raise NotImplementedError

    def watch(self, span_id: str) -> None:
        """Count the span's tasks from now on. A metrics sample marks the run's
        start, so that even a run shorter than the sampling interval has one."""
        self._reader_seen_at = time.monotonic()
        self._watched.setdefault(span_id, Counter())
        self._adopted.setdefault(span_id, Counter())
        self._let_go.watch(span_id)
        self._progress.watch(span_id)
        self._host_marks[span_id] = host.mark()
        self.sample(every=True)

    def unwatch(self, span_id: str) -> dict[str, int]:
        """Stop counting the span's tasks; its totals by ``memory`` / ``erred``.
        A last metrics sample marks the run's end: of the workers with news
        (every worker's whole row at the end too was 3,800 rows of a 200
        worker run's last write; a value holds until the next sample)."""
        self.sample()
        self._ending.discard(span_id)
        self._adopted.pop(span_id, None)
        self._let_go.unwatch(span_id)
        self._progress.unwatch(span_id)
        totals: Counter[str] = Counter()
        for (_, finish), n in self._watched.pop(span_id, Counter()).items():
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
        assert self._scheduler is not None
        adopted = bool(self._adopted.get(span_id))
        began = self._host_marks.pop(span_id, None)
        if began is not None:  # the scheduler's host over the run's window
            self._event("host-load", None, {**host.since_mark(began), "run": True})
        # Counted together with the tasks let go of so far: one whose release
        # reaches the scheduler while the workers are asked below is in this
        # count already (the demo's hung task read "2 tasks, 2 still running").
        running = _processing(self._scheduler, span_id)
        counted_apart = self._let_go.keys(span_id)
        still: set[str] = set()
        if stopped:
            still = await self._stopped(span_id)
        elif self._let_go.any(span_id):
            still = await self._let_go_running(span_id)
        running += len(still & counted_apart)
        counts = self.unwatch(span_id)
        if running:
            counts["running"] = running
        await asyncio.gather(*self._flushes())
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
            ended["pull"] = self.pull(cursor, instance)
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
        assert self._scheduler is not None
        replies = await self._answers(RUNNING_HANDLER, list(self._scheduler.workers))
        still = still_running(self._scheduler, self._let_go.unwatch(span_id), replies)
        return _keys(still)

    async def _stopped(self, span_id: str) -> set[str]:
        """A run stopped: where it stood (a ``run-stopped`` event), the stacks
        of its running tasks, and those that ran that the scheduler no longer
        holds (its client let go of them: ``letgo``)."""
        assert self._scheduler is not None
        let_go = self._let_go.any(span_id)
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
        still = still_running(self._scheduler, self._let_go.unwatch(span_id), replies)
        if not (remains or still):
            return set()
        described = describe(self._scheduler, span_id, since, still)
        self._event("run-stopped", None, described)
        return _keys(still)

    def _flushes(self, heartbeat: bool = True) -> list[Awaitable[Any]]:
        """A flush of every worker (with a heartbeat, which carries its fine
        performance metrics) and nanny, to await together; and of the nannies
        whose worker left in the last GONE_NANNY_S, within GONE_NANNY_WAIT_S."""
        assert self._scheduler is not None
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
        assert self._scheduler is not None
        present = self._scheduler.workers
        workers = {address for address, _ in calls if address in present}

        async def call(address: str, arguments: dict[str, Any]) -> None:
            assert self._scheduler is not None
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
        (30 s): a ``client.restart()`` right after a block kills the workers
        that its run's end flushes (a run's end failed so beside one in CI,
        once: the cause is not proven). What a worker that left had not
        shipped is lost with it."""
        assert self._scheduler is not None
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
            assert self._scheduler is not None
            return fine_rows(self._scheduler.cumulative_worker_metrics)
        span = self._span(span_id)
        return fine_rows(span.cumulative_worker_metrics if span else None)

    def _span(self, span_id: str) -> Any:
        """The scheduler's span of that id, or None."""
        assert self._scheduler is not None
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
        assert self._scheduler is not None
        prefixes: dict[str, list[int]] = {}
        span = self._span(span_id)
        if span is not None:
            for group in span.traverse_groups():
                row = prefixes.setdefault(group.prefix.name, [0, 0, 0])
                row[0] += len(group)
        for prefix, n in self._adopted.get(span_id, Counter()).items():
            prefixes.setdefault(prefix, [0, 0, 0])[0] += n
        for (prefix, finish), n in self._watched.get(span_id, Counter()).items():
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

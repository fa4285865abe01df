"""Ships a worker's or nanny's log records to the scheduler as they are written."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from .buffer import DropCountingBuffer
from .logs import LogTuple, replay
from .pacer import Pacer
from .router import LogRouter, Sink
from .settings import CaptureSettings
from .wire import PushedLog

logger = logging.getLogger(__name__)


def wire_safe(record: Any) -> bool:
    """Whether the wire can carry ``record``, a pushed line: plain values
    only, its texts encodable as UTF-8."""
    for value in record:
        if isinstance(value, str):
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    return False
        elif value is not None and type(value) not in (int, float, bool):
            return False
    return True


def pushed(record: LogTuple, worker: str | None) -> PushedLog:
    """A captured record as a worker or nanny pushes it, naming its worker."""
    t, level, name, message, task, fields = record
    return PushedLog(t, level, name, message, worker, task, fields)


#: Records in one message to the scheduler; keeps each message small.
BATCH = 5000

#: A clock this close to the scheduler's is taken as the same (distributed's
#: estimate of the offset holds half a round trip of jitter).
CLOCK_S = 0.005
#: How far a new estimate of the offset must move from the one in use to
#: replace it. Each estimate holds milliseconds of jitter, more on a loaded
#: host (5-10 ms read for a worker beside its scheduler); moving a process's
#: times by each one put a flood of lines out of order where two batches met
#: (74 lines printed 1 ms apart, interleaved). A real offset (a VM after a
#: suspend: seconds) is taken at its first estimate.
SHIFT_S = 0.05


def on_clock(records: list[Any], offset: float, *, events: bool = False) -> list[Any]:
    """Records (tuples whose first item is their time: log lines, samples,
    events) moved by ``offset`` seconds onto the scheduler's clock; with
    ``events``, the time an event holds (``since``: when a stall or a task
    began) with them."""
    moved = []
    for record in records:
        rest = record[1:]
        data = rest[-1] if events else None
        if isinstance(data, dict) and isinstance(data.get("since"), (int, float)):
            rest = (*rest[:-1], {**data, "since": data["since"] + offset})
        moved.append((record[0] + offset, *rest))
    return moved


class LogShipper:
    """Buffers the process's log records and pushes them every ``interval_ms``.

    The buffer is bounded: when the scheduler cannot keep up the oldest records are
    dropped and counted, and the count travels with the next batch.
    """

    def __init__(self, source: str, settings: CaptureSettings) -> None:
        self.source = source
        self.levels = settings.levels
        #: Whether a worker's tasks' prints and warnings are captured too.
        self.output = settings.output and source == "worker"
        self.buffer = DropCountingBuffer(settings.buffer_size)
        #: Memory samples (MemorySample), shipped with the log records.
        self.samples = DropCountingBuffer(settings.buffer_size)
        #: Events the process observed itself (PushedEvent).
        self.events = DropCountingBuffer(settings.buffer_size)
        self.interval_ms = settings.flush_interval_ms
        self.since = settings.since
        self._push: Callable[..., Any] | None = None
        self._clock: Callable[[], float] = lambda: 0.0
        #: The offset this process's records are moved by (``_offset``).
        self._offset_used = 0.0
        self._sink: Sink | None = None
        self._leave_pacer: Callable[[], None] | None = None
        self._flushing = asyncio.Lock()
        #: Flushes under way, started by the pacer (kept: a task only weakly
        #: referenced by the loop may be collected mid-flight).
        self._tasks: set[asyncio.Task[None]] = set()

    def _append(self, record: LogTuple, worker: str | None) -> None:
        # The worker is named when the line is written: a nanny's worker gets a new
        # address when it is restarted, and its last lines belong to the old one.
        self.buffer.append(pushed(record, worker))

    def start(
        self,
        push: Callable[..., Any],
        worker: Callable[[], str | None],
        pid: Callable[[], int | None] = lambda: None,
        backlog: Iterable[logging.LogRecord] = (),
        running: Callable[[], list[str]] = lambda: [],
        clock: Callable[[], float] = lambda: 0.0,
    ) -> None:
        """Begin capturing; ``push`` is the scheduler's ``dask_observe_push`` RPC,
        ``worker`` and ``pid`` name the worker the records are about, ``backlog``
        holds what the process logged before (a worker's first lines, logged
        before its plugins were set up), ``running`` lists the keys of its
        tasks running now (a worker's), ``clock`` the seconds its clock is
        behind the scheduler's (a worker's estimate, as distributed's)."""
        self._push = push
        self._clock = clock
        self._sink = Sink(
            self.source, self._append, worker, pid, self.levels,
            output=self.output, lost=self.buffer.count_lost, running=running,
        )  # fmt: skip
        LogRouter.attach(self._sink)
        # After attaching: a record is then either live or in the backlog.
        earlier = replay(backlog, self.levels, self.since, time.time())
        address = worker()
        self.buffer.prepend([pushed(record, address) for record in earlier])
        # Started from the plugin's setup, which runs on the process's event loop.
        self._leave_pacer = Pacer.join(self.interval_ms, self._due)

    def _due(self, now: float) -> None:
        """Every ``flush-interval``: start a flush when there is something to
        send and none is under way (a periodic callback awaiting its flush
        skipped its ticks meanwhile too)."""
        if self._flushing.locked() or not (
            len(self.buffer) or len(self.samples) or len(self.events)
            or self.buffer.dropped
        ):  # fmt: skip
            return
        task = asyncio.ensure_future(self.flush())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def flush(self) -> None:
        """Send what is buffered now, in batches (not what arrives meanwhile, so a
        process that keeps logging cannot keep a flush going).

        Flushes take turns: when one returns, every record buffered before it was
        called has reached the scheduler, including a batch another flush had in
        flight.
        """
        async with self._flushing:
            await self._flush()

    async def _flush(self) -> None:
        assert self._push is not None
        remaining = len(self.buffer)
        # Samples and events go with the first batch; too old to matter if it
        # fails.
        samples, _ = self.samples.drain(len(self.samples))
        events, _ = self.events.drain(len(self.events))
        offset = self._offset()
        if offset:
            samples = on_clock(samples, offset)
            events = on_clock(events, offset, events=True)
        while True:
            records, dropped = self.buffer.drain(min(BATCH, remaining))
            if offset:
                records = on_clock(records, offset)
            if not records and not dropped and not samples and not events:
                return
            if not await self._ship(records, dropped, samples, events):
                return
            samples = events = []
            remaining -= len(records)
            if remaining <= 0:
                return

    async def _ship(
        self, records: list[Any], dropped: int, samples: list[Any], events: list[Any]
    ) -> bool:
        """Push one batch; False where it could not go (its records counted
        lost: the scheduler gone or restarting).

        A record the wire cannot carry is dropped alone, counted with the
        batch's drops, and the rest go: one such record lost its whole batch
        (a line holding a lone surrogate, before every text was made
        shippable as it was captured: ``logs.shippable``)."""
        assert self._push is not None
        carried = records
        while True:
            try:
                await self._push(
                    source=self.source, records=carried, dropped=dropped,
                    samples=samples, events=events,
                )  # fmt: skip
                return True
            except Exception as e:
                if carried is records:  # the first try: any it cannot carry?
                    carried = [r for r in records if wire_safe(r)]
                    if len(carried) < len(records):
                        dropped += len(records) - len(carried)
                        continue
                self.buffer.count_lost(len(carried) + dropped)
                # Its type and a bounded message: never the batch itself.
                said = f"{type(e).__name__}: {e}"[:200]
                logger.debug("dask-observe: cannot ship log records: %s", said)
                return False

    def _offset(self) -> float:
        """Seconds to add to this process's times to put them on the
        scheduler's clock; 0 within CLOCK_S (a host's own jitter); the one
        in use until an estimate moves SHIFT_S from it, so that the process's
        own records stay in the order they were made."""
        try:
            offset = float(self._clock())
        except Exception:
            return self._offset_used
        offset = offset if abs(offset) >= CLOCK_S else 0.0
        if abs(offset - self._offset_used) >= SHIFT_S:
            self._offset_used = offset
        return self._offset_used

    async def stop(self) -> None:
        if self._leave_pacer is not None:
            self._leave_pacer()
        if self._sink is not None:
            LogRouter.detach(self._sink)
        await self.flush()

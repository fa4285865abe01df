"""What a run keeps when dask-observe's plugins cannot run on the cluster.

distributed itself holds some of what the plugins would have shipped: the task
stream (the scheduler's own ``TaskStreamPlugin``, started when the run starts),
the event topics, and the recent log lines of every process that is still alive.
At the end of a partial run they are read from the client, turned into the
records the scheduler plugin would have sent (``capture/wire.py``), and stored
with the run. What they cannot give: lines of a worker that died (its process
took them), metrics over time, fine performance metrics.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dask_observe.capture.wire import EventRecord, LogRecord, Record, TaskRecord
from dask_observe.recording.link import answer_timeout

if TYPE_CHECKING:
    from distributed import Client

logger = logging.getLogger(__name__)

#: distributed's ``log-format`` default, "time - logger - LEVEL - message".
_SEPARATOR = " - "

_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}

#: Our own calls, which the cluster logs like any other.
_OWN = ("Run out-of-band function 'capture_on_scheduler'",)
#: What a scheduler older than the task stream's index logs when asked for it
#: (with a traceback): our asking, not the cluster talking.
_NO_INDEX = "No handler get_task_stream_index found"

#: The scheduler's "all" topic names what happened to workers as actions.
_WORKER_ACTIONS = {"add-worker": "worker-added", "remove-worker": "worker-removed"}


@dataclass(frozen=True)
class StreamMark:
    """Where the scheduler's task stream stood as a run began: its index
    (distributed 2026.6 on), or else its newest task then (key and end, as
    the worker stamped it; None: the stream was empty)."""

    index: int | None = None
    newest: tuple[str, float] | None = None


#: Schedulers (by address) that have no task stream index: asked once each
#: (each asking logs a warning with a traceback there).
_WITHOUT_INDEX: set[str] = set()


def begin(client: Client) -> StreamMark:
    """Have the scheduler keep its task stream from now on (it starts
    distributed's own ``TaskStreamPlugin`` when first asked for it), and
    mark where it stands: ``collect`` reads the tasks after the mark. Not by
    time: a worker shifts its tasks' times by its estimate of the scheduler's
    clock, and under load that estimate was off by more than a short block
    lasts (a one-task run had no task)."""
    scheduler: Any = client.scheduler
    address = str(getattr(scheduler, "address", ""))
    bound = answer_timeout()
    if address not in _WITHOUT_INDEX:
        try:  # (asking starts the stream too)
            index = client.sync(scheduler.get_task_stream_index, callback_timeout=bound)
            return StreamMark(index=int(index))
        except (OSError, TimeoutError):
            # A silent scheduler is not an old one: asking again would wait
            # as long, and the index would be lost to its later runs.
            raise
        except Exception:  # an older scheduler: no such handler
            _WITHOUT_INDEX.add(address)
    last = client.sync(scheduler.get_task_stream, count=1, callback_timeout=bound)
    return StreamMark(newest=_end_of(last[-1]) if last else None)


def _end_of(entry: dict[str, Any]) -> tuple[str, float]:
    return str(entry.get("key")), max(s["stop"] for s in entry["startstops"])


async def _after(scheduler: Any, mark: StreamMark) -> list[dict[str, Any]]:
    """The task stream's entries after ``mark`` (on the client's loop)."""
    if mark.index is not None:
        return list(await scheduler.get_task_stream(start_index=mark.index))
    if mark.newest is None:  # empty as the run began: all of it is the run's
        return list(await scheduler.get_task_stream())
    # Those that ended since the newest then, by the workers' own times.
    entries = list(await scheduler.get_task_stream(start=mark.newest[1]))
    ends = [_end_of(entry) for entry in entries]
    return entries[ends.index(mark.newest) + 1 :] if mark.newest in ends else entries


def _log(source: str, worker: str | None, entry: Any) -> LogRecord | None:
    created, level, text = entry
    parts = str(text).split(_SEPARATOR, 3)
    name, message = (parts[1], parts[3]) if len(parts) == 4 else ("", str(text))
    if message in _OWN or message.startswith(_NO_INDEX):
        return None
    number = _LEVELS.get(str(level).upper(), logging.INFO)
    return LogRecord("log", float(created), number, source, worker, name, message)


def _task(entry: dict[str, Any], span_id: str | None) -> TaskRecord:
    from dask.utils import key_split

    from dask_observe.capture.scheduler import phase_seconds

    phases, begin, end = phase_seconds(entry.get("startstops", ()))
    compute, transfer, disk_read, disk_write, deserialize = phases
    status = "memory" if entry.get("status") == "OK" else "erred"
    exception = entry.get("exception_text") if status == "erred" else None
    key = entry.get("key")
    return TaskRecord(
        "task", end or time.time(), str(key), key_split(key), span_id or "",
        entry.get("worker"), entry.get("thread"), begin, end, status,
        entry.get("nbytes"), compute, transfer, disk_read, disk_write,
        deserialize, exception,
        entry.get("traceback_text") if status == "erred" else None,
    )  # fmt: skip


@dataclass
class Collected:
    """What ``collect`` read, and whether the scheduler answered to the end."""

    records: list[Record]
    #: Why the scheduler was not read to the end (None: it answered): it did
    #: not answer one of its own reads within ``answer-timeout``, and the
    #: rest were not asked (each would have waited as long: a frozen
    #: scheduler held a cell's end five times the bound, in silence).
    silent: str | None = None


def collect(
    client: Client, started: float, span_id: str | None, mark: StreamMark | None
) -> Collected:
    """What the cluster still holds of the time since ``started``, as records.

    Every part is read on its own: one that fails (a dead worker's logs) is
    logged and the rest is kept, unless the scheduler itself stopped
    answering (``Collected.silent``). Tasks are those the cluster ran
    meanwhile (after ``mark``; since ``started`` without one); they are
    attributed to the run's span, which the task stream does not name.
    """
    scheduler: Any = client.scheduler
    records: list[Record | None] = []
    bound = answer_timeout()
    silent: str | None = None

    def read(what: str, fetch: Any, *, workers: bool = False) -> Any:
        nonlocal silent
        if silent is not None:
            return None
        try:
            return client.sync(fetch, callback_timeout=bound)
        except (OSError, TimeoutError) as e:
            # Workers' silence holds a broadcast, not the scheduler's answers.
            why = (
                f"no answer in {bound:g} s to a read of the {what}"
                if isinstance(e, TimeoutError)
                else f"{type(e).__name__}: {e}"
            )
            if workers:
                logger.warning("dask-observe: cannot read the %s: %s", what, why)
            else:
                silent = why
            return None
        except Exception as e:
            logger.warning("dask-observe: cannot read the %s: %s", what, e)
            return None

    stream = read(
        "task stream",
        (lambda: scheduler.get_task_stream(start=started))
        if mark is None
        else (lambda: _after(scheduler, mark)),
    )
    records += [_task(entry, span_id) for entry in stream or ()]
    own = read(
        "scheduler's logs",
        lambda: scheduler.get_logs(start=started, timestamps=True),
    )
    records += [_log("scheduler", None, entry) for entry in own or ()]
    for source, nanny, whose in (
        ("worker", False, "workers"),
        ("nanny", True, "nannies"),
    ):
        logs = read(
            f"{whose}' logs",
            lambda nanny=nanny: scheduler.broadcast(
                msg={"op": "get_logs", "start": started, "timestamps": True},
                nanny=nanny,
                on_error="ignore",  # a dead worker has nothing to say
            ),
            workers=True,
        )
        for worker, entries in (logs or {}).items():
            if isinstance(entries, list | tuple):  # a failed worker: an error
                records += [_log(source, worker, entry) for entry in entries]
    events = read("events", lambda: scheduler.events())
    for topic, entries in (events or {}).items():
        for t, msg in entries:
            if t < started:
                continue
            action = msg.get("action") if isinstance(msg, dict) else None
            worker = msg.get("worker") if isinstance(msg, dict) else None
            kind = _WORKER_ACTIONS.get(str(action), topic) if topic == "all" else topic
            if topic == "all" and kind == topic:
                continue  # the rest of "all" repeats the other topics
            records.append(EventRecord("event", float(t), kind, worker, msg))
    return Collected([r for r in records if r is not None], silent)

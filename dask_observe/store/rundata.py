"""A recorded run, as read back from the store."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Self

from dask_observe.capture.events import TaskNative, TaskStack, Transfer
from dask_observe.plaintext import folded_stack, frame_text
from dask_observe.store import queries
from dask_observe.units import parse_seconds, text_or_none

if TYPE_CHECKING:
    import pandas as pd

    from dask_observe.store.store import BaseStore

#: The columns of ``BaseStore.runs()``; ``Run.summary()`` has these keys and more.
RUN_COLUMNS = (
    "id",
    "name",
    "status",
    "started",
    "ended",
    "duration_s",
    "n_tasks",
    "n_failed",
    "n_flags",
    "cluster",
    # Why the run was recorded only partially (None: fully).
    "partial",
    # The workers it lost (died), from its verdict: see ``store.outcome``.
    "n_lost",
    # Its tasks still running when it ended (counted in n_tasks).
    "n_running",
)

#: The columns of ``Run.transfers()``.
#: The columns of ``run.stacks()``.
STACK_COLUMNS = (
    "time", "worker", "key", "prefix", "thread", "count", "frames", "folded",
    "native",
)  # fmt: skip

TRANSFER_COLUMNS = (
    "time", "worker", "peer", "type", "bytes", "seconds", "count", "keys",
    "bandwidth",
)  # fmt: skip

#: The columns of ``Run.fine_metrics()``.
FINE_METRIC_COLUMNS = ("context", "prefix", "activity", "unit", "value")

TimeLike = float | str | datetime

#: An event as ``RunData.event_rows`` reads it: time, kind, worker, data.
EventRow = tuple[float, str, "str | None", Any]


#: The forms of a time ``epoch`` reads, said when it cannot read one.
TIME_FORMS = (
    "an ISO time in UTC (2026-12-01, '2026-12-01 13:05'), seconds since the "
    "epoch, a time ago ('30s', '10min', '2h', '1d'), 'today' or 'yesterday'"
)


def epoch(value: TimeLike) -> float:
    """Seconds since the epoch from a number, a datetime, an ISO string, a
    duration ago (``"10min"``, ``"2h"``), ``"today"`` or ``"yesterday"``
    (midnight UTC); ValueError naming the forms otherwise.

    Times without a zone are taken as UTC, the zone every listing shows.
    """
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("today", "yesterday"):
            midnight = time.time() // 86400 * 86400
            return midnight - (86400 if text == "yesterday" else 0)
        try:
            return float(text)
        except ValueError:
            pass
        if text[:1].isdigit() and text[-1:].isalpha():
            try:
                return time.time() - parse_seconds(text)
            except ValueError:
                pass
    import pandas as pd

    try:
        stamp = pd.Timestamp(value)
    except (ValueError, TypeError, OverflowError):
        raise ValueError(f"cannot read the time {value!r}: give {TIME_FORMS}") from None
    if pd.isna(stamp):  # "NaT", "", "nat": no time at all
        raise ValueError(f"cannot read the time {value!r}: give {TIME_FORMS}")
    if stamp.tzinfo is None:
        stamp = stamp.tz_localize("UTC")
    return float(stamp.timestamp())


#: The task columns that hold numbers: times, seconds, bytes, a thread's id.
_TASK_NUMBERS = (
    "start", "stop", "ended", "compute_s", "transfer_s", "disk_read_s",
    "disk_write_s", "deserialize_s", "nbytes", "thread",
)  # fmt: skip


#: Task rows up to which :meth:`RunData.task_frame` makes its columns itself
#: (pandas' inference a column costs more than the rows of a small run).
_FEW_TASK_ROWS = 500


def _numbers(values: Sequence[Any]) -> Any:
    """A column of numbers as pandas infers it from rows: integers where
    every value is one, else floats (None: NaN)."""
    import numpy as np

    if values and all(type(v) is int for v in values):
        return np.array(values, dtype=np.int64)
    return np.array(values, dtype=float)


def _to_datetimes(
    frame: pd.DataFrame, *columns: str, epoch: bool = False
) -> pd.DataFrame:
    """Seconds since the epoch to UTC timestamps, unless ``epoch`` keeps them."""
    import pandas as pd

    if not epoch:
        for column in columns:
            frame[column] = pd.to_datetime(frame[column], unit="s", utc=True)
    return frame


class RunData:
    """One recorded run's data: a cell, a ``record()`` block, or a headless
    recording. Tasks belong to a run by its span; logs, metrics and events by
    the run's cluster and time window.

    What is made of the data (flags, the report) lives above the store: the
    public ``dask_observe.Run`` is this with ``flags()`` and ``report()``.
    """

    def __init__(self, store: BaseStore, record: dict[str, Any]) -> None:
        self.store = store
        self._record = record

    def _settle(self) -> None:
        """Wait for a run's end still being written, where one is, before
        reading what it writes (status, window, settings, environment, fine
        metrics, profile, summary). The one hook each of those readers calls:
        nothing to wait for here; ``dask_observe.Run`` waits for an end this
        process writes in the background."""

    @property
    def id(self) -> int:
        return int(self._record["id"])

    @property
    def name(self) -> str:
        return str(self._record["name"])

    @property
    def status(self) -> str:
        """One of ``running``, ``finished``, ``failed``, ``interrupted``."""
        self._settle()
        return str(self._record["status"])

    @property
    def span_id(self) -> str | None:
        """The run's span on the cluster (None: a whole-cluster recording)."""
        found = self._record.get("span_id")
        return str(found) if found else None

    @property
    def cluster(self) -> str:
        """The address of the scheduler the run was recorded on."""
        return str(self._record["cluster"])

    @property
    def partial(self) -> str | None:
        """Why the run was recorded only partially (its cluster did not take
        the capture plugins), or None for a run recorded fully."""
        self._settle()
        why = self._record.get("partial")
        return None if why is None else str(why)

    def settings(self) -> dict[str, Any]:
        """The settings the run is judged under, as recorded when it ended:
        ``memory`` (the memory thresholds its workers ran with, as fractions of
        their limits: target, spill, pause, terminate; ``memory_by_worker``
        where workers differ), ``flags`` (the recorder's ``observe.flags``) and
        ``source`` (``workers`` or ``client``). Empty for a run recorded
        before dask-observe kept them, or still running."""
        self._settle()
        found = self._record.get("settings")
        return found if isinstance(found, dict) else {}

    def environment(self) -> dict[str, Any]:
        """What the run ran in, as recorded when it ended: ``packages`` (by
        process: client, scheduler, workers, or each worker where they differ;
        ``python`` among them), ``os``, ``cluster`` (workers, threads,
        memory_limit, resources), ``config`` (dask config values that differ
        from dask's defaults, on the client), ``code`` (``cell``, or
        ``script`` with ``git_commit``). Empty for a run recorded before
        dask-observe kept it, or still running."""
        self._settle()
        found = self._record.get("environment")
        return found if isinstance(found, dict) else {}

    @property
    def started(self) -> float:
        """When the run started, in seconds since the epoch."""
        return float(self._record["started"])

    def window_end(self) -> float:
        """When the run ended, or now while it runs (seconds since the epoch)."""
        self._settle()
        end = self._record["ended"]
        return time.time() if end is None else float(end)

    def kept_figures(self) -> tuple[dict[str, float], float | None] | None:
        """See :func:`kept_figures`."""
        return kept_figures(self._record)

    def refresh(self) -> Self:
        """Re-read this run from the store (its status may have changed)."""
        self._record = self.store.run_record(self.id)
        return self

    def _window(
        self, since: TimeLike | None = None, until: TimeLike | None = None
    ) -> queries.Window:
        self._settle()
        start = self.started
        # A finished run holds what was recorded while it ran: its slice of the
        # store ends at seq_end, and also holds lines stamped just after its end
        # (a nanny reporting how a worker killed inside the run ended), which the
        # final flush fetched. Only a running run is bounded by the clock.
        end: float | None = None if self._record.get("seq_end") else time.time()
        if since is not None:
            start = max(start, epoch(since))
        if until is not None:
            end = epoch(until) if end is None else min(end, epoch(until))
        return queries.Window(
            self._record["cluster"],
            start,
            end,
            self._record.get("seq_start"),
            self._record.get("seq_end"),
        )

    def logs(
        self,
        contains: str | None = None,
        level: str | int | None = None,
        worker: str | None = None,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
        *,
        source: str | None = None,
        regex: bool = False,
        epoch: bool = False,
        own: bool = False,
        task: str | None = None,
        fields: Mapping[str, Any] | None = None,
        prefix: str | None = None,
    ) -> pd.DataFrame:
        """Log lines of the scheduler, workers and nannies during the run, and
        what its tasks printed: to stdout and stderr (loggers ``stdout`` and
        ``stderr``) and the warnings they raised (``py.warnings``).

        ``contains`` matches case-insensitively (a regular expression, case-sensitive,
        with ``regex=True``); ``level`` is the lowest level shown; ``source`` is one of
        scheduler, worker, nanny, or of what tasks wrote: stdout, stderr,
        warning (their workers' lines of those loggers); ``task`` a task's
        key: the lines its thread
        wrote; ``prefix`` the lines of the tasks of that prefix (as
        ``tasks()["prefix"]`` names them); ``fields`` the lines whose logging
        call's ``extra`` held each
        of these values (``fields={"table": "orders"}``). Lines about
        dask-observe's own plugins ("Starting Worker plugin
        dask-observe-worker") are shown with ``own=True``.

        Columns: time, level, source, worker, logger, message, task (the key
        of the task whose thread wrote the line, None outside tasks) and
        fields (a logging call's ``extra`` fields, as a JSON object). Times
        are UTC timestamps, or seconds since the epoch with ``epoch=True``.
        """
        sql, params = queries.log_query(
            self._window(since, until),
            contains=contains,
            regex=regex,
            level=level,
            worker=worker,
            source=source,
            own=own,
            task=task,
            fields=fields,
            prefix=prefix,
        )
        frame = self.store.frame(sql, params, ("seq", *queries.LOG_COLUMNS))
        frame["level"] = queries.level_names(frame["level"])
        return _to_datetimes(frame.drop(columns="seq"), "time", epoch=epoch)

    def log_records(
        self,
        since: TimeLike | None = None,
        until: TimeLike | None = None,
        **filters: Any,
    ) -> list[dict[str, Any]]:
        """The lines :meth:`logs` gives (the same ``filters``), as dicts with
        its columns, times in seconds since the epoch: for what prints them
        (the command line, the magics), which need no DataFrame, nor
        pandas's import (0.3-0.5 s of a command's start)."""
        window = self._window(since, until)
        sql, params = queries.log_query(window, **filters)
        rows = self.store.plain_rows(sql, params)
        names = queries.level_names(row[2] for row in rows)
        return [
            dict(zip(queries.LOG_COLUMNS, (row[1], name, *row[3:]), strict=True))
            for row, name in zip(rows, names, strict=True)
        ]

    def log_lines(self, contains: str) -> list[tuple[float, str | None, str]]:
        """(time in epoch seconds, worker or None, message) of the run's lines
        containing ``contains`` (as :meth:`logs` finds them), but what tasks
        printed: for the rules, which read distributed's own words (a task
        that prints "Pausing worker" paused nothing), without a DataFrame's
        fixed cost (~1 ms a read, four reads in a run's judging)."""
        window = self._window()
        sql, params = queries.log_query(window, contains=contains, output=False)
        return [
            (float(r["time"]), text_or_none(r["worker"]), str(r["message"]))
            for r in self.store.rows(sql, params)
        ]

    def log_page(
        self,
        after: int = 0,
        limit: int = 1000,
        upto: int | None = None,
        **filters: Any,
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` lines numbered above ``after`` (and at most ``upto``),
        in the order they were stored, as dicts with ``seq`` and the columns of
        :meth:`logs` (times in seconds since the epoch). ``filters`` as for
        :meth:`logs`: contains, regex, level, worker, source, own. For views that
        page or poll: the last ``seq`` is where the next page starts."""
        window = self._window()
        if upto is not None:
            end = window.seq_upto
            window = window._replace(seq_upto=upto if end is None else min(end, upto))
        sql, params = queries.stream_query("logs", window, after, limit, logs=filters)
        rows = [dict(r) for r in self.store.rows(sql, params)]
        names = queries.level_names(r["level"] for r in rows)
        for row, name in zip(rows, names, strict=True):
            row["level"] = name
        return rows

    def tasks(self, *, epoch: bool = False) -> pd.DataFrame:
        """Every task that ran in the run, finished or failed, in the order it ended.

        Columns: key, prefix, worker, start, stop, duration_s, status, nbytes, thread,
        and seconds spent in compute, transfer, disk read/write and deserialisation;
        exception and traceback for failed tasks; ``ended``, when the scheduler
        learnt that the task ended.
        """
        columns, rows = self.task_rows()
        return self.task_frame(columns, rows, epoch=epoch)

    def task_rows(self) -> tuple[list[str], list[tuple[Any, ...]]]:
        """:meth:`tasks` as stored: its columns (but ``duration_s``) and its
        rows as plain tuples, times in epoch seconds (``analysis.few``)."""
        sql, params, columns = queries.task_query(
            self._window(), self._record.get("span_id")
        )
        return columns, self.store.plain_rows(sql, params)

    @staticmethod
    def task_frame(
        columns: list[str], rows: list[tuple[Any, ...]], *, epoch: bool = False
    ) -> pd.DataFrame:
        """:meth:`tasks` of the rows :meth:`task_rows` read."""
        import pandas as pd

        if not rows or len(rows) > _FEW_TASK_ROWS:
            frame = pd.DataFrame(rows, columns=columns)
            # Numbers even where no row has one (the start and thread of the
            # one task of a run, killed with its worker): all None, such a
            # column was text, and pandas 2.2 warned of what filling it would
            # become.
            for column in _TASK_NUMBERS:
                if frame[column].dtype == object:
                    frame[column] = frame[column].astype(float)
            frame.insert(5, "duration_s", frame["stop"] - frame["start"])
        else:  # made a column at a time: 2.0 -> 0.5 ms for one task
            values = dict(zip(columns, zip(*rows, strict=True), strict=True))
            data: dict[str, Any] = {
                c: _numbers(values.get(c, ()))
                if c in _TASK_NUMBERS
                else list(values.get(c, ()))
                for c in columns
            }
            data["duration_s"] = data["stop"] - data["start"]
            names = [*columns[:5], "duration_s", *columns[5:]]
            frame = pd.DataFrame(data, columns=names)
        return _to_datetimes(frame, "start", "stop", "ended", epoch=epoch)

    def metrics(
        self,
        name: str | Sequence[str] | None = None,
        worker: str | None = None,
        *,
        epoch: bool = False,
    ) -> pd.DataFrame:
        """Sampled metrics in long form: time, worker, name, value; of one
        metric ``name``, or of each of several names.

        Rows whose worker is None are cluster-wide (workers, threads, memory, tasks
        by state). A worker's value holds until its next row: between its
        heartbeats only ``tasks_processing`` is sampled, when it changes.
        """
        return self.metric_frame(self.metric_rows(name, worker), epoch=epoch)

    def metric_rows(
        self, name: str | Sequence[str] | None = None, worker: str | None = None
    ) -> list[tuple[float, str | None, str, float]]:
        """:meth:`metrics` as plain (time in epoch seconds, worker, name,
        value) tuples (``analysis.few``)."""
        sql, params = queries.metric_query(self._window(), name, worker)
        return self.store.plain_rows(sql, params)

    @staticmethod
    def metric_frame(
        rows: Sequence[tuple[float, str | None, str, float]], *, epoch: bool = False
    ) -> pd.DataFrame:
        """:meth:`metrics` of the rows :meth:`metric_rows` read."""
        import pandas as pd

        frame = pd.DataFrame(rows, columns=list(queries.METRIC_COLUMNS))
        return _to_datetimes(frame, "time", epoch=epoch)

    def cluster_metric_max(self, name: str) -> float | None:
        """The highest cluster-wide value (workers, nthreads, memory_spilled...)
        of metric ``name`` in the run, or None without one: one row from
        SQLite, where reading the samples made a DataFrame each time (a report
        asked five times, 8 ms of a small run's report)."""
        sql, params = queries.cluster_metric_max_query(self._window(), name)
        value = self.store.rows(sql, params)[0]["value"]
        return None if value is None else float(value)

    def metric_before(self, name: str) -> dict[str | None, float]:
        """Where the gauge ``name`` stood before the run began, by worker (None:
        cluster-wide): its last sample before it; a worker or cluster not
        sampled before is missing."""
        sql, params = queries.metric_before_query(self._window(), name)
        return {
            text_or_none(row["worker"]): float(row["value"])
            for row in self.store.rows(sql, params)
        }

    def cluster_metric_rise(self, name: str) -> float | None:
        """How far the cluster-wide gauge ``name`` rose in the run above where
        it stood before (:meth:`metric_before`; 0 where it was not sampled),
        or None without a sample in the run: what the run itself added to a
        gauge the run before may have left high (the bytes spilled: a hang
        run was flagged for 320 MiB spilled before it)."""
        peak = self.cluster_metric_max(name)
        if peak is None:
            return None
        return max(0.0, peak - self.metric_before(name).get(None, 0.0))

    def event_rows(self, kind: str | None = None) -> list[EventRow]:
        """The events of :meth:`events` as (time in epoch seconds, kind,
        worker or None, data) tuples: for readers that only walk them."""
        sql, params = queries.event_query(self._window(), kind)
        return [
            (float(t), str(k), text_or_none(w), json.loads(d))
            for t, k, w, d in self.store.plain_rows(sql, params)
        ]

    def events(self, kind: str | None = None, *, epoch: bool = False) -> pd.DataFrame:
        """Lifecycle events: workers added and removed, restarts, drops, topics."""
        sql, params = queries.event_query(self._window(), kind)
        frame = self.store.frame(sql, params, queries.EVENT_COLUMNS)
        frame["data"] = [json.loads(d) for d in frame["data"]]
        return _to_datetimes(frame, "time", epoch=epoch)

    def transfers(self, *, epoch: bool = False) -> pd.DataFrame:
        """Data the workers fetched from each other, as each receiving worker
        logged it, summed a second per sending worker and type: time (the last
        transfer's end), worker (receiving), peer (sending), type (of the data;
        "mixed" when a transfer carried several), bytes, seconds (spent
        transferring), count (transfers), keys, bandwidth (bytes/s)."""
        import numpy as np
        import pandas as pd

        rows = [
            (t, w, *said)
            for t, _, w, d in self.event_rows("transfer")
            if (said := Transfer.from_data(d)) is not None
        ]
        columns = list(zip(*rows, strict=True)) or [()] * 8
        # Typed columns made at once: a frame made then cast cost ~3 ms more
        # (most runs have no transfer; a report reads them).
        nbytes = np.array(columns[4], dtype="int64")
        seconds = np.array(columns[5], dtype=float)
        frame = pd.DataFrame(
            {
                "time": np.array(columns[0], dtype=float),
                "worker": list(columns[1]),
                "peer": list(columns[2]),
                "type": list(columns[3]),
                "bytes": nbytes,
                "seconds": seconds,
                "count": np.array(columns[6], dtype="int64"),
                "keys": np.array(columns[7], dtype="int64"),
                "bandwidth": nbytes / seconds.clip(min=1e-3),
            }
        )
        return _to_datetimes(frame, "time", epoch=epoch)

    def stacks(self, *, epoch: bool = False) -> pd.DataFrame:
        """Stacks of tasks that ran far beyond their peers (past
        ``observe.flags.hung-task.after``), sampled on their workers while they
        ran, and of every task still running when the run was stopped: time
        (first seen), worker, key, prefix, thread, count (times that stack was
        sampled), frames (as a traceback prints them, innermost last), folded
        (the same with each run of library frames between the user's code and
        where the thread waits as one line: "... 14 library frames
        (threading, distributed)"), native (the compiled code's frames
        beneath the innermost Python one, ``name (file:line)`` innermost
        last, read with py-spy where the worker has it; else, where it was
        tried, "native stacks unavailable: " and why)."""
        import pandas as pd

        native = self.native_stacks()
        events = self.events("task-stack", epoch=True)
        seen: dict[tuple[str, str, str], list[Any]] = {}
        for t, w, d in zip(
            events["time"], events["worker"], events["data"], strict=True
        ):
            said = TaskStack.from_data(d)
            if said is None:
                continue
            frames = format_frames(said.frames)
            row = seen.get((w, said.key, frames))
            if row is None:
                seen[w, said.key, frames] = [
                    t, w, said.key, said.prefix, said.thread, said.times, frames,
                    folded_stack(said.frames),
                    native.get((w, said.key), native.get((w, None), "")),
                ]  # fmt: skip
            else:
                row[5] = max(row[5], said.times)
        frame = pd.DataFrame(list(seen.values()), columns=list(STACK_COLUMNS))
        frame = frame.astype({"time": float, "count": "int64"})
        return _to_datetimes(frame, "time", epoch=epoch)

    def native_stacks(self) -> dict[tuple[str | None, str | None], str]:
        """The native frames read beneath a task's Python ones, by (worker,
        key), innermost last, one a line; and by (worker, None), why they
        could not be read on that worker ("native stacks unavailable: ...")."""
        found: dict[tuple[str | None, str | None], str] = {}
        for _, _, worker, data in self.event_rows("task-native"):
            said = TaskNative.from_data(data)
            if said is None:
                continue
            if said.reason:
                found[worker, None] = f"native stacks unavailable: {said.reason}"
            elif said.native:
                found[worker, said.key] = "\n".join(said.native)
        return found

    def profile_trees(self, native: bool = True) -> dict[str, Any]:
        """distributed's profile of the run as trees, by prefix ("" for the whole
        run): ``interval`` (seconds a sample) and ``root``, whose nodes have
        name, filename, line, count (samples) and children. (``native``: see
        ``dask_observe.Run.profile_trees``, which grafts compiled frames in.)"""
        self._settle()
        return self.store.profiles(self.id)

    def fine_metrics(self) -> pd.DataFrame:
        """Where the run's task time went, as distributed's workers measured it
        (its "fine performance metrics"): context, prefix, activity, unit, value.

        ``execute`` rows split each prefix's time into ``thread-cpu``,
        ``thread-noncpu`` (waiting: the GIL, I/O, sleep), ``executor``,
        ``deserialize``, ``disk-read`` / ``disk-write`` (spilling, also in bytes)
        and ``other``. Other contexts, measured for the whole cluster while the
        run lasted, have ``""`` as prefix: ``memory-monitor`` (spilling outside
        tasks), ``get-data`` and ``gather-dep`` (transfers)... Read when the run
        ends (empty while it runs); a whole-cluster recording (no span) has all
        contexts as the cluster measured them meanwhile.
        """
        import pandas as pd

        return pd.DataFrame(self.fine_rows(), columns=list(FINE_METRIC_COLUMNS))

    def fine_rows(self) -> list[tuple[str, str, str, str, float]]:
        """The rows of :meth:`fine_metrics` as tuples: for readers that sum
        a few of them (a row per prefix, activity and unit: hundreds even for
        large runs), without a DataFrame's fixed cost."""
        self._settle()
        return self.store.plain_rows(
            "SELECT context, prefix, activity, unit, value FROM fine_metrics"
            " WHERE run_id = ? ORDER BY context, prefix, activity, unit",
            (self.id,),
        )

    def dropped(self, kind: str | None = None) -> int:
        """Records the capture had to drop during the run because a buffer was full;
        ``kind`` narrows to one of log, task, metrics, event."""
        counts = [d for _, _, _, d in self.event_rows("dropped")]
        return int(sum(d["count"] for d in counts if kind in (None, d["kind"])))

    def summary(self) -> dict[str, Any]:
        """The headline figures of the run."""
        self._settle()
        summary = {key: self._record[key] for key in RUN_COLUMNS}
        summary["dropped"] = self.dropped()
        return summary

    def __repr__(self) -> str:
        return f"<dask_observe.Run {self.id} {self.name!r} {self.status}>"


def kept_figures(
    record: Mapping[str, Any],
) -> tuple[dict[str, float], float | None] | None:
    """What a history reads of a run, as kept in its row (``record``, as
    ``run_records`` gives it) since its end (or a history) worked it out: each
    prefix's mean compute seconds a task, and its peak memory (None where it
    had no memory sample); None where they are not kept yet."""
    pace = record.get("pace")
    if not isinstance(pace, dict):
        return None
    peak = record.get("peak_memory")
    return dict(pace), None if peak is None else float(peak)


def format_frames(frames: Any) -> str:
    """Shipped frames (file, line, function, code, library) as a traceback
    prints them, outermost first."""
    return "\n".join(frame_text(f) for f in frames)

"""A run as a Chrome trace (the Trace Event Format), which Perfetto
(ui.perfetto.dev) and chrome://tracing open: a process per worker, a thread
track per worker thread with a complete event per task, the run's events and
flags as instant events, and each worker's memory as counter tracks.

The format: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from dask_observe.analysis.figures import PHASE_COLUMNS, fast_memory, task_table
from dask_observe.capture.wire import BOOKKEEPING_EVENTS
from dask_observe.export.safefiles import open_to_write

if TYPE_CHECKING:
    from dask_observe.diagnose import Flag
    from dask_observe.store import RunData

#: The scheduler's process: the run's own events and the flags about no worker.
SCHEDULER_PID = 1
#: Heartbeat memory figures drawn as a counter track per worker, in bytes.
HEARTBEAT_MEMORY = ("memory_managed", "memory_unmanaged", "memory_spilled")


def _us(seconds: float) -> float:
    """Trace time (microseconds since the run started)."""
    return round(seconds * 1e6, 3)


def _number(value: Any) -> float | int | None:
    """A JSON-safe number, or None for a missing one (NaN is no JSON)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    found = value.item() if hasattr(value, "item") else value
    return cast("float | int", found)


class _Tracks:
    """Process ids by worker and thread ids by lane, with their names."""

    def __init__(self) -> None:
        self.pids: dict[str, int] = {}
        self.tids: dict[tuple[int, str], int] = {}
        self.events: list[dict[str, Any]] = [
            _name("process_name", SCHEDULER_PID, None, "scheduler"),
            _sort("process_sort_index", SCHEDULER_PID, 0),
        ]

    def pid(self, worker: str | None) -> int:
        if not worker:
            return SCHEDULER_PID
        if worker not in self.pids:
            pid = self.pids[worker] = len(self.pids) + 2
            self.events += [
                _name("process_name", pid, None, f"worker {worker}"),
                _sort("process_sort_index", pid, pid),
            ]
        return self.pids[worker]

    def tid(self, pid: int, lane: str) -> int:
        if (pid, lane) not in self.tids:
            tid = self.tids[pid, lane] = len(self.tids) + 1
            thread = lane.rsplit("#", 1)[-1]
            self.events.append(_name("thread_name", pid, tid, f"thread {thread}"))
        return self.tids[pid, lane]


def _name(kind: str, pid: int, tid: int | None, name: str) -> dict[str, Any]:
    event: dict[str, Any] = {
        "ph": "M",
        "name": kind,
        "pid": pid,
        "args": {"name": name},
    }
    if tid is not None:
        event["tid"] = tid
    return event


def _sort(kind: str, pid: int, index: int) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "pid": pid, "args": {"sort_index": index}}


def _task_events(run: RunData, tracks: _Tracks) -> list[dict[str, Any]]:
    tasks = task_table(run, run.started)
    events = []
    phases = [(p, cols) for p, cols in PHASE_COLUMNS.items() if p != "compute"]
    for task in tasks.to_dict("records"):
        start, stop = _number(task["start"]), _number(task["stop"])
        if start is None or stop is None:  # never ran: nothing to draw
            continue
        pid = tracks.pid(task["worker"] if isinstance(task["worker"], str) else None)
        args: dict[str, Any] = {
            "key": str(task["key"]),
            "status": task["status"],
            "nbytes": _number(task["nbytes"]),
        }
        for phase, columns in phases:
            seconds = sum(_number(task.get(c)) or 0.0 for c in columns)
            if seconds:
                args[f"{phase}_s"] = round(seconds, 6)
        if isinstance(task.get("exception"), str):
            args["exception"] = task["exception"]
        events.append(
            {
                "ph": "X",
                "cat": "task",
                "name": str(task["prefix"]),
                "pid": pid,
                "tid": tracks.tid(pid, str(task["lane"])),
                "ts": _us(start),
                "dur": _us(max(stop - start, 0.0)),
                "args": args,
            }
        )
    return _end_to_end(events)


def _end_to_end(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``slices`` with each starting no earlier than the one before it on its
    thread ended. A worker stamps a task's start and stop with its own clock
    plus its estimate of the scheduler's offset, which each heartbeat
    renews: back-to-back tasks of one thread can overlap by the estimate's
    change, and a trace viewer nests overlapping slices of a thread (one
    task drawn inside another) where it should draw them in turn."""
    ended: dict[tuple[int, int], float] = {}
    for event in sorted(slices, key=lambda e: (e["pid"], e["tid"], e["ts"])):
        track = event["pid"], event["tid"]
        before = ended.get(track)
        stop = event["ts"] + event["dur"]
        if before is not None and event["ts"] < before:
            event["ts"] = before
            event["dur"] = round(max(stop - before, 0.0), 3)
        ended[track] = max(stop, before if before is not None else stop)
    return slices


def _instant(
    name: str, category: str, at: float, pid: int, args: dict[str, Any]
) -> dict[str, Any]:
    # Scope "p" draws the mark across the whole process, "g" across the trace.
    return {
        "ph": "i",
        "cat": category,
        "name": name,
        "pid": pid,
        "tid": 0,
        "s": "p" if pid != SCHEDULER_PID else "g",
        "ts": _us(at),
        "args": args,
    }


def _run_events(run: RunData, tracks: _Tracks) -> list[dict[str, Any]]:
    events = run.events(epoch=True)
    columns = ("time", "kind", "worker", "data")
    return [
        _instant(
            str(kind),
            "event",
            float(at) - run.started,
            tracks.pid(worker if isinstance(worker, str) else None),
            data if isinstance(data, dict) else {"data": data},
        )
        for at, kind, worker, data in zip(*(events[c] for c in columns), strict=True)
        if kind not in BOOKKEEPING_EVENTS
    ]


def _flag_events(flags: list[Flag], started: float, tracks: _Tracks) -> list[Any]:
    return [
        _instant(
            f"flag: {flag.kind}",
            "flag",
            flag.time - started,
            tracks.pid(flag.worker),
            {"severity": flag.severity, "message": flag.message, "advice": flag.advice},
        )
        for flag in flags
    ]


def _memory_counters(run: RunData, tracks: _Tracks) -> list[dict[str, Any]]:
    events = []
    rss = fast_memory(run)
    for at, worker, value in zip(rss["time"], rss["worker"], rss["rss"], strict=True):
        events.append(
            {
                "ph": "C",
                "name": "memory (RSS)",
                "pid": tracks.pid(str(worker)),
                "ts": _us(float(at) - run.started),
                "args": {"rss": float(value)},
            }
        )
    heartbeats = run.metrics(epoch=True)
    heartbeats = heartbeats[
        heartbeats["name"].isin(HEARTBEAT_MEMORY) & heartbeats["worker"].notna()
    ]
    for (at, worker), rows in heartbeats.groupby(["time", "worker"], sort=True):
        events.append(
            {
                "ph": "C",
                "name": "memory (heartbeat)",
                "pid": tracks.pid(str(worker)),
                "ts": _us(float(cast("float", at)) - run.started),
                "args": {
                    str(n).removeprefix("memory_"): float(v)
                    for n, v in zip(rows["name"], rows["value"], strict=True)
                },
            }
        )
    return events


def chrome_trace(run: RunData, flags: list[Flag]) -> dict[str, Any]:
    """The run as a Trace Event Format object (``json.dump`` it)."""
    tracks = _Tracks()
    events = _task_events(run, tracks)
    events += _run_events(run, tracks)
    events += _flag_events(flags, run.started, tracks)
    events += _memory_counters(run, tracks)
    return {
        "traceEvents": tracks.events + events,
        "displayTimeUnit": "ms",
        "otherData": {
            "run": run.id,
            "name": run.name,
            "status": run.status,
            "started": run.started,
            "exported_by": "dask-observe",
        },
    }


def write_chrome_trace(
    run: RunData,
    flags: list[Flag],
    path: str | os.PathLike[str],
    *,
    overwrite: bool = True,
) -> Path:
    """Write the run's trace to ``path`` (a .json file); return the path.
    Never through a symbolic link; over an existing file only with
    ``overwrite``."""
    target = Path(path).expanduser()
    with open_to_write(target, overwrite=overwrite) as f:
        json.dump(chrome_trace(run, flags), f, separators=(",", ":"))
    return target

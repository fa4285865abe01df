"""The runs of one name, each judged against the ones before it
(``store.history(name)``, ``archive.history(name)``).

What a run's judgement reads of it is a handful of figures (its wall time,
each prefix's pace, its environment, its peak memory) and, for a run with
few before it, a comparison with the previous one. A run is an
:class:`Entry`: a local store's keeps them in the run's row (written by
the run's end, or, for a run recorded before, by the first history that
works them out); an archive's has them in the run's manifest. Either way a
history of thousands of runs reads no run's tables.
"""

from __future__ import annotations

import contextlib
import sqlite3
import statistics
from collections import deque
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from dask_observe import config
from dask_observe.analysis import noise, verdicts
from dask_observe.analysis.changes import change_text, differences
from dask_observe.analysis.compare import NothingToCompare, compare
from dask_observe.analysis.figures import host_load, peak_memory
from dask_observe.store import StoreError
from dask_observe.store.rundata import kept_figures

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pandas as pd

    from dask_observe.store import BaseStore, RunData

#: The columns of ``store.history(name)``.
HISTORY_COLUMNS = (
    "id", "started", "status", "duration_s", "n_tasks", "n_failed", "n_flags",
    "verdict", "changed", "peak_memory", "prefixes", "memory_verdict",
)  # fmt: skip

#: Earlier runs a history's bands are drawn from (the newest).
BAND_RUNS = 10


class Entry(Protocol):
    """A run as its history reads it."""

    #: Its listing's record: id, started, status, duration_s, n_tasks, ...
    record: dict[str, Any]

    def pace(self) -> dict[str, float]: ...

    def environment(self) -> dict[str, Any]: ...

    def peak(self) -> float | None: ...

    def data(self) -> RunData: ...


def per_task(run: RunData, tasks: pd.DataFrame | None = None) -> dict[str, float]:
    """Each prefix's mean compute seconds a task: its pace whatever the
    number of tasks (more work is not slower work). ``tasks``: the run's
    rows where read already."""
    tasks = run.tasks() if tasks is None else tasks
    means = tasks.groupby("prefix")["compute_s"].mean()
    return {str(prefix): float(mean) for prefix, mean in means.items()}


def history_figures(
    run: RunData, tasks: pd.DataFrame | None = None
) -> tuple[dict[str, float], float | None]:
    """What a history reads of a run's tables: each prefix's pace
    (:func:`per_task`) and the run's peak memory, worked out from them."""
    return per_task(run, tasks), peak_memory(run, kept=False)


class StoredEntry:
    """A run of a store: its figures from its row, worked out from its
    tables where they are not there yet (a run judged before the store kept
    them), and then kept (:func:`history` stores them)."""

    def __init__(self, store: BaseStore, record: dict[str, Any]) -> None:
        self.store = store
        self.record = record
        #: Figures worked out here, for :func:`history` to store.
        self.worked_out: tuple[dict[str, float], float | None] | None = None

    @cached_property
    def _data(self) -> RunData:
        return self.store.run(self.record["id"])

    def data(self) -> RunData:
        return self._data

    def _figures(self) -> tuple[dict[str, float], float | None]:
        kept = kept_figures(self.record)
        if kept is not None:
            return kept
        if self.worked_out is None:
            self.worked_out = history_figures(self._data)
        return self.worked_out

    def pace(self) -> dict[str, float]:
        return self._figures()[0]

    def environment(self) -> dict[str, Any]:
        environment = self.record.get("environment")
        return environment if isinstance(environment, dict) else {}

    def peak(self) -> float | None:
        return self._figures()[1]


def history(
    store: BaseStore,
    name: str,
    *,
    threshold: float | None = None,
    last: int | None = None,
) -> pd.DataFrame:
    """The runs named ``name`` in ``store``: see :func:`judge`."""
    return frame_of(history_records(store, name, threshold=threshold, last=last))


def history_records(
    store: BaseStore,
    name: str,
    *,
    threshold: float | None = None,
    last: int | None = None,
) -> list[dict[str, Any]]:
    """:func:`history` as dicts (``started`` in seconds since the epoch, an
    unknown peak None), without pandas where the store kept what it reads.
    Figures and comparisons it had to work out from a run's tables are
    stored for the next history (where the store can be written)."""
    records = [r for r in reversed(store.run_records()) if r["name"] == name]
    entries = [StoredEntry(store, record) for record in records]
    comparisons = Comparisons(store.kept.kept_comparisons(config.version()))
    judged = judge_records(
        entries, threshold=threshold, last=last, comparisons=comparisons
    )
    worked_out = [
        (int(e.record["id"]), *e.worked_out)
        for e in entries
        if e.worked_out is not None and e.record["status"] != "running"
    ]
    if (worked_out or comparisons.made) and not getattr(store, "readonly", False):
        # Worked out again next time if it cannot be kept (a store another
        # process holds, a full disk): a history reads, it never fails for that.
        with contextlib.suppress(StoreError, sqlite3.Error):
            if worked_out:
                store.kept.set_history_figures(worked_out)
            if comparisons.made:
                store.kept.keep_comparisons(comparisons.made, config.version())
    return judged


class Comparisons:
    """The wall-time verdicts of runs compared with the finished run before
    them (a history's first runs, too few for a band): ``(earlier id, later
    id, threshold): verdict``. A comparison reads both runs' tables (~30 ms
    and pandas' import); two finished runs never change, so a store keeps
    each one made (``kept``, by this version), and :attr:`made` holds those
    made here, to keep."""

    def __init__(self, kept: dict[tuple[Any, Any, float], str] | None = None) -> None:
        self.kept = dict(kept or {})
        self.made: dict[tuple[Any, Any, float], str] = {}

    def wall(self, previous: Entry, entry: Entry, floor: float) -> str:
        key = (previous.record["id"], entry.record["id"], floor)
        if key not in self.kept:
            try:
                table = compare(
                    previous.data(), entry.data(), threshold=floor, profiles=False
                ).table.set_index("figure")
                verdict = str(table.loc["wall time", "verdict"])
            except NothingToCompare:
                verdict = ""
            self.kept[key] = self.made[key] = verdict
        return self.kept[key]


def judge(
    entries: Sequence[Entry],
    *,
    threshold: float | None = None,
    last: int | None = None,
) -> pd.DataFrame:
    """:func:`judge_records` as a DataFrame (``started`` a UTC timestamp,
    an unknown peak NaN)."""
    return frame_of(judge_records(entries, threshold=threshold, last=last))


def frame_of(records: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    frame = pd.DataFrame(
        [[r[c] for c in HISTORY_COLUMNS] for r in records],
        columns=list(HISTORY_COLUMNS),
    )
    frame["started"] = pd.to_datetime(frame["started"], unit="s", utc=True)
    frame["peak_memory"] = frame["peak_memory"].astype("float64")
    return frame


def judge_records(
    entries: Sequence[Entry],
    *,
    threshold: float | None = None,
    last: int | None = None,
    comparisons: Comparisons | None = None,
) -> list[dict[str, Any]]:
    """The runs ``entries`` (oldest first), each judged against the ones
    before it: ``verdict`` is the wall time's (against the spread of five or
    more earlier finished runs, else in a comparison with the previous one),
    ``changed`` what differs from the previous run's environment,
    ``peak_memory`` the most bytes its workers held together (None unknown),
    ``prefixes`` the task prefixes whose time a task left their own spread
    over the earlier runs ({prefix: verdict}; five or more earlier runs),
    ``memory_verdict`` the peak memory's, judged as the wall time is.
    ``last``: only the newest that many runs (the older ones still count in
    the spread their verdicts are judged against)."""
    comparisons = Comparisons() if comparisons is None else comparisons
    floor = (
        float(config.get("compare.threshold") or 0.1)
        if threshold is None
        else threshold
    )
    shown = len(entries) - (len(entries) if last is None else last)
    rows = []
    walls: list[float] = []
    # Each prefix's pace in the newest finished runs read that ran it (the
    # band its next pace is judged against): kept as it goes, so that a long
    # history is judged in one pass (a list of every run's paces, searched
    # for each run, took 95 s for 10,000 runs).
    paces: dict[str, deque[float]] = {}
    peaks: deque[float] = deque(maxlen=BAND_RUNS)  # of those finished runs
    previous: Entry | None = None  # the last finished run
    for i, entry in enumerate(entries):
        record = entry.record
        finished = record["status"] == "finished" and record["duration_s"] is not None
        # Runs further back than the bands look are not read at all.
        read = i >= shown - BAND_RUNS
        pace = entry.pace() if read and finished else {}
        # (An unfinished run before those shown is no band's: not read.)
        peak = entry.peak() if i >= shown or (read and finished) else None
        if i >= shown:
            verdict = ""
            if finished:
                # A run whose tables cannot be read (an archive's, pruned or
                # never written whole) is listed, unjudged.
                with contextlib.suppress(StoreError):
                    verdict = _wall_verdict(entry, previous, walls, floor, comparisons)
            changed: list[str] = []
            if previous is not None:
                changed = [
                    change_text(*change)
                    for change in differences(
                        previous.environment(), entry.environment()
                    )
                ]
            rows.append({
                **{c: record[c] for c in HISTORY_COLUMNS[:7]},
                "verdict": verdict or None,
                "changed": changed,
                "peak_memory": peak,
                "prefixes": _prefix_verdicts(pace, paces, floor),
                "memory_verdict": (
                    _memory_verdict(peak, list(peaks), floor) if finished else ""
                ) or None,
            })  # fmt: skip
        if finished:
            walls.append(float(record["duration_s"]))
            for prefix, seconds in pace.items():
                paces.setdefault(prefix, deque(maxlen=BAND_RUNS)).append(seconds)
            if peak is not None:
                peaks.append(peak)
            previous = entry
    return rows


def _prefix_verdicts(
    paces: dict[str, float], earlier: dict[str, deque[float]], floor: float
) -> dict[str, str]:
    """The prefixes whose time a task lies outside their own spread over the
    earlier runs (five or more that ran them): a prefix that is always noisy
    has a wide band, a steady one that doubles leaves its narrow one."""
    found = {}
    for prefix, pace in paces.items():
        band = noise.outside(list(earlier.get(prefix, ())), pace, floor)
        if band:
            found[prefix] = "regression" if band > 0 else "improvement"
    return found


def _wall_verdict(
    entry: Entry,
    previous: Entry | None,
    walls: list[float],
    floor: float,
    comparisons: Comparisons,
) -> str:
    """The wall time's verdict of ``entry`` in its history (see :func:`judge`)."""
    wall = float(entry.record["duration_s"])
    earlier = walls[-BAND_RUNS:]
    band = noise.outside(earlier, wall, floor)
    if band is not None:
        mark = {1: "regression", -1: "improvement"}.get(band, "")
        if not mark or previous is None:
            return mark
        # Judged against the band, said of the host where it explains it (its
        # load read only for a marked run: most are not).
        hosts = (
            host_load(previous.data(), float(previous.record["duration_s"])),
            host_load(entry.data(), wall),
        )
        ratio = wall / statistics.median(earlier)
        return verdicts.on_host(mark, "s", ratio, hosts, floor)
    if previous is None:
        return ""
    verdict = comparisons.wall(previous, entry, floor)
    return _against_the_last(verdict, wall, walls[-BAND_RUNS:-1], floor)


def _against_the_last(
    mark: str, value: float, before: list[float], floor: float
) -> str:
    """``mark`` of a figure judged against the previous run alone (too few
    runs for a band), of which ``before`` are the runs before that one. A
    run that is lower only than a high previous one, not than the runs
    before it, returned to where they were: no improvement of the job (the
    same eight naps, 0.6 s after an outlier of 2.3 s, were called one). Nor
    is a second run lower than the first, which alone cannot say whether it
    was the outlier: a job's first run on a fresh cluster pays for the
    workers' first imports (3.49 s, then 0.55-1.21 s for the same naps).
    Slowness has many causes, speed few: a higher run is still marked."""
    if mark == "improvement" and (not before or value >= min(before) * (1 - floor)):
        return ""
    return mark


def _memory_verdict(peak: float | None, earlier: list[float], floor: float) -> str:
    """The peak memory's verdict against the finished runs before (their
    peaks, ``earlier``): their spread where five or more are known, else
    the previous run's peak, with no other evidence (beyond
    ``verdicts.UNMEASURED``). Its own: a chart of peak memory marked a run
    whose wall time alone regressed."""
    if peak is None or not earlier:
        return ""
    band = noise.outside(earlier, peak, floor)
    if band is not None:
        return {1: "regression", -1: "improvement"}.get(band, "")
    mark = verdicts.verdict("peak memory", "bytes", earlier[-1], peak, floor, [])
    return _against_the_last(mark, peak, earlier[:-1], floor)

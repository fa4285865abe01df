"""Retention: which runs to let go, and removing them with everything that
belongs to no other run.

A run's telemetry is the slice of the store's sequence numbers it was recorded
in (``seq_start``..``seq_end``). Pruning deletes the runs chosen and every row
that lies in none of the kept runs' slices, up to the newest pruned run's end:
rows written after it may belong to a run still being recorded. A running run
is never pruned. ``dask-observe prune`` gives the space back to the operating
system (VACUUM, then the write-ahead log truncated); a recorder's pruning as
its run ends does so only once a quarter of the file is free (COMPACT_SHARE).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dask_observe import config
from dask_observe.units import parse_bytes, parse_seconds

if TYPE_CHECKING:
    import sqlite3

#: A recorder's pruning, as each of its runs ends, rewrites the file (VACUUM)
#: only once this share of it is free pages. VACUUM copies the whole store
#: under its write lock (0.65 s at 1,000 runs of ~90 KiB: a year of nightly
#: runs, at each run's end, with every recorder's writes waiting), while the
#: pages a pruned run frees are what the next runs' rows fill: the file stays
#: at its high-water mark, not above it.
COMPACT_SHARE = 0.25

#: The tables whose rows belong to runs by sequence number.
TELEMETRY_TABLES = ("logs", "tasks", "metrics", "events")
#: The tables whose rows belong to one run by its id.
RUN_TABLES = ("fine_metrics", "profiles", "verdicts", "task_figures", "published")


@dataclass(frozen=True)
class Policy:
    """What to keep: the newest ``keep_last`` runs, runs that ended within
    ``max_age_s``, and at most ``max_bytes`` of store (the oldest runs go
    first). A policy with nothing set keeps everything."""

    keep_last: int | None = None
    max_age_s: float | None = None
    max_bytes: float | None = None

    def __post_init__(self) -> None:
        if self.keep_last is not None and self.keep_last < 0:
            raise ValueError(f"keep the last {self.keep_last} runs? give 0 or more")
        for name in ("max_age_s", "max_bytes"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name.replace('_', ' ')} cannot be negative")

    @property
    def empty(self) -> bool:
        return (
            self.keep_last is None and self.max_age_s is None and self.max_bytes is None
        )

    @classmethod
    def from_config(cls) -> Policy:
        """``observe.retention``: keep-last, max-age (e.g. "30d"), max-size
        (e.g. "2GiB"); unset ones keep everything."""
        keep, age, size = (
            config.get(f"retention.{name}")
            for name in ("keep-last", "max-age", "max-size")
        )
        return cls(
            None if keep is None else int(keep),
            None if age is None else parse_seconds(age),
            None if size is None else parse_bytes(size),
        )


@dataclass(frozen=True)
class Pruned:
    """What a prune removed (or, with ``dry_run``, would remove)."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    rows: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    dry_run: bool = False


def file_bytes(path: os.PathLike[str] | str) -> int:
    """The store's size on disk, its write-ahead log included."""
    total = 0
    for suffix in ("", "-wal"):
        with contextlib.suppress(FileNotFoundError):
            total += os.path.getsize(f"{os.fspath(path)}{suffix}")
    return total


def _slice(run: dict[str, Any], top: int) -> tuple[int, int]:
    """A run's rows' sequence numbers, (first, last) inclusive; a run that
    never ended (running, interrupted) reaches ``top``."""
    end = run["seq_end"]
    return int(run["seq_start"] or 0) + 1, int(end) if end is not None else top


def _kept_slices(runs: Sequence[dict[str, Any]], top: int) -> list[tuple[int, int]]:
    """The kept runs' sequence slices, merged, each as (first, last) inclusive."""
    spans = sorted(_slice(r, top) for r in runs)
    merged: list[tuple[int, int]] = []
    for first, last in spans:
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def gaps(kept: Sequence[dict[str, Any]], upto: int, top: int) -> list[tuple[int, int]]:
    """The sequence ranges (inclusive) up to ``upto`` that no kept run covers."""
    found, at = [], 1
    for first, last in _kept_slices(kept, top):
        if first > upto:
            break
        if first > at:
            found.append((at, first - 1))
        at = max(at, last + 1)
    if at <= upto:
        found.append((at, upto))
    return found


def _rows_in(conn: sqlite3.Connection, ranges: Sequence[tuple[int, int]]) -> int:
    return sum(
        conn.execute(
            f"SELECT count(*) FROM {table} WHERE seq BETWEEN ? AND ?", r
        ).fetchone()[0]
        for table in TELEMETRY_TABLES
        for r in ranges
    )


def choose(
    conn: sqlite3.Connection,
    runs: Sequence[dict[str, Any]],
    policy: Policy,
    now: float,
    keep: Collection[int] = (),
) -> list[dict[str, Any]]:
    """The runs (newest first, as stored) that the policy lets go: never a
    running one, nor one in ``keep``."""
    ended = [r for r in runs if r["status"] != "running"]
    doomed: dict[int, dict[str, Any]] = {}
    if policy.keep_last is not None:  # the kept runs count among the last
        doomed.update((r["id"], r) for r in ended[policy.keep_last :])
    ended = [r for r in ended if r["id"] not in keep]
    doomed = {i: r for i, r in doomed.items() if i not in keep}
    if policy.max_age_s is not None:
        cutoff = now - policy.max_age_s
        doomed.update(
            (r["id"], r) for r in ended if (r["ended"] or r["started"]) < cutoff
        )
    if policy.max_bytes is not None:
        # What a run costs on disk is estimated as its rows' share of the pages
        # in use: the oldest go until the rest fits. None that began after a
        # run still running: that run holds every row since it began, and
        # letting them go would free nothing.
        sizes = {r["id"]: _rows_in(conn, spans) for r, spans in _owned(runs, ended)}
        per_row = _used_bytes(conn) / max(1, _rows_in(conn, [(1, 2**62)]))
        left = _used_bytes(conn) - per_row * sum(sizes[i] for i in doomed)
        held_from = min(
            (int(r["seq_start"] or 0) for r in runs if r["status"] == "running"),
            default=2**62,
        )
        for r in reversed(ended):
            if left <= policy.max_bytes or int(r["seq_start"] or 0) >= held_from:
                break
            if r["id"] not in doomed:
                doomed[r["id"]] = r
                left -= per_row * sizes[r["id"]]
    return [r for r in runs if r["id"] in doomed]


def _owned(
    runs: Sequence[dict[str, Any]], candidates: Sequence[dict[str, Any]]
) -> list[tuple[dict[str, Any], list[tuple[int, int]]]]:
    """Each candidate with the rows its pruning lets go, for the size
    estimate: its slice, and the rows before it that no earlier run's slice
    holds (those a new store copies before its first run, from the cluster's
    recent records: counted nowhere, the oldest runs all went and the store
    was still too large), less what a run that stays holds (one still
    running, or kept: a notebook recording into the same store began before
    it, and its slice reaches over the candidate's, whose rows then stay)."""
    ids = {r["id"] for r in candidates}
    staying = [r for r in runs if r["id"] not in ids]
    owned, covered = [], 0
    for run in sorted(runs, key=lambda r: int(r["seq_start"] or 0)):
        first, last = _slice(run, 2**62)
        if run["id"] in ids:
            first = min(first, covered + 1)
            free = gaps(staying, last, 2**62)
            owned.append((run, [(max(a, first), b) for a, b in free if b >= first]))
        covered = max(covered, last)
    return owned


def _last_row(run: dict[str, Any], runs: Sequence[dict[str, Any]]) -> int:
    """The last sequence number a pruned run may own: its end, or for a run
    that never ended (its recorder died), up to where the next run began."""
    if run["seq_end"] is not None:
        return int(run["seq_end"])
    start = int(run["seq_start"] or 0)
    later = [int(r["seq_start"] or 0) for r in runs if (r["seq_start"] or 0) > start]
    return min(later) if later else start


def _used_bytes(conn: sqlite3.Connection) -> int:
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int((pages - free) * size)


def prune(
    conn: sqlite3.Connection,
    path: os.PathLike[str] | str,
    runs: Sequence[dict[str, Any]],
    policy: Policy,
    *,
    dry_run: bool = False,
    keep: Collection[int] = (),
    now: float | None = None,
    compact: bool = True,
) -> Pruned:
    """Remove the runs the policy lets go (see the module's docstring), never
    those in ``keep``. ``runs`` are the store's runs, newest first; ``conn`` a
    writer's connection, outside any transaction. The file shrinks (VACUUM)
    with ``compact``, else only once COMPACT_SHARE of it is free."""
    before = file_bytes(path)
    now = time.time() if now is None else now
    doomed = choose(conn, runs, policy, now, keep)
    if not doomed:
        return Pruned([], 0, before, before, dry_run)
    gone = {r["id"] for r in doomed}
    kept = [r for r in runs if r["id"] not in gone]
    top = int(conn.execute("SELECT value FROM sequence").fetchone()[0])
    upto = max(_last_row(r, runs) for r in doomed)
    ranges = gaps(kept, upto, top)
    if dry_run:
        return Pruned(doomed, _rows_in(conn, ranges), before, before, True)
    conn.execute("BEGIN IMMEDIATE")
    try:
        rows = 0
        for table in TELEMETRY_TABLES:
            for r in ranges:
                rows += conn.execute(
                    f"DELETE FROM {table} WHERE seq BETWEEN ? AND ?", r
                ).rowcount
        ids = [(i,) for i in gone]
        for table in RUN_TABLES:
            conn.executemany(f"DELETE FROM {table} WHERE run_id = ?", ids)
        conn.executemany("DELETE FROM runs WHERE id = ?", ids)
        # A kept comparison judged a run against the earlier runs of its name
        # (their spread): with some gone, each is made again when read.
        conn.execute("DELETE FROM comparisons")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    if compact or _free_share(conn) >= COMPACT_SHARE:
        # Give the space back: VACUUM rewrites the file without the free pages
        # (into the write-ahead log first), the checkpoint then shrinks both.
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return Pruned(doomed, rows, before, file_bytes(path), False)


def _free_share(conn: sqlite3.Connection) -> float:
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return float(free) / pages if pages else 0.0

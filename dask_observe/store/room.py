"""Room kept on the store's disk for the ends of runs.

In write-ahead-log mode every committed transaction appends frames to the
log, and on a disk short of room nothing is checkpointed back: the commits
that take the last free bytes leave the next write nothing, a run's end too.
A run whose end could not be written stays "running", and is later called
"interrupted" (seen: 3 of 30 runs logging 4 MB into a 1.2 MB disk on a busy
host). So the writes that bring records in bulk (pulled batches, appended
records, fine metrics, profiles, task figures) stop short of
:data:`END_ROOM_BYTES`, and the one-statement writes that close a run may
use it.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

#: Bytes a bulk write leaves free on the store's disk: a run's end (one row)
#: and what its end thread keeps of it (flags, settings, figures).
END_ROOM_BYTES = 256 * 1024

#: Free bytes above which a bulk write is not weighed at all (it would not
#: come near the room kept, and weighing costs three pragmas).
ROOMY_BYTES = 64 * 1024 * 1024

#: Pages a transaction rewrites besides those it adds: the last leaf and the
#: interior pages of each table and index it appends to.
REWRITTEN_PAGES = 32

#: A log frame's header, beside each page it holds.
FRAME_HEADER = 24


class StoreFull(sqlite3.OperationalError):
    """A bulk write would leave less room than the ends of runs need."""


def free_bytes(path: Path) -> int | None:
    """Free bytes on the disk that holds ``path`` (None where unknown)."""
    try:
        return shutil.disk_usage(path.parent).free
    except OSError:
        return None


def pages_used(conn: sqlite3.Connection) -> int:
    """Pages the database holds data in, the transaction's own included
    (pages taken from the free list count, as those added at its end)."""
    (count,) = conn.execute("PRAGMA page_count").fetchone()
    (free,) = conn.execute("PRAGMA freelist_count").fetchone()
    return int(count) - int(free)


class Weigher:
    """Whether a bulk transaction may commit: opened as it begins, asked
    before its commit. Free of cost where the disk is roomy."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self._path = path
        free = free_bytes(path)
        self._before = (
            pages_used(conn) if free is not None and free < ROOMY_BYTES else None
        )

    def check(self) -> None:
        """Raise :class:`StoreFull` where committing would leave less than
        :data:`END_ROOM_BYTES` free (the caller rolls back)."""
        if self._before is None:
            return
        free = free_bytes(self._path)
        if free is None:
            return
        (page_size,) = self._conn.execute("PRAGMA page_size").fetchone()
        added = max(0, pages_used(self._conn) - self._before)
        need = (added + REWRITTEN_PAGES) * (int(page_size) + FRAME_HEADER)
        if free - need < END_ROOM_BYTES:
            raise StoreFull(
                f"database or disk is full ({_kib(free)} free on its disk; "
                f"{_kib(END_ROOM_BYTES)} are kept for the ends of runs)"
            )


def _kib(n: int) -> str:
    return f"{n / 1024:,.0f} KiB"

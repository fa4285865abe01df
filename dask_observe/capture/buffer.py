"""Bounded buffers that count what they drop."""

from __future__ import annotations

import threading
from collections import Counter, deque
from itertools import islice
from typing import Any


def untracked(record: Any) -> Any:
    """``record`` as a plain tuple: what the buffers hold.

    CPython's collector stops tracking a plain tuple of strings and numbers at
    the first collection it survives, never a named tuple. Held as named
    tuples, a full ring was 200,000 objects more for every full collection of
    the scheduler's process to walk, and each record held long enough counted
    towards the next one: 120,000 lines logged by a task of a threads-only
    cluster, recorded, took 7 full collections of the client's process (0.78
    s) against 4 (0.42 s) held plain (benchmarks/README.md, "Garbage a record
    leaves"). Readers unpack them, or read them back with ``wire.typed``.
    """
    return record if type(record) is tuple else tuple(record)


class DropCountingBuffer:
    """A FIFO of at most ``maxlen`` records; when full, the oldest go and are counted.

    Appends come from any thread (log records are emitted by task threads); the lock
    keeps the drop count exact. It is reentrant, and each method is whole at every
    point where Python code can run inside it: a garbage collection there runs
    finalizers, and one that logs (distributed's "Closing dangling stream") appends
    to this buffer on the same thread. With a plain lock that append waited for
    itself, and the scheduler's event loop with it, for good (Python 3.12 on
    collects after calls into C too).
    """

    def __init__(self, maxlen: int) -> None:
        if maxlen < 1:
            raise ValueError(f"a buffer needs room for a record, not {maxlen}")
        # Unbounded, trimmed by hand: a deque's own bound drops silently, so a
        # reentrant append between a fullness check and the append went uncounted.
        self._records: deque[Any] = deque()
        self._maxlen = maxlen
        self._lock = threading.RLock()
        self.dropped = 0

    def append(self, record: Any) -> None:
        record = untracked(record)
        with self._lock:
            self._records.append(record)
            # Each record dropped is counted by whoever drops it: an append
            # reentering here trims (and counts) for both.
            while len(self._records) > self._maxlen:
                self._records.popleft()
                self.dropped += 1

    def prepend(self, records: list[Any]) -> None:
        """Put older records before those held; what does not fit is the oldest
        of them, dropped and counted."""
        with self._lock:
            room = max(0, self._maxlen - len(self._records))
            keep = (
                [untracked(r) for r in records[len(records) - room :]] if room else []
            )
            self.dropped += len(records) - len(keep)
            self._records.extendleft(reversed(keep))

    def drain(self, limit: int) -> tuple[list[Any], int]:
        """Take up to ``limit`` of the oldest records and the drops since last time."""
        with self._lock:
            taken: list[Any] = []
            while len(taken) < limit and self._records:
                taken.append(self._records.popleft())
            dropped, self.dropped = self.dropped, 0
        return taken, dropped

    def count_lost(self, n: int) -> None:
        """Count ``n`` records lost after they left the buffer (a failed send)."""
        with self._lock:
            self.dropped += n

    def __len__(self) -> int:
        return len(self._records)


class SequencedBuffer:
    """A bounded log of records numbered 1, 2, 3, ... for readers that pull by cursor.

    Records are tuples whose first item is their kind, held as plain tuples
    (see :func:`untracked`); their numbers are not stored but counted from
    :attr:`last` (a ``(number, record)`` pair was one more tuple a record for
    the collector to track). When the buffer is full the oldest
    goes; if no reader had taken it yet it is counted in :attr:`lost`, by kind.
    Used on the scheduler's event loop only.
    """

    def __init__(self, maxlen: int) -> None:
        self._records: deque[Any] = deque(maxlen=maxlen)
        self.last = 0
        #: The highest number handed to a reader.
        self.read_upto = 0
        #: Records dropped unread, by kind, since the buffer was made.
        self.lost: Counter[str] = Counter()

    def append(self, record: Any) -> None:
        if len(self._records) == self._records.maxlen and self.first > self.read_upto:
            self.lost[self._records[0][0]] += 1
        self.last += 1
        self._records.append(untracked(record))

    def __len__(self) -> int:
        return len(self._records)

    @property
    def first(self) -> int:
        """The oldest number still held (``last + 1`` when empty)."""
        return self.last - len(self._records) + 1

    def since(self, oldest: float) -> int:
        """The cursor before the first record of time ``oldest`` or later
        (records are tuples of kind and time first), walked from the newest:
        O(records that recent)."""
        cursor = self.last
        for record in reversed(self._records):
            if record[1] < oldest:
                break
            cursor -= 1
        return cursor

    def release_read(self) -> None:
        """Let go of the records a reader has taken (their numbers go on). A
        closed scheduler's: distributed may keep a closed scheduler, and so
        its plugins, alive for as long as the process."""
        for _ in range(min(len(self._records), self.read_upto - self.first + 1)):
            self._records.popleft()

    def held(self) -> list[Any]:
        """The records held, oldest first."""
        return list(self._records)

    def after(self, cursor: int, limit: int) -> list[tuple[int, Any]]:
        """Up to ``limit`` ``(number, record)`` pairs numbered above ``cursor``,
        oldest first."""
        if not self._records or cursor >= self.last:
            return []
        length = len(self._records)
        first = self.first
        start = max(0, cursor - first + 1)
        end = min(length, start + limit)
        if start > length // 2:
            # The usual reader wants the newest few: islice walks a deque from its
            # left end, through the whole ring (measured 0.29 ms of the scheduler's
            # loop per pull at 100,000 records); walk from the right instead.
            taken = list(islice(reversed(self._records), length - start))
            taken.reverse()
            del taken[end - start :]
        else:
            taken = list(islice(self._records, start, end))
        if taken:
            self.read_upto = max(self.read_upto, first + start + len(taken) - 1)
        numbers = range(first + start, first + start + len(taken))
        return list(zip(numbers, taken, strict=True))

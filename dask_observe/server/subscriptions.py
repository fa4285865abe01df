"""What one subscription of the stream (:mod:`.stream`) reads: its
validated message, its window of the store, the rows after its cursor within
the batch's bounds, its flags (judged again while the run goes, the judgement
once it ended) and its progress. No socket here: the handler sends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Hashable
from dataclasses import asdict
from typing import Any

from dask_observe.api import Run
from dask_observe.capture.text import MAX_KEY_BYTES
from dask_observe.diagnose import stored_judged_flags
from dask_observe.server.payloads import FlagPayload, flag_payload
from dask_observe.store import BaseStore, queries

#: Rows of one kind read at once; a backlog drains over several reads.
BATCH_ROWS = 2_000
#: Characters of log text in one batch (a byte each in ASCII; JSON escapes
#: others): lines can be 64 KiB each, and a frame of 2,000 of them was 400 MB
#: (the pending cap could not stop one frame).
BATCH_TEXT = 1024 * 1024
#: How often the flags of a running run are judged again.
FLAGS_INTERVAL_S = 2.0
#: How long after its end a run's judgement is waited for before its flags are
#: taken as final without one (the process that judges it may have died).
VERDICT_WAIT_S = 60.0

ROW_KINDS = ("logs", "metrics", "events")
KINDS = (*ROW_KINDS, "flags", "progress")


class SubscriptionError(ValueError):
    """A subscribe message that cannot be followed; told to the client."""


#: Rows of a kind looked through, newest first, for where a view of about a
#: cluster's newest N rows starts (``after`` -N): a cluster that wrote
#: nothing while 100,000 rows of others came shows none. (A reading thread
#: finds a cluster's 20,000th newest line of 400,000 in 9 ms; 17-30 ms to
#: find that one cluster has none among the newest.)
TAIL_SCAN_ROWS = 100_000

#: Kinds a subscribe message may list (duplicates included) before it is refused.
MAX_KINDS = 20
#: Characters of a worker or cluster name in a subscription.
MAX_NAME = 500
#: Subscriptions one socket may hold at once (the panel holds three).
MAX_SUBSCRIPTIONS = 4
#: Characters of a subscription's id.
MAX_ID = 64


def _whole(value: Any) -> bool:
    """A JSON integer SQLite can hold (not a bool, which JSON also has)."""
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and -(2**62) < value < 2**62
    )


#: A log filter's ``fields`` holds at most this many names.
MAX_FIELDS = 8

_FILTERS = (
    "contains", "regex", "level", "worker", "source", "own", "task", "prefix",
    "fields",
)  # fmt: skip


def checked_filters(raw: Any) -> dict[str, Any]:
    """Log filters (a subscription's, or a page's query) checked: known
    names, each of its type and bounded. Raises SubscriptionError."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or set(raw) - set(_FILTERS):
        raise SubscriptionError(f"unknown filters; use {', '.join(_FILTERS)}")
    for name in ("contains", "worker", "source", "task", "prefix"):
        value = raw.get(name)
        if value is not None and not isinstance(value, str):
            raise SubscriptionError(f"filter {name!r} must be text")
    bounds = (("worker", MAX_NAME), ("prefix", MAX_NAME), ("task", MAX_KEY_BYTES))
    for name, most in bounds:
        if len(raw.get(name) or "") > most:
            raise SubscriptionError(
                f"filter {name!r} may have at most {most} characters"
            )
    for name in ("regex", "own"):
        if not isinstance(raw.get(name, False), bool):
            raise SubscriptionError(f"filter {name!r} must be true or false")
    if raw.get("level") is not None:
        if not isinstance(raw["level"], str | int) or isinstance(raw["level"], bool):
            raise SubscriptionError("filter 'level' must be a level name or number")
        queries.level_number(raw["level"])
    if raw.get("contains"):
        queries.log_filters(raw["contains"], bool(raw.get("regex")), None)
    if raw.get("fields") is not None:
        _check_fields(raw["fields"])
    return dict(raw)


def _check_fields(fields: Any) -> None:
    """A ``fields`` filter: an object of at most MAX_FIELDS names, each a
    bounded text, to a text, number or boolean (what ``extra`` holds)."""
    if not isinstance(fields, dict) or len(fields) > MAX_FIELDS:
        raise SubscriptionError(
            f"filter 'fields' must be an object of at most {MAX_FIELDS} names"
        )
    for name, value in fields.items():
        scalar = isinstance(value, str | int | float) and value == value
        if len(name) > MAX_NAME or not scalar:
            raise SubscriptionError(
                "filter 'fields' maps names to a text, a number or a boolean"
            )
        if isinstance(value, str) and len(value) > MAX_NAME:
            raise SubscriptionError(
                f"filter 'fields' values may have at most {MAX_NAME} characters"
            )


def within_text(rows: list[dict[str, Any]], budget: int = BATCH_TEXT) -> int:
    """How many of ``rows`` (log lines, in order) fit in ``budget`` characters
    of message text: at least one, so that a batch always moves on."""
    used = 0
    for i, row in enumerate(rows):
        used += len(row["message"])
        if used > budget and i:
            return i
    return len(rows)


def tail_start(
    store: BaseStore, kinds: list[str], cluster: str, rows: int, floor: int, upto: int
) -> tuple[int, bool]:
    """Where a view of about the newest ``rows`` rows of each of ``kinds`` of
    ``cluster`` in the slice (floor, upto] of the sequence starts (its
    cursor), and whether rows before it were left out. Counted in the
    cluster's own rows of each kind: its lines are pushed out neither by its
    tasks' and metrics' rows (a run whose lines came before its last 2,000
    rows of tasks and metrics replayed none of them) nor by another
    cluster's. Each kind's
    newest TAIL_SCAN_ROWS rows are looked through, no more: past them, rows
    are said to be left out, though none there may be the cluster's."""
    looked = [kind for kind in kinds if kind in ROW_KINDS]
    if not looked:  # flags, progress: no rows
        return max(floor, upto - rows), upto - rows > floor
    start, left = upto, False
    for kind in looked:
        # Rows above the kind's (TAIL_SCAN_ROWS + 1)-th newest: those read.
        beyond = store.rows(queries.newest(kind), [floor, upto, TAIL_SCAN_ROWS])
        bound = int(beyond[0]["seq"]) if beyond else floor
        found = store.rows(
            queries.newest(kind, of_cluster=True), [bound, upto, cluster, rows]
        )
        if found or beyond:  # the row before the view's first: left out
            start = min(start, int(found[0]["seq"]) if found else bound)
            left = True
        else:
            start = floor
    return start, left


class Subscription:
    """What one client follows, read from the store whenever it changed
    (through whichever read-only connection the reading thread has: none is
    kept)."""

    def __init__(self, store: BaseStore, message: dict[str, Any]) -> None:
        kinds = message.get("kinds") or list(ROW_KINDS)
        if not isinstance(kinds, list) or len(kinds) > MAX_KINDS:
            raise SubscriptionError(f"'kinds' must be a list of some of {KINDS}")
        unknown = [k for k in kinds if k not in KINDS]
        if unknown:
            raise SubscriptionError(
                f"unknown kinds {unknown[:5]!r}; use some of {KINDS}"
            )
        self.kinds: list[str] = list(dict.fromkeys(kinds))  # each once
        after = message.get("after", 0)
        if not _whole(after):
            raise SubscriptionError(
                "'after' must be a sequence number, or -N for about the last N rows"
            )
        # -N: a view opening on a long-lived cluster starts near its end (a
        # run's: near the run's end), counted in its own rows: below.
        self.cursor = after if after >= 0 else max(0, store.last_seq() + after)
        #: Whether earlier rows were left out (``after`` -N).
        self.skipped = False
        since = message.get("since")
        oldest: float | None = None
        since_cursor = 0
        if since is not None:
            # A time window instead (a metrics chart of the last minutes): start
            # at the first row of the kinds asked that is at most `since` s old.
            if (
                not isinstance(since, int | float)
                or isinstance(since, bool)
                or not 0 <= since < 10**9
            ):
                raise SubscriptionError("'since' must be a number of seconds")
            oldest = time.time() - since
            since_cursor = self._first_seq_since(store, oldest) - 1
            self.cursor = max(self.cursor, since_cursor)
        self.filters = checked_filters(message.get("filters"))
        #: A pattern is tried row by row in Python: its reads go to a process.
        self.patterned = bool(
            self.filters.get("regex") and self.filters.get("contains")
        )
        self.run_id: int | None = None
        run, cluster = message.get("run"), message.get("cluster")
        if run is not None:
            if not (
                _whole(run)
                or run == "last"
                or (isinstance(run, str) and run.isdigit() and len(run) <= 18)
            ):
                raise SubscriptionError("'run' must be a run id or \"last\"")
            record = store.run_record(run)
            self.run_id = int(record["id"])
            self.window = queries.Window(
                record["cluster"], record["started"], None, record["seq_start"], None
            )
            if after < 0:
                # About the run's last N rows: a replay of a 100,000-line
                # run drew every line (1.2-1.6 s of the page's main thread).
                end = record["seq_end"]
                tail, self.skipped = tail_start(
                    store, self.kinds, record["cluster"], -after,
                    int(record["seq_start"] or 0),
                    store.last_seq() if end is None else int(end),
                )  # fmt: skip
                self.cursor = max(tail, since_cursor)
        elif cluster is not None:
            if not isinstance(cluster, str) or len(cluster) > MAX_NAME:
                raise SubscriptionError("'cluster' must be a cluster id")
            found = store.telemetry.cluster(cluster)
            if found is None:
                raise SubscriptionError("no such cluster")
            self.window = queries.Window(found["address"])
            if after < 0:
                tail, self.skipped = tail_start(
                    store, self.kinds, found["address"], -after, 0, store.last_seq()
                )
                self.cursor = max(tail, since_cursor)
        else:
            raise SubscriptionError("subscribe to a 'run' or a 'cluster'")
        if oldest is not None:
            # Rows are not written in time order (a worker's samples arrive
            # after the scheduler's of the same moment): past the first row
            # of the window, older ones follow. The window's time says which.
            self.window = self.window._replace(
                since=max(self.window.since or oldest, oldest)
            )
        self._flags: list[FlagPayload] | None = None
        self._flags_at = 0.0
        #: The run's flags sent can no longer change: no more judging.
        self._flags_final = False
        self._progress: dict[str, list[int]] = {}
        self._progress_cursor = self.window.seq_after or 0

    @property
    def reads(self) -> Hashable:
        """What the rows it reads depend on, but for the cursor: two
        subscriptions equal in this read the same rows from one cursor."""
        return (
            tuple(self.kinds),
            self.window,
            json.dumps(self.filters, sort_keys=True),
            self.run_id,
        )

    def _first_seq_since(self, store: BaseStore, oldest: float) -> int:
        firsts = [
            store.rows(queries.first_seq_since(kind), [oldest])[0]["seq"]
            for kind in self.kinds
            if kind in ROW_KINDS
        ]
        found = [f for f in firsts if f is not None]
        return min(found) if found else store.last_seq() + 1

    def describe(self, store: BaseStore) -> dict[str, Any]:
        return {
            "type": "subscribed",
            "run": self.run_id,
            "kinds": self.kinds,
            "after": self.cursor,
            "last": store.last_seq(),
            # A run followed from near its end: its earlier rows were left.
            "tail": self.skipped,
        }

    def _run_window(self, store: BaseStore) -> queries.Window:
        """The window, closed once the run has ended."""
        if self.run_id is None:
            return self.window
        record = store.run_record(self.run_id)
        return self.window._replace(seq_upto=record["seq_end"])

    def rows_after(
        self, store: BaseStore, cursor: int, upto: int | None = None
    ) -> tuple[int, dict[str, list[dict[str, Any]]], bool]:
        """The next batch: rows of each kind above ``cursor`` (and at most
        ``upto``), all up to one bound, so that the bound is an exact resume
        point; and whether rows beyond it wait (a backlog: read on at once).
        Returned, not kept: a pattern's reads run in another process."""
        top = store.last_seq() if upto is None else min(upto, store.last_seq())
        window = self._run_window(store)
        upto = top if window.seq_upto is None else min(top, window.seq_upto)
        window = window._replace(seq_upto=upto)
        found: dict[str, list[dict[str, Any]]] = {}
        bound = upto
        for kind in self.kinds:
            if kind not in ROW_KINDS:
                continue
            sql, params = queries.stream_query(
                kind, window, cursor, BATCH_ROWS,
                logs=self.filters if kind == "logs" else None,
            )  # fmt: skip
            rows = [dict(r) for r in store.rows(sql, params)]
            if len(rows) == BATCH_ROWS:  # more to come: the batch ends here
                bound = min(bound, rows[-1]["seq"])
            if kind == "logs":
                kept = within_text(rows)
                if kept < len(rows):  # the rest next: the batch ends there
                    bound = min(bound, rows[kept - 1]["seq"])
            found[kind] = rows
        batch = {k: [r for r in rows if r["seq"] <= bound] for k, rows in found.items()}
        for row in batch.get("logs", ()):
            row["level"] = queries.level_names([row["level"]])[0]
        for row in batch.get("events", ()):
            row["data"] = json.loads(row["data"])
        backlog = bound < upto
        return max(bound, cursor), {k: v for k, v in batch.items() if v}, backlog

    def flags_due(self, now: float) -> bool:
        """Whether the run's flags are to be judged again (at most every
        FLAGS_INTERVAL_S)."""
        if self.run_id is None or "flags" not in self.kinds or self._flags_final:
            return False
        return self._flags is None or now - self._flags_at >= FLAGS_INTERVAL_S

    def flags_changed(self, now: float, flags: list[FlagPayload], final: bool) -> bool:
        """Note a judgement (``final``: the run's last); whether it differs
        from the last one sent."""
        self._flags_at = now
        self._flags_final = final
        if flags == self._flags:
            return False
        self._flags = flags
        return True

    @property
    def follows_progress(self) -> bool:
        return self.run_id is not None and "progress" in self.kinds

    def progress(self, store: BaseStore) -> dict[str, list[int]] | None:
        """Tasks done and erred by prefix in the run, when they changed."""
        if self.run_id is None or not self.follows_progress:
            return None
        record = store.run_record(self.run_id)
        window = self.window._replace(seq_upto=record["seq_end"])
        sql, params, _ = queries.task_query(
            window._replace(seq_after=self._progress_cursor),
            record["span_id"],
            ("seq", "prefix", "status"),  # the numbers: each task counted once
        )
        rows = store.rows(sql, params)
        if not rows:
            return None
        for row in rows:
            counts = self._progress.setdefault(row["prefix"], [0, 0])
            counts[0 if row["status"] == "memory" else 1] += 1
        self._progress_cursor = max(r["seq"] for r in rows)
        return {k: list(v) for k, v in self._progress.items()}


def read_rows(store: BaseStore, message: dict[str, Any], upto: int) -> dict[str, Any]:
    """One batch of what ``message`` (a subscribe message) follows, numbered
    above its ``after`` and at most ``upto``, as the stream sends it: the rows
    a ``gap`` skipped. ``last`` is where the next batch starts."""
    sub = Subscription(store, message)
    last, batch, _ = sub.rows_after(store, sub.cursor, upto)
    return {"last": last, **batch}


def judge_flags(store: BaseStore, run_id: int) -> list[FlagPayload]:
    """A run's flags as the stream sends them (in a reading process: pandas):
    a running run's judged from what is recorded so far, a finished run's
    flags as judged at its end."""
    return [flag_payload(asdict(f)) for f in Run.of(store, run_id).flag_list()]


def final_flags(store: BaseStore, run_id: int) -> tuple[bool, list[FlagPayload] | None]:
    """Whether a run's flags can no longer change, and its verdict if this
    version stored one: JSON read as it is, no judging (and no pandas), so
    that a finished run's flags are read once, not judged again every poll."""
    record = store.run_record(run_id)
    if record["status"] == "running":
        return False, None
    stored = stored_judged_flags(store, run_id)
    if stored is not None:
        return True, [flag_payload(f) for f in stored]
    # No judgement yet: its run's end is still judging it (the settings it is
    # judged with come first), or never will (its process died).
    ended = record["ended"] if record["ended"] is not None else record["started"]
    return (
        record["status"] == "interrupted" or time.time() - ended > VERDICT_WAIT_S,
        None,
    )

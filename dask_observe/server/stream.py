"""``dask-observe/api/stream``: one websocket that replays, then follows, the store.

The client sends ``{"type": "subscribe", "run": ID | "cluster": ID, "kinds":
[...], "after": SEQ, "filters": {...}}``; ``kinds`` among logs, metrics, events,
flags, progress; ``after`` may be ``-N`` to start about N rows before the end;
``since`` (seconds) starts at the rows of the last so many seconds instead.
The server answers ``{"type": "subscribed", ...}`` and then, as rows are
committed, ``{"type": "batch", "last": SEQ, "logs": [...], ...}``: every row
numbered up to ``last`` that matches is in that batch or an earlier one, so a
client that reconnects with ``after = last`` misses nothing and gets nothing twice.

A client that does not keep up is not buffered without bound: once more than
MAX_PENDING_BYTES of its messages are unsent, the server skips ahead and says so
with ``{"type": "gap", "after": A, "upto": B}``; the rows in between can be read
over REST (``runs/<id>/logs?after=A&upto=B``).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from tornado import websocket

from dask_observe.store import RunNotFound, Store, StoreError, telemetry

#: How often a subscription looks for new rows (latency is at most about this).
POLL_INTERVAL_S = 0.2
#: Rows of one kind read per poll; a backlog drains over several polls.
BATCH_ROWS = 2_000
#: Unsent bytes a client may have before the server skips ahead (a "gap").
MAX_PENDING_BYTES = 4 * 2**20
#: How often the flags of a running run are judged again.
FLAGS_INTERVAL_S = 2.0

ROW_KINDS = ("logs", "metrics", "events")
KINDS = (*ROW_KINDS, "flags", "progress")


class SubscriptionError(ValueError):
    """A subscribe message that cannot be followed; told to the client."""


class Subscription:
    """What one client follows, read from the store on each poll."""

    def __init__(self, store: Store, message: dict[str, Any]) -> None:
        self.store = store
        kinds = message.get("kinds") or list(ROW_KINDS)
        unknown = [k for k in kinds if k not in KINDS]
        if unknown or not isinstance(kinds, list):
            raise SubscriptionError(f"unknown kinds {unknown}; use some of {KINDS}")
        self.kinds: list[str] = kinds
        after = message.get("after", 0)
        if not isinstance(after, int) or isinstance(after, bool):
            raise SubscriptionError(
                "'after' must be a sequence number, or -N for about the last N rows"
            )
        # -N: a view opening on a long-lived cluster starts near the end.
        self.cursor = after if after >= 0 else max(0, store.last_seq() + after)
        since = message.get("since")
        if since is not None:
            # A time window instead (a metrics chart of the last minutes): start
            # at the first row of the kinds asked that is at most `since` s old.
            if not isinstance(since, int | float) or isinstance(since, bool):
                raise SubscriptionError("'since' must be a number of seconds")
            self.cursor = max(self.cursor, self._first_seq_since(since) - 1)
        filters = message.get("filters") or {}
        if not isinstance(filters, dict) or set(filters) - {
            "contains", "regex", "level", "worker", "source",
        }:  # fmt: skip
            raise SubscriptionError(
                "unknown filters; use contains, regex, level, worker, source"
            )
        if filters.get("contains") and filters.get("regex"):
            telemetry.log_filters(filters["contains"], True, None)  # says if it is bad
        if filters.get("level") is not None:
            telemetry.level_number(filters["level"])
        self.filters = filters
        self.run_id: int | None = None
        if message.get("run") is not None:
            record = store.run_record(message["run"])
            self.run_id = int(record["id"])
            self.window = telemetry.Window(
                record["cluster"], record["started"], None, record["seq_start"], None
            )
        elif message.get("cluster") is not None:
            cluster = store.cluster(str(message["cluster"]))
            if cluster is None:
                raise SubscriptionError("no such cluster")
            self.window = telemetry.Window(cluster["address"])
        else:
            raise SubscriptionError("subscribe to a 'run' or a 'cluster'")
        self._flags: list[dict[str, Any]] | None = None
        self._flags_at = 0.0
        self._progress: dict[str, list[int]] = {}
        self._progress_cursor = self.window.seq_after or 0

    def _first_seq_since(self, seconds: float) -> int:
        oldest = time.time() - seconds
        firsts = [
            self.store.rows(f"SELECT min(seq) AS seq FROM {kind} WHERE time >= ?",
                            [oldest])[0]["seq"]
            for kind in self.kinds if kind in ROW_KINDS
        ]  # fmt: skip
        found = [f for f in firsts if f is not None]
        return min(found) if found else self.store.last_seq() + 1

    def describe(self) -> dict[str, Any]:
        return {
            "type": "subscribed",
            "run": self.run_id,
            "kinds": self.kinds,
            "after": self.cursor,
            "last": self.store.last_seq(),
        }

    def _run_window(self) -> telemetry.Window:
        """The window, closed once the run has ended."""
        if self.run_id is None:
            return self.window
        record = self.store.run_record(self.run_id)
        return self.window._replace(seq_upto=record["seq_end"])

    def rows_after(self, cursor: int) -> tuple[int, dict[str, list[dict[str, Any]]]]:
        """The next batch: rows of each kind above ``cursor``, all up to one
        bound, so that the bound is an exact resume point."""
        top = self.store.last_seq()
        window = self._run_window()
        upto = top if window.seq_upto is None else min(top, window.seq_upto)
        window = window._replace(seq_upto=upto)
        found: dict[str, list[dict[str, Any]]] = {}
        bound = upto
        for kind in self.kinds:
            if kind not in ROW_KINDS:
                continue
            sql, params = telemetry.stream_query(
                kind, window, cursor, BATCH_ROWS,
                logs=self.filters if kind == "logs" else None,
            )  # fmt: skip
            rows = [dict(r) for r in self.store.rows(sql, params)]
            if len(rows) == BATCH_ROWS:  # more to come: the batch ends here
                bound = min(bound, rows[-1]["seq"])
            found[kind] = rows
        batch = {k: [r for r in rows if r["seq"] <= bound] for k, rows in found.items()}
        for row in batch.get("logs", ()):
            row["level"] = telemetry.level_names([row["level"]])[0]
        for row in batch.get("events", ()):
            row["data"] = json.loads(row["data"])
        return max(bound, cursor), {k: v for k, v in batch.items() if v}

    def flags(self, now: float) -> list[dict[str, Any]] | None:
        """The run's flags when they changed since last sent (judged at most
        every FLAGS_INTERVAL_S), else None."""
        if self.run_id is None or "flags" not in self.kinds:
            return None
        if self._flags is not None and now - self._flags_at < FLAGS_INTERVAL_S:
            return None
        from dask_observe.flags import flag_list

        self._flags_at = now
        flags = [
            {
                "time": f.time, "kind": f.kind, "severity": f.severity,
                "worker": f.worker, "message": f.message, "advice": f.advice,
                "evidence": f.evidence,
            }
            for f in flag_list(self.store.run(self.run_id))
        ]  # fmt: skip
        if flags == self._flags:
            return None
        self._flags = flags
        return flags

    def progress(self) -> dict[str, list[int]] | None:
        """Tasks done and erred by prefix in the run, when they changed."""
        if self.run_id is None or "progress" not in self.kinds:
            return None
        record = self.store.run_record(self.run_id)
        window = self.window._replace(seq_upto=record["seq_end"])
        sql, params, _ = telemetry.task_query(
            window._replace(seq_after=self._progress_cursor), record["span_id"]
        )
        rows = self.store.rows(
            sql.replace("SELECT ", "SELECT seq, ", 1), params
        )  # the numbers, to count each task once
        if not rows:
            return None
        for row in rows:
            counts = self._progress.setdefault(row["prefix"], [0, 0])
            counts[0 if row["status"] == "memory" else 1] += 1
        self._progress_cursor = max(r["seq"] for r in rows)
        return {k: list(v) for k, v in self._progress.items()}


class StreamHandler(WebSocketMixin, JupyterHandler, websocket.WebSocketHandler):
    """The websocket: authenticated and authorized before the upgrade."""

    auth_resource = "dask-observe"

    def initialize(self, store_path: Path) -> None:
        self.store_path = store_path
        self._task: asyncio.Task[None] | None = None
        self._pending = 0

    @ws_authenticated
    @authorized
    async def get(self, *args: Any, **kwargs: Any) -> None:
        await super().get(*args, **kwargs)

    def on_message(self, message: str | bytes) -> None:
        try:
            parsed = json.loads(message)
            if not isinstance(parsed, dict) or parsed.get("type") != "subscribe":
                raise SubscriptionError("send {'type': 'subscribe', ...}")
        except (ValueError, SubscriptionError) as e:
            self._send({"type": "error", "message": str(e)})
            return
        if self._task is not None:
            self._task.cancel()
        self._task = asyncio.ensure_future(self._follow(parsed))

    def on_close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def _send(self, message: dict[str, Any]) -> None:
        text = json.dumps(message, default=str)
        self._pending += len(text)
        try:
            future = self.write_message(text)
        except websocket.WebSocketClosedError:
            return
        size = len(text)
        future.add_done_callback(lambda _: self._sent(size))

    def _sent(self, size: int) -> None:
        self._pending -= size

    async def _follow(self, message: dict[str, Any]) -> None:
        try:
            store = await asyncio.to_thread(Store, self.store_path, create=False)
        except StoreError as e:
            self._send({"type": "error", "message": str(e)})
            return
        try:
            try:
                sub = await asyncio.to_thread(Subscription, store, message)
            except (SubscriptionError, RunNotFound, ValueError) as e:
                self._send({"type": "error", "message": str(e)})
                return
            self._send(sub.describe())
            await self._poll(sub)
        finally:
            store.close()

    async def _poll(self, sub: Subscription) -> None:
        loop = asyncio.get_running_loop()
        while self.ws_connection is not None:
            if self._pending > MAX_PENDING_BYTES:
                # Too slow: skip to the newest row and let REST fill the gap.
                upto = await asyncio.to_thread(sub.store.last_seq)
                if upto > sub.cursor:
                    self._send({"type": "gap", "after": sub.cursor, "upto": upto})
                    sub.cursor = upto
            else:
                last, batch = await asyncio.to_thread(sub.rows_after, sub.cursor)
                if batch:
                    self._send({"type": "batch", "last": last, **batch})
                sub.cursor = last
                flags = await asyncio.to_thread(sub.flags, loop.time())
                if flags is not None:
                    self._send({"type": "flags", "flags": flags})
                progress = await asyncio.to_thread(sub.progress)
                if progress is not None:
                    self._send({"type": "progress", "prefixes": progress})
                if batch and any(len(v) == BATCH_ROWS for v in batch.values()):
                    continue  # a backlog: read on at once
            await asyncio.sleep(POLL_INTERVAL_S)

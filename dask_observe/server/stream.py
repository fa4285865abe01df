"""``dask-observe/api/stream``: one websocket that replays, then follows, the store.

The client sends ``{"type": "subscribe", "run": ID | "cluster": ID, "kinds":
[...], "after": SEQ, "filters": {...}}``; ``kinds`` among logs, metrics, events,
flags, progress; ``after`` may be ``-N`` to start at about the newest N rows
of each kind of the run or cluster followed (its own rows; ``subscribed``
then says ``tail`` when earlier ones were left out);
``since`` (seconds) starts at the rows of the last so many seconds instead.
The server answers ``{"type": "subscribed", ...}`` and then, as rows are
committed, ``{"type": "batch", "last": SEQ, "logs": [...], ...}``: every row
numbered up to ``last`` that matches is in that batch or an earlier one, so a
client that reconnects with ``after = last`` misses nothing and gets nothing twice.
A batch with ``"more": true`` filled its size: the next is read at once (a
replay under way; it may be empty, then not sent), and a client may wait for
it before it draws.

A client that does not keep up is not buffered without bound: once more than
``observe.server.stream-max-pending`` bytes of its messages are unsent, the
server skips ahead and says so with ``{"type": "gap", "after": A, "upto": B}``;
the rows in between are read over REST as the stream would have sent them
(``stream/rows?subscribe=<the subscribe message, after A>&upto=B``, a batch at a
time), or for a run's lines ``runs/<id>/logs?after=A&upto=B``. A subscription
that fails is told with ``{"type": "error", "message": ...}``.

``flags`` come as ``{"type": "flags", "flags": [...]}`` whenever they change: a
running run's judged again every FLAGS_INTERVAL_S, a finished run's once, as the
flags judged at its end.

One socket carries up to MAX_SUBSCRIPTIONS subscriptions at once (a panel's
logs, metrics and flags): each subscribe message may carry an ``id`` (text), and
every message of that subscription carries it back; a subscribe with an ``id``
in use replaces that subscription, ``{"type": "unsubscribe", "id": ...}`` ends
it. Without an ``id`` a subscription is ``""``: one a socket, as before.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from tornado import web, websocket

from dask_observe import config
from dask_observe.server.manager import StoreManager, TooBusy
from dask_observe.server.subscriptions import (
    MAX_ID,
    MAX_SUBSCRIPTIONS,
    Subscription,
    SubscriptionError,
    final_flags,
    judge_flags,
)
from dask_observe.store import BaseStore, StoreError
from dask_observe.units import parse_bytes

#: The longest a subscription waits without a change seen: the flags of a
#: running run change with time alone (a task hung), and a commit the watch
#: could miss (``watch``) is read this late at worst.
IDLE_POLL_S = 1.0


def _tagged(message: dict[str, Any], ident: str) -> dict[str, Any]:
    """A subscription's message with its id (none for the default one)."""
    return {**message, "id": ident} if ident else message


class StreamHandler(WebSocketMixin, JupyterHandler, websocket.WebSocketHandler):
    """The websocket: authenticated and authorized before the upgrade; at most
    CAPS["stream"] open at once."""

    auth_resource = "dask-observe"

    def initialize(self, manager: StoreManager) -> None:
        self.manager = manager
        #: Unsent bytes this client may have before the server skips ahead.
        self.max_pending = int(parse_bytes(config.get("server.stream-max-pending")))
        #: The subscriptions followed, by their ids.
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._pending = 0
        self._slot = False

    @ws_authenticated
    @authorized
    async def get(self, *args: Any, **kwargs: Any) -> None:
        try:
            self.manager.acquire("stream")
        except TooBusy as e:
            raise web.HTTPError(429, str(e)) from e
        self._slot = True
        try:
            await super().get(*args, **kwargs)
        finally:
            if self.ws_connection is None:  # refused or failed: no on_close
                self._release()

    def _release(self) -> None:
        if self._slot:
            self.manager.release("stream")
            self._slot = False

    def on_message(self, message: str | bytes) -> None:
        ident: Any = ""
        try:
            parsed = json.loads(message)
            if not isinstance(parsed, dict) or parsed.get("type") not in (
                "subscribe",
                "unsubscribe",
            ):
                raise SubscriptionError("send {'type': 'subscribe', ...}")
            ident = parsed.get("id", "")
            if not isinstance(ident, str) or len(ident) > MAX_ID:
                ident = ""
                raise SubscriptionError(
                    f"'id' must be text of at most {MAX_ID} characters"
                )
            self._end(ident)
            if parsed["type"] == "unsubscribe":
                return
            if len(self._tasks) >= MAX_SUBSCRIPTIONS:
                raise SubscriptionError(
                    f"at most {MAX_SUBSCRIPTIONS} subscriptions a socket; "
                    "unsubscribe one first"
                )
        except RecursionError:  # JSON nested past Python's stack
            self._send({"type": "error", "message": "the message is nested too deeply"})
            return
        except (ValueError, SubscriptionError) as e:
            self._send(_tagged({"type": "error", "message": str(e)}, ident))
            return
        task = asyncio.ensure_future(self._follow(parsed, ident))
        self._tasks[ident] = task
        task.add_done_callback(lambda done: self._forget(ident, done))

    def _end(self, ident: str) -> None:
        task = self._tasks.pop(ident, None)
        if task is not None:
            task.cancel()

    def _forget(self, ident: str, task: asyncio.Task[None]) -> None:
        """A subscription that ended by itself (an error) frees its id."""
        if self._tasks.get(ident) is task:
            del self._tasks[ident]

    def on_close(self) -> None:
        for ident in list(self._tasks):
            self._end(ident)
        self._release()

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

    async def _follow(self, message: dict[str, Any], ident: str) -> None:
        """Follow one subscription until the socket closes or another replaces
        it; whatever stops it is told to the client (never a silent end)."""

        def send(said: dict[str, Any]) -> None:
            self._send(_tagged(said, ident))

        try:
            sub = await self.manager.read(Subscription, message)
            send(await self.manager.read(sub.describe))
            await self._poll(sub, send)
        except asyncio.CancelledError:
            raise
        except (SubscriptionError, StoreError, ValueError) as e:
            send({"type": "error", "message": str(e)})
        except Exception as e:  # a bug of ours: said, and logged with its trace
            self.log.exception("dask-observe: a stream subscription failed")
            send(
                {
                    "type": "error",
                    "message": f"the subscription failed: {type(e).__name__}",
                }
            )

    async def _rows(
        self, sub: Subscription
    ) -> tuple[int, dict[str, list[dict[str, Any]]], bool]:
        """The subscription's next batch. A pattern's read holds one of the
        pattern slots REST reads take too (CAPS["pattern"]): eight pattern
        streams on a big run made a one-run REST read take 15-20 s."""
        if not sub.patterned:
            # Subscriptions that follow the same rows from the same cursor
            # (panels on one cluster, woken by one commit) share one read.
            return await self.manager.read_shared(
                (sub.reads, sub.cursor), sub.rows_after, sub.cursor
            )
        with self.manager.slot("pattern"):
            return await self.manager.read(sub.rows_after, sub.cursor, isolated=True)

    async def _poll(
        self, sub: Subscription, send: Callable[[dict[str, Any]], None]
    ) -> None:
        loop = asyncio.get_running_loop()
        read, watch = self.manager.read, self.manager.watch
        while self.ws_connection is not None:
            seen = watch.version  # before the read: a commit during it wakes us
            if self._pending > self.max_pending:
                # Too slow: skip to the newest row and let REST fill the gap.
                upto = await read(BaseStore.last_seq)
                if upto > sub.cursor:
                    send({"type": "gap", "after": sub.cursor, "upto": upto})
                    sub.cursor = upto
            else:
                try:
                    last, batch, backlog = await self._rows(sub)
                except TooBusy:  # the pattern slots are taken: a bit later
                    await asyncio.sleep(IDLE_POLL_S)
                    continue
                if batch:
                    more = {"more": True} if backlog else {}
                    send({"type": "batch", "last": last, **batch, **more})
                sub.cursor = last
                now = loop.time()
                if sub.flags_due(now):
                    assert sub.run_id is not None
                    final, flags = await read(final_flags, sub.run_id)
                    if flags is None:  # judged once for all its followers
                        flags = await self.manager.read_shared(
                            ("flags", sub.run_id), judge_flags, sub.run_id,
                            isolated=True,
                        )  # fmt: skip
                    if sub.flags_changed(now, flags, final):
                        send({"type": "flags", "flags": flags})
                # (Asked only where followed: each read opens the store.)
                progress = await read(sub.progress) if sub.follows_progress else None
                if progress is not None:
                    send({"type": "progress", "prefixes": progress})
                if batch and backlog:
                    continue  # a backlog: read on at once
            await watch.wait(seen, IDLE_POLL_S)  # until a commit, or a while

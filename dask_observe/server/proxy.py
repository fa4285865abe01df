"""``dask-observe/dashboard/<cluster-id>/<path>``: a cluster's dashboard through
the Jupyter server, over HTTP and websockets (the bokeh pages need both).

Not an open proxy: the cluster id must name a cluster that a recorder registered
in the store, the upstream is that cluster's recorded dashboard address and
nothing else, and a path that could steer the request elsewhere (``@``, ``..``,
a scheme, a backslash, an absolute path) is refused. Refusals never repeat the
request's text.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from tornado import httpclient, web, websocket

from dask_observe.store import Store, StoreError

#: Headers that describe one connection, not the message: never forwarded.
_HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
        "TE", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length",
        "Content-Encoding", "Host", "Cookie", "Authorization",
    )
)  # fmt: skip
#: Response headers a dashboard may not set on the Jupyter server's origin.
_DROPPED_RESPONSE = frozenset({"set-cookie"})

_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9._~!$&'()*+,;=:-]*$")


def upstream_path(path: str) -> str | None:
    """``path`` as a safe relative path on the dashboard, or None to refuse it."""
    if "\\" in path or "@" in path or "://" in path or path.startswith("/"):
        return None
    segments = path.split("/")
    if any(s in (".", "..") for s in segments):
        return None
    if not all(_SAFE_SEGMENT.match(s) for s in segments):
        return None
    return "/".join(quote(s, safe=_QUOTE_SAFE) for s in segments)


_QUOTE_SAFE = "._~!$&'()*+,;=:-"


def _lookup(store_path: Path, cluster_id: str) -> str | None:
    if not store_path.exists():
        return None
    with Store(store_path, create=False) as store:
        cluster = store.cluster(cluster_id)
    return None if cluster is None else cluster["dashboard"]


class DashboardProxyHandler(WebSocketMixin, JupyterHandler, websocket.WebSocketHandler):
    """Forwards GET requests and websocket connections to a registered dashboard."""

    auth_resource = "dask-observe"

    def initialize(self, store_path: Path) -> None:
        self.store_path = store_path
        self._upstream: websocket.WebSocketClientConnection | None = None
        self._pump: asyncio.Task[None] | None = None

    async def _target(self, cluster_id: str, path: str) -> str:
        """The upstream URL, or a refusal that names nothing of the request."""
        relative = upstream_path(path)
        if relative is None:
            raise web.HTTPError(403, "this path is not allowed through the proxy")
        try:
            base = await asyncio.to_thread(_lookup, self.store_path, cluster_id)
        except StoreError:
            base = None
        if not base:
            raise web.HTTPError(404, "no registered dashboard with this id")
        target = f"{base.rstrip('/')}/{relative}"
        # Belt and braces: the host of the result is the registered one.
        if urlsplit(target).netloc != urlsplit(base).netloc:
            raise web.HTTPError(403, "this path is not allowed through the proxy")
        query = self.request.query
        return f"{target}?{query}" if query else target

    @ws_authenticated
    @authorized
    async def get(self, cluster_id: str, path: str) -> None:
        target = await self._target(cluster_id, path)
        if self.request.headers.get("Upgrade", "").lower() == "websocket":
            self._ws_target = "ws" + target.removeprefix("http")
            await websocket.WebSocketHandler.get(self, cluster_id, path)
            return
        await self._forward(target)

    async def _forward(self, target: str) -> None:
        headers = {
            k: v
            for k, v in self.request.headers.get_all()
            if k.lower() not in _HOP_BY_HOP
        }
        try:
            response = await httpclient.AsyncHTTPClient().fetch(
                target,
                headers=headers,
                follow_redirects=False,
                raise_error=False,
                request_timeout=30,
            )
        except OSError:
            raise web.HTTPError(502, "the dashboard did not answer") from None
        self.set_status(response.code, response.reason)
        seen: set[str] = set()
        for name, value in response.headers.get_all():
            lowered = name.lower()
            if lowered in _HOP_BY_HOP or lowered in _DROPPED_RESPONSE:
                continue
            if lowered == "location" and "://" in value:
                continue  # an absolute redirect would leave the proxy
            # The first of a name replaces the Jupyter server's default; repeats add.
            (self.add_header if lowered in seen else self.set_header)(name, value)
            seen.add(lowered)
        if response.body:
            self.write(response.body)
        await self.finish()

    # -- websockets --------------------------------------------------------------
    def select_subprotocol(self, subprotocols: list[str]) -> str | None:
        # Bokeh sends ["bokeh", <token>] and expects "bokeh" back.
        self._subprotocols = subprotocols
        return subprotocols[0] if subprotocols else None

    async def open(self, *args: Any, **kwargs: Any) -> None:
        request = httpclient.HTTPRequest(self._ws_target, request_timeout=30)
        try:
            self._upstream = await websocket.websocket_connect(
                request, subprotocols=getattr(self, "_subprotocols", None)
            )
        except (OSError, httpclient.HTTPClientError):
            self.close(1011, "the dashboard did not answer")
            return
        self._pump = asyncio.ensure_future(self._relay_upstream())

    async def _relay_upstream(self) -> None:
        assert self._upstream is not None
        while True:
            message = await self._upstream.read_message()
            if message is None:
                self.close()
                return
            try:
                await self.write_message(message, binary=isinstance(message, bytes))
            except websocket.WebSocketClosedError:
                return

    async def on_message(self, message: str | bytes) -> None:
        if self._upstream is not None:
            await self._upstream.write_message(
                message, binary=isinstance(message, bytes)
            )

    def on_close(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
        if self._pump is not None:
            self._pump.cancel()

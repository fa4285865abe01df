"""``dask-observe/dashboard/<cluster-id>/<path>``: a cluster's dashboard through
the Jupyter server, over HTTP and websockets (the bokeh pages need both).

Not an open proxy: the cluster id must name a cluster that a recorder registered
in the store, the upstream is that cluster's recorded dashboard address and
nothing else, and a path that could steer the request elsewhere (``@``, ``..``,
a scheme, a backslash, an absolute path) is refused. Refusals never repeat the
request's text.

Nothing of the Jupyter server's credentials travels upstream, and nothing the
dashboard answers may act on the Jupyter server's origin: requests carry an
allowlist of headers and a query without ``token`` or ``_xsrf``; answers pass
an allowlist of headers back (never a CSP, CORS, cookie, cache-clearing,
refresh or HSTS header: Jupyter's own policy stays), and only redirects within
the dashboard, rewritten under the proxy's prefix.

Ours, not jupyter-server-proxy: that one forwards every request header but a
few (Cookie, and Authorization only from 4.4) and every response header, and
passes absolute redirects; restricting it to registered dashboards would take
its ``host_allowlist`` hook plus most of what is here. Bodies stream through
in chunks, as there.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from jupyter_server.utils import url_path_join
from tornado import httpclient, httputil, web, websocket

from dask_observe.server.manager import StoreManager
from dask_observe.store import Store, StoreError

#: Request headers forwarded upstream (all else stays here: cookies, tokens,
#: Referer, X-XSRFToken, whatever a Connection header names).
_REQUEST_HEADERS = frozenset(
    {"accept", "accept-language", "cache-control", "if-modified-since",
     "if-none-match", "range", "user-agent"}
)  # fmt: skip
#: Response headers passed back to the browser (a dashboard's pages, scripts,
#: images and JSON need no other).
_RESPONSE_HEADERS = frozenset(
    {"content-type", "cache-control", "etag", "last-modified", "expires",
     "content-language", "content-disposition", "content-range",
     "accept-ranges", "vary", "date"}
)  # fmt: skip
#: Query parameters that are the Jupyter server's credentials, not the dashboard's.
_CREDENTIAL_PARAMS = frozenset({"token", "_xsrf"})

_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9._~!$&'()*+,;=:-]*$")
_QUOTE_SAFE = "._~!$&'()*+,;=:-"


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


def upstream_query(query: str) -> str:
    """The request's query without the Jupyter server's credentials."""
    kept = [
        (k, v)
        for k, v in parse_qsl(query, keep_blank_values=True)
        if k not in _CREDENTIAL_PARAMS
    ]
    return urlencode(kept)


def redirect_target(location: str, prefix: str) -> str | None:
    """Where a dashboard's redirect leads, under the proxy's ``prefix``; None
    for one that would leave the dashboard (``//host``, ``https:host``,
    ``/\\host``, any scheme) or climb out of it (``..``)."""
    parts = urlsplit(location)
    if parts.scheme or parts.netloc or "\\" in location or location.startswith("//"):
        return None
    path = parts.path
    if any(s == ".." for s in path.split("/")):
        return None
    if path.startswith("/"):  # the dashboard's root is the proxy's prefix
        path = url_path_join(prefix, path.lstrip("/"))
    return path + (f"?{parts.query}" if parts.query else "")


def _lookup(store: Store, cluster_id: str) -> str | None:
    cluster = store.cluster(cluster_id)
    return None if cluster is None else cluster["dashboard"]


class DashboardProxyHandler(WebSocketMixin, JupyterHandler, websocket.WebSocketHandler):
    """Forwards GET requests and websocket connections to a registered dashboard."""

    auth_resource = "dask-observe"

    def initialize(self, manager: StoreManager) -> None:
        self.manager = manager
        self._upstream: websocket.WebSocketClientConnection | None = None
        self._pump: asyncio.Task[None] | None = None

    async def _target(self, cluster_id: str, path: str) -> str:
        """The upstream URL, or a refusal that names nothing of the request."""
        relative = upstream_path(path)
        if relative is None:
            raise web.HTTPError(403, "this path is not allowed through the proxy")
        try:
            base = await self.manager.read(_lookup, cluster_id)
        except StoreError:
            base = None
        if not base:
            raise web.HTTPError(404, "no registered dashboard with this id")
        target = f"{base.rstrip('/')}/{relative}"
        # Belt and braces: the host of the result is the registered one.
        if urlsplit(target).netloc != urlsplit(base).netloc:
            raise web.HTTPError(403, "this path is not allowed through the proxy")
        query = upstream_query(self.request.query)
        return f"{target}?{query}" if query else target

    @ws_authenticated
    @authorized
    async def get(self, cluster_id: str, path: str) -> None:
        target = await self._target(cluster_id, path)
        if self.request.headers.get("Upgrade", "").lower() == "websocket":
            self._ws_target = "ws" + target.removeprefix("http")
            await websocket.WebSocketHandler.get(self, cluster_id, path)
            return
        self._prefix = url_path_join(
            self.base_url, "dask-observe", "dashboard", cluster_id
        )
        await self._forward(target)

    async def _forward(self, target: str) -> None:
        headers = {
            k: v
            for k, v in self.request.headers.get_all()
            if k.lower() in _REQUEST_HEADERS
        }
        self._head: httputil.ResponseStartLine | None = None
        self._upstream_headers = httputil.HTTPHeaders()
        self._started = False  # status and headers set from the upstream's
        self._refused = False  # a redirect out of the dashboard: nothing sent
        try:
            response = await httpclient.AsyncHTTPClient().fetch(
                target,
                headers=headers,
                follow_redirects=False,
                raise_error=False,
                request_timeout=30,
                header_callback=self._header_line,
                streaming_callback=self._chunk,
            )
        except (OSError, httpclient.HTTPClientError):
            raise web.HTTPError(502, "the dashboard did not answer") from None
        if not self._started:  # no body: the head goes out now
            self._start(response.code, response.reason)
        if self._refused:  # nothing of it was sent
            raise web.HTTPError(502, "the dashboard redirected outside itself")
        await self.finish()

    def _header_line(self, line: str) -> None:
        """The upstream answer's head, a line at a time (for streaming)."""
        if line.startswith("HTTP/"):
            self._head = httputil.parse_response_start_line(line.strip())
            self._upstream_headers = httputil.HTTPHeaders()
        elif line.strip():
            self._upstream_headers.parse_line(line)

    def _start(self, code: int, reason: str | None) -> None:
        """Status and the allowed headers, once, before the first chunk."""
        self._started = True
        self.set_status(code, reason)
        seen: set[str] = set()
        for name, value in self._upstream_headers.get_all():
            lowered = name.lower()
            if lowered == "location":
                moved = redirect_target(value, self._prefix)
                if moved is None:
                    self._refused = True
                    continue
                value = moved
            elif lowered not in _RESPONSE_HEADERS:
                continue
            # The first of a name replaces the Jupyter server's default (its
            # Content-Type); repeats add.
            (self.add_header if lowered in seen else self.set_header)(name, value)
            seen.add(lowered)

    def _chunk(self, data: bytes) -> None:
        if self._refused:
            return
        if not self._started:
            assert self._head is not None
            self._start(self._head.code, self._head.reason)
            if self._refused:
                return
        self.write(data)
        self.flush()

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

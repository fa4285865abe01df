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

A dashboard's page runs sandboxed (a ``sandbox`` policy without
``allow-same-origin``): an origin of its own, so its scripts can neither read
Jupyter's cookies nor call its API as the user, even when what answers at a
registered address is not the dashboard it was. A sandboxed page sends no
cookie, so its scripts, styles and websocket reach the proxy by a capability
instead: an authenticated request for ``<cluster-id>/<path>`` is redirected to
``<cluster-id>/~<capability>/<path>``, and the capability (a keyed hash of the
cluster id and an expiry, under a key that lives only in this server process)
opens that one cluster's dashboard and nothing else. Only clusters a recorder
reported within ``CLUSTER_ALIVE_S`` are proxied (a dead cluster's port may be
anybody's now), and nothing of a dashboard is cached (``no-store``).

Ours, not jupyter-server-proxy: that one forwards every request header but a
few (Cookie, and Authorization only from 4.4) and every response header, and
passes absolute redirects; restricting it to registered dashboards would take
its ``host_allowlist`` hook plus most of what is here. Bodies stream through
in chunks, as there, and no faster than the browser takes them: the next chunk
is read from the dashboard once the last has left for the browser, so a slow
download holds a chunk in the Jupyter server, not the whole body (it held ~92
MB of one, unbounded, before).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Awaitable
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from jupyter_server.auth.decorator import (
    allow_unauthenticated,
    authorized,
    ws_authenticated,
)
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from jupyter_server.utils import url_path_join
from tornado import httpclient, httputil, web, websocket
from tornado.simple_httpclient import SimpleAsyncHTTPClient

from dask_observe.server.manager import StoreManager
from dask_observe.server.pages import ErrorPages
from dask_observe.store import BaseStore, StoreError
from dask_observe.store.clusters import CLUSTER_ALIVE_S

#: Request headers forwarded upstream (all else stays here: cookies, tokens,
#: Referer, X-XSRFToken, whatever a Connection header names).
_REQUEST_HEADERS = frozenset(
    {"accept", "accept-language", "cache-control", "if-modified-since",
     "if-none-match", "range", "user-agent"}
)  # fmt: skip
#: Response headers passed back to the browser (a dashboard's pages, scripts,
#: images and JSON need no other).
_RESPONSE_HEADERS = frozenset(
    {"content-type", "etag", "last-modified", "content-language",
     "content-disposition", "content-range", "accept-ranges", "vary", "date"}
)  # fmt: skip
#: Query parameters that are the Jupyter server's credentials, not the dashboard's.
_CREDENTIAL_PARAMS = frozenset({"token", "_xsrf"})

#: The dashboard's pages run in a sandbox: an origin of their own (no
#: allow-same-origin), so their scripts cannot read Jupyter's cookies nor call
#: its API as the user.
SANDBOX = "sandbox allow-scripts allow-forms allow-popups allow-downloads"

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


def redirect_target(location: str, prefix: str, base_path: str = "") -> str | None:
    """Where a dashboard's redirect leads, under the proxy's ``prefix``; None
    for one that would leave the dashboard (``//host``, ``https:host``,
    ``/\\host``, any scheme) or climb out of it (``..``). ``base_path``: the
    path the dashboard is served under (a dask-gateway cluster's route,
    ``/clusters/<name>``), which an absolute redirect starts with."""
    parts = urlsplit(location)
    if parts.scheme or parts.netloc or "\\" in location or location.startswith("//"):
        return None
    path = parts.path
    # Checked as the browser will read it: "%2e%2e" is "..", and "%2f" a slash.
    decoded = unquote(path)
    if "\\" in decoded or any(s in (".", "..") for s in decoded.split("/")):
        return None
    if base_path and (path == base_path or path.startswith(base_path + "/")):
        path = path[len(base_path) :] or "/"
    if path.startswith("/"):  # the dashboard's root is the proxy's prefix
        path = url_path_join(prefix, path.lstrip("/"))
    return path + (f"?{parts.query}" if parts.query else "")


def _lookup(store: BaseStore, cluster_id: str) -> str | None:
    """The dashboard of a cluster a recorder reported lately, or None."""
    cluster = store.telemetry.cluster(cluster_id)
    if cluster is None or time.time() - cluster["last_seen"] >= CLUSTER_ALIVE_S:
        return None
    dashboard: str | None = cluster["dashboard"]
    return dashboard


class Capabilities:
    """Keys to one cluster's dashboard for its sandboxed pages, which send no
    cookie: ``~<expiry>.<mac>``, valid until the expiry, in this server
    process only (its key is made at start and never leaves it)."""

    PATTERN = r"~[0-9a-f]{1,12}\.[A-Za-z0-9_-]{32}"

    def __init__(self, lifetime_s: float = 12 * 3600) -> None:
        self.lifetime_s = lifetime_s
        self._key = secrets.token_bytes(32)

    def _mac(self, cluster_id: str, expiry: int) -> str:
        digest = hmac.new(
            self._key, f"{cluster_id}:{expiry}".encode(), hashlib.sha256
        ).digest()
        return base64.urlsafe_b64encode(digest[:24]).decode()

    def mint(self, cluster_id: str) -> str:
        expiry = int(time.time() + self.lifetime_s)
        return f"~{expiry:x}.{self._mac(cluster_id, expiry)}"

    def opens(self, capability: str, cluster_id: str) -> bool:
        try:
            expiry_hex, mac = capability.removeprefix("~").split(".")
            expiry = int(expiry_hex, 16)
        except ValueError:
            return False
        fresh = expiry > time.time()
        return fresh and hmac.compare_digest(mac, self._mac(cluster_id, expiry))


class DashboardProxyHandler(
    ErrorPages, WebSocketMixin, JupyterHandler, websocket.WebSocketHandler
):
    """Forwards GET requests and websocket connections to a registered dashboard."""

    auth_resource = "dask-observe"
    #: What a dashboard tab restored after its cluster went away says.
    not_found = (
        "The cluster went away (no recorder has seen it lately), or it was "
        "removed from the store: its dashboard went with it. Close this tab: "
        "the panel's Clusters section lists the live ones."
    )

    def initialize(self, manager: StoreManager, capabilities: Capabilities) -> None:
        self.manager = manager
        self.capabilities = capabilities
        #: Where the dashboard's root is served (its redirects go under it).
        self._prefix = ""
        self._base_path = ""
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
        self._base_path = urlsplit(base).path.rstrip("/")
        # Belt and braces: the host of the result is the registered one.
        if urlsplit(target).netloc != urlsplit(base).netloc:
            raise web.HTTPError(403, "this path is not allowed through the proxy")
        query = upstream_query(self.request.query)
        return f"{target}?{query}" if query else target

    @ws_authenticated
    @authorized
    async def get(self, cluster_id: str, path: str) -> None:
        target = await self._target(cluster_id, path)
        if self._is_websocket():
            await self._relay(target, cluster_id, path)
            return
        # Pages load under a capability: the sandboxed page sends no cookie.
        capability = self.capabilities.mint(cluster_id)
        moved = url_path_join(
            self._root(cluster_id), capability, upstream_path(path) or ""
        )
        query = upstream_query(self.request.query)
        self.redirect(f"{moved}?{query}" if query else moved)

    def _root(self, cluster_id: str) -> str:
        return url_path_join(self.base_url, "dask-observe", "dashboard", cluster_id)

    def _is_websocket(self) -> bool:
        return self.request.headers.get("Upgrade", "").lower() == "websocket"

    async def _relay(self, target: str, *args: str) -> None:
        self._ws_target = "ws" + target.removeprefix("http")
        await websocket.WebSocketHandler.get(self, *args)

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
            # The simple client by name: only it waits on the streaming
            # callback's awaitable (curl's does not), whatever is configured.
            response = await SimpleAsyncHTTPClient().fetch(
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
        # Beside Jupyter's own policy (both hold): the page is sandboxed.
        self.add_header("Content-Security-Policy", SANDBOX)
        self.set_header("Cache-Control", "no-store")
        seen: set[str] = set()
        for name, value in self._upstream_headers.get_all():
            lowered = name.lower()
            if lowered == "location":
                moved = redirect_target(value, self._prefix, self._base_path)
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

    def _chunk(self, data: bytes) -> Awaitable[None] | None:
        """Send a chunk on; the client reads the next once this one is sent."""
        if self._refused:
            return None
        if not self._started:
            assert self._head is not None
            self._start(self._head.code, self._head.reason)
            if self._refused:
                return None
        self.write(data)
        return self.flush()

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


class DashboardCapabilityHandler(DashboardProxyHandler):
    """``<cluster-id>/~<capability>/<path>``: what a sandboxed dashboard page
    asks for (its scripts, styles, data and websocket), authenticated by the
    capability in its path (see :class:`Capabilities`) rather than by a cookie
    it cannot send; it opens that cluster's dashboard and nothing else."""

    @allow_unauthenticated
    async def get(self, cluster_id: str, capability: str, path: str) -> None:  # type: ignore[override]
        if not self.capabilities.opens(capability, cluster_id):
            # Expired (or from a server since restarted): the page reloads
            # through the authenticated route, which makes a new one.
            raise web.HTTPError(403, "this dashboard link has expired; reopen it")
        target = await self._target(cluster_id, path)
        if self._is_websocket():
            await self._relay(target, cluster_id, capability, path)
            return
        self._prefix = url_path_join(self._root(cluster_id), capability)
        await self._forward(target)

    def check_origin(self, origin: str | None = None) -> bool:
        # A sandboxed page's origin is opaque: its websocket says "null". The
        # capability, which only the page has, stands for it.
        return origin == "null" or super().check_origin(origin)

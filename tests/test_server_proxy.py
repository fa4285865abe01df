"""The dashboard proxy in a real Jupyter server, to a real LocalCluster's bokeh
dashboard: its pages and their websocket work, and nothing else is reachable."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from distributed import Client, LocalCluster
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

import dask_observe

from .gateway import GatewayServer, gateway_server


@pytest.fixture
def cluster_id(client: Client, store_path: Path) -> str:
    with dask_observe.record("registers the cluster", client=client):
        client.submit(abs, -1).result()
    (cluster,) = dask_observe.open_store().telemetry.clusters()
    return str(cluster["id"])


async def through_capability(
    http_server_client: Any, first: Any, headers: dict[str, str] | None = None
) -> Any:
    """Where an authenticated request for a dashboard page leads: its redirect
    to the page's capability URL, fetched with ``headers`` only (none: the
    capability alone must open it, as for a sandboxed page that sends no
    cookie). Anything but that redirect is returned as it is."""
    location = first.headers.get("Location", "")
    if first.code != 302 or "/~" not in location:
        return first
    return await http_server_client.fetch(
        location, headers=headers or {}, follow_redirects=False, raise_error=False
    )


@pytest.fixture
def get(
    http_server_client: Any, jp_base_url: str, jp_auth_header: dict[str, str]
) -> Any:
    """GET a raw path under the server (no escaping: the test controls it), as
    a browser does: authenticated, then by the page's capability alone.
    (pytest-jupyter's client cannot follow redirects itself.)"""

    async def fetch(path: str) -> Any:
        first = await http_server_client.fetch(
            jp_base_url + path, headers=jp_auth_header, raise_error=False,
            follow_redirects=False,
        )  # fmt: skip
        return await through_capability(http_server_client, first)

    return fetch


async def test_the_status_page_and_its_bokeh_websocket_work_through_the_proxy(
    cluster_id: str, get: Any, jp_http_port: int, jp_base_url: str,
    jp_auth_header: dict[str, str],
) -> None:  # fmt: skip
    await assert_status_page_works(
        get, cluster_id, f"ws://localhost:{jp_http_port}{jp_base_url}", jp_auth_header
    )


async def assert_status_page_works(
    get: Any, cluster_id: str, root: str, headers: dict[str, str]
) -> None:
    """The cluster's status page answers through the proxy, and its session
    token opens the bokeh websocket through the proxy too (``root``: the
    server's websocket URL)."""
    page = await get(f"dask-observe/dashboard/{cluster_id}/status")
    assert page.code == 200, page.body[:500]
    html = page.body.decode()
    assert "bokeh" in html.lower()
    token = re.search(r'"token":\s*"([^"]+)"', html)
    assert token, "no bokeh session token in the page"
    url = f"{root}dask-observe/dashboard/{cluster_id}/status/ws"
    ws = await websocket_connect(
        HTTPRequest(url, headers=headers), subprotocols=["bokeh", token[1]]
    )
    message = await ws.read_message()
    assert isinstance(message, str) and json.loads(message)["msgtype"] == "ACK"
    ws.close()


async def test_a_threads_only_clusters_dashboard_answers_through_the_proxy(
    store_path: Path, get: Any
) -> None:
    # processes=False: the scheduler's address is inproc://, its dashboard
    # listens on every interface; the address registered must still reach it.
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as lc,
        Client(lc) as client,
    ):
        with dask_observe.record("threads only", client=client):
            client.submit(abs, -1).result()
        (cluster,) = dask_observe.open_store().telemetry.clusters()
        assert cluster["address"].startswith("inproc://")
        page = await get(f"dask-observe/dashboard/{cluster['id']}/status")
        assert page.code == 200
        assert b"bokeh" in page.body.lower()


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("{id}/%40evil.example/status", 403),
        ("{id}/..%2F..%2Fapi%2Fcontents", 403),
        ("{id}/status/..%2F..%2F..%2Fetc%2Fpasswd", 403),
        ("{id}/http%3A%2F%2Fevil.example%2F", 403),
        ("{id}/%5C%5Cevil.example", 403),
        ("000000000000/status", 404),
        ("<script>alert(1)</script>/status", 404),
    ],
)
async def test_paths_that_would_steer_the_proxy_elsewhere_are_refused(
    cluster_id: str, get: Any, path: str, code: int
) -> None:
    response = await get("dask-observe/dashboard/" + path.format(id=cluster_id))
    assert response.code == code
    body = response.body.decode()
    assert "evil" not in body and "<script>" not in body and "passwd" not in body


#: The size of the fake dashboard's ``huge`` answer, and its chunks.
HUGE, CHUNK = 96 * 2**20, 2**16


class Upstream:
    """A fake dashboard on localhost: records what reaches it, answers with
    hostile headers, redirects where a test says, and streams a large body."""

    def __init__(self) -> None:
        self.seen: list[tuple[dict[str, str], str]] = []
        self.redirect = "/status"
        #: Bytes of ``huge`` the fake dashboard has handed to its socket.
        self.sent = 0

    def app(self) -> Any:
        from tornado import web

        upstream = self

        class Page(web.RequestHandler):
            async def get(self, path: str) -> None:
                upstream.seen.append((dict(self.request.headers), self.request.query))
                if path == "huge":  # as fast as whoever reads it takes it
                    self.set_header("Content-Length", str(HUGE))
                    for i in range(HUGE // CHUNK):
                        self.write(bytes([65 + i % 26]) * CHUNK)
                        await self.flush()
                        upstream.sent += CHUNK
                    return
                if path == "moved":
                    self.redirect(upstream.redirect)
                    return
                self.set_header("Content-Security-Policy", "default-src *")
                self.set_header("Access-Control-Allow-Origin", "*")
                self.set_header("Access-Control-Allow-Credentials", "true")
                self.set_header("Clear-Site-Data", '"*"')
                self.set_header("Refresh", "0; url=https://evil.example/")
                self.set_header("Strict-Transport-Security", "max-age=31536000")
                self.set_header("Set-Cookie", "_xsrf=planted; Path=/")
                self.set_header("Content-Type", "text/plain")
                self.set_header("ETag", '"v1"')
                if path == "big":
                    for i in range(80):
                        self.write(bytes([65 + i % 26]) * 65536)
                else:
                    self.write("dashboard says hi")

        return web.Application([(r"/(.*)", Page)])


@pytest.fixture
def upstream(store_path: Path, jp_asyncio_loop: Any) -> Any:
    """The fake dashboard, registered in the store as a cluster's."""
    from tornado.httpserver import HTTPServer
    from tornado.netutil import bind_sockets

    fake = Upstream()
    sockets = bind_sockets(0, "127.0.0.1")

    async def serve() -> HTTPServer:  # on the test's loop
        server = HTTPServer(fake.app())
        server.add_sockets(sockets)
        return server

    server = jp_asyncio_loop.run_until_complete(serve())
    port = sockets[0].getsockname()[1]
    with dask_observe.open_store() as store:
        fake.id = store.telemetry.register_cluster(  # type: ignore[attr-defined]
            "tcp://10.1.1.1:8786", f"http://127.0.0.1:{port}"
        )
    yield fake
    server.stop()


async def test_no_jupyter_credential_reaches_the_dashboard(
    upstream: Any, http_server_client: Any, jp_base_url: str, jp_auth_header: Any
) -> None:
    token = jp_auth_header["Authorization"].split()[-1]
    credentials = {
        **jp_auth_header,
        "Cookie": f"_xsrf=abc; username-localhost=secret-{token}",
        "Referer": f"http://localhost/lab?token={token}",
        "X-XSRFToken": "abc",
        "Connection": "keep-alive, X-Secret",
        "X-Secret": token,
        "Accept": "text/html",
    }
    first = await http_server_client.fetch(
        f"{jp_base_url}dask-observe/dashboard/{upstream.id}/status"
        f"?token={token}&_xsrf=abc&keep=1",
        headers=credentials, raise_error=False, follow_redirects=False,
    )  # fmt: skip
    assert first.code == 302 and token not in first.headers["Location"]
    # A browser following the redirect at the top sends its cookies again.
    response = await through_capability(http_server_client, first, credentials)
    assert response.code == 200 and response.body == b"dashboard says hi"
    ((headers, query),) = upstream.seen
    assert query == "keep=1"
    assert token not in json.dumps(headers) and "abc" not in json.dumps(headers)
    names = {name.lower() for name in headers}
    assert not names & {
        "cookie", "authorization", "referer", "x-xsrftoken", "x-secret",
    }  # fmt: skip
    assert headers.get("Accept") == "text/html"


async def test_the_dashboards_headers_cannot_act_on_jupyters_origin(
    upstream: Any, get: Any
) -> None:
    response = await get(f"dask-observe/dashboard/{upstream.id}/status")
    assert response.code == 200
    headers = response.headers
    for name in (
        "Access-Control-Allow-Credentials", "Clear-Site-Data", "Refresh",
        "Strict-Transport-Security",
    ):  # fmt: skip
        assert name not in headers, name
    # What Jupyter sets itself (an empty allowed origin, its user cookie) only.
    assert headers.get("Access-Control-Allow-Origin", "") == ""
    assert not any("planted" in c for c in headers.get_list("Set-Cookie"))
    # Jupyter's own policy, not the dashboard's "default-src *".
    assert "frame-ancestors" in headers["Content-Security-Policy"]
    assert "default-src *" not in headers["Content-Security-Policy"]
    assert headers["ETag"] == '"v1"' and headers["Content-Type"] == "text/plain"


@pytest.mark.parametrize(
    "location",
    [
        "//evil.example/x",
        "https:evil.example/x",
        "/\\evil.example/x",
        "http://evil.example/x",
        "../../../api/contents",
    ],
)
async def test_redirects_out_of_the_dashboard_are_refused(
    upstream: Any, get: Any, location: str
) -> None:
    upstream.redirect = location
    response = await get(f"dask-observe/dashboard/{upstream.id}/moved")
    assert response.code == 502
    assert "Location" not in response.headers
    assert b"evil" not in response.body


async def test_a_redirect_within_the_dashboard_stays_under_the_proxy(
    upstream: Any, http_server_client: Any, jp_base_url: str, jp_auth_header: Any
) -> None:
    upstream.redirect = "/individual-progress?x=1"
    first = await http_server_client.fetch(
        f"{jp_base_url}dask-observe/dashboard/{upstream.id}/moved",
        headers=jp_auth_header, follow_redirects=False, raise_error=False,
    )  # fmt: skip
    response = await through_capability(http_server_client, first)
    assert response.code == 302
    root = f"{jp_base_url}dask-observe/dashboard/{upstream.id}/"
    assert re.fullmatch(
        re.escape(root) + r"~[0-9a-f]+\.[\w-]{32}/individual-progress\?x=1",
        response.headers["Location"],
    ), response.headers["Location"]


async def test_a_large_body_streams_through_whole(upstream: Any, get: Any) -> None:
    response = await get(f"dask-observe/dashboard/{upstream.id}/big")
    assert response.code == 200
    assert len(response.body) == 80 * 65536
    assert response.body[:65536] == b"A" * 65536 and response.body[-1:] == b"B"


async def test_a_slow_download_holds_a_bounded_buffer_in_the_server(
    upstream: Any, http_server_client: Any, jp_base_url: str, jp_auth_header: Any,
    jp_http_port: int,
) -> None:  # fmt: skip
    """Whoever serves a registered dashboard address could make the Jupyter
    server hold a whole large answer per slow download (~92 MB each, over
    parallel connections); it holds what the sockets hold, whatever the size."""
    first = await http_server_client.fetch(
        f"{jp_base_url}dask-observe/dashboard/{upstream.id}/huge",
        headers=jp_auth_header, follow_redirects=False, raise_error=False,
    )  # fmt: skip
    location = first.headers["Location"]
    # A browser that reads a little, then nothing for a while (a slow link).
    reader, writer = await asyncio.open_connection("127.0.0.1", jp_http_port)
    writer.transport.get_extra_info("socket").setsockopt(
        socket.SOL_SOCKET, socket.SO_RCVBUF, 2**16
    )
    # HTTP/1.0: the body comes plain (not in chunks), to the connection's end.
    writer.write(f"GET {location} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert re.match(rb"HTTP/1.[01] 200 ", head), head[:200]
    taken = len(await reader.readexactly(CHUNK))
    await asyncio.sleep(1.5)  # the dashboard keeps sending meanwhile
    held = upstream.sent - taken
    # The kernel's socket buffers (up to 32 MiB of receive window here) and
    # a chunk: not the answer's 96 MiB.
    assert held < 48 * 2**20, f"{held / 2**20:.0f} MiB held for a stalled reader"
    # Then it reads on: the whole answer arrives, in order.
    for i in range(1, HUGE // CHUNK):
        assert await reader.readexactly(CHUNK) == bytes([65 + i % 26]) * CHUNK, i
    assert await reader.read() == b""
    writer.close()


async def test_a_dashboard_page_is_sandboxed_and_never_cached(
    upstream: Any, get: Any
) -> None:
    response = await get(f"dask-observe/dashboard/{upstream.id}/status")
    assert response.code == 200
    policies = response.headers.get_list("Content-Security-Policy")
    assert any(p.startswith("sandbox ") for p in policies)
    assert not any("allow-same-origin" in p for p in policies)
    assert response.headers["Cache-Control"] == "no-store"
    assert "Expires" not in response.headers


async def test_a_capability_opens_its_own_cluster_only_and_says_nothing_else(
    upstream: Any, http_server_client: Any, jp_base_url: str, jp_auth_header: Any,
    store_path: Path,
) -> None:  # fmt: skip
    first = await http_server_client.fetch(
        f"{jp_base_url}dask-observe/dashboard/{upstream.id}/status",
        headers=jp_auth_header, follow_redirects=False, raise_error=False,
    )  # fmt: skip
    capability = re.search(r"/(~[^/]+)/status$", first.headers["Location"])
    assert capability
    with dask_observe.open_store() as store:
        other = store.telemetry.register_cluster(
            "tcp://10.1.1.2:8786", "http://127.0.0.1:9"
        )
    forged = "~7fffffff." + "A" * 32
    expired = "~1." + capability[1].split(".")[1]
    for cluster, cap in ((other, capability[1]), (upstream.id, forged),
                         (upstream.id, expired)):  # fmt: skip
        response = await http_server_client.fetch(
            f"{jp_base_url}dask-observe/dashboard/{cluster}/{cap}/status",
            raise_error=False, follow_redirects=False,
        )  # fmt: skip
        assert response.code == 403, (cluster, cap)
        assert cap.encode() not in response.body
        assert b"dashboard says hi" not in response.body


async def test_a_sandboxed_pages_websocket_opens_by_its_capability(
    cluster_id: str, http_server_client: Any, jp_base_url: str,
    jp_auth_header: Any, jp_http_port: int,
) -> None:  # fmt: skip
    """The page's origin is opaque ("null") and it sends no cookie: the
    capability in its path opens the bokeh websocket, and nothing else does."""
    first = await http_server_client.fetch(
        f"{jp_base_url}dask-observe/dashboard/{cluster_id}/status",
        headers=jp_auth_header, follow_redirects=False, raise_error=False,
    )  # fmt: skip
    page = await through_capability(http_server_client, first)
    token = re.search(r'"token":\s*"([^"]+)"', page.body.decode())
    assert page.code == 200 and token
    ws_url = f"ws://127.0.0.1:{jp_http_port}{first.headers['Location']}/ws"
    ws = await websocket_connect(
        HTTPRequest(ws_url, headers={"Origin": "null"}),
        subprotocols=["bokeh", token[1]],
    )
    message = await ws.read_message()
    assert isinstance(message, str) and json.loads(message)["msgtype"] == "ACK"
    ws.close()
    forged = ws_url.replace(first.headers["Location"].split("/")[-2], "~1." + "A" * 32)
    with pytest.raises(Exception, match="403"):
        await websocket_connect(HTTPRequest(forged, headers={"Origin": "null"}))


async def test_a_redirect_that_climbs_out_once_decoded_is_refused(
    upstream: Any, get: Any
) -> None:
    """The browser reads "%2e%2e" as "..": such a redirect reached /logout."""
    upstream.redirect = "/%2e%2e/%2e%2e/api/status"
    response = await get(f"dask-observe/dashboard/{upstream.id}/moved")
    assert response.code == 502 and "Location" not in response.headers


async def test_a_cluster_no_recorder_reported_lately_is_not_proxied(
    upstream: Any, get: Any, store_path: Path
) -> None:
    with dask_observe.open_store() as store:
        store.rows(
            "UPDATE clusters SET last_seen = last_seen - 3600 WHERE id = ?",
            (upstream.id,),
        )
    response = await get(f"dask-observe/dashboard/{upstream.id}/status")
    assert response.code == 404 and b"dashboard says hi" not in response.body


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayServer]:
    with gateway_server(tmp_path) as server:
        yield server


# dask-gateway's Gateway.__del__ closes it again once its loop has stopped
# (and raises): its own, at garbage collection, after the test closed it.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_dask_gateway_clusters_dashboard_opens_by_the_gateway_s_route(
    gateway: GatewayServer, store_path: Path, get: Any, jp_http_port: int,
    jp_base_url: str, jp_auth_header: dict[str, str],
) -> None:  # fmt: skip
    # Behind a gateway the scheduler's own dashboard port is nobody's to
    # reach (a pod's, in Kubernetes): the gateway routes to it under
    # /clusters/<name>/, and that route is what is registered and proxied.
    from dask_gateway import Gateway

    gw = Gateway(gateway.url, proxy_address=gateway.proxy_address, auth="basic")
    cluster = await asyncio.to_thread(gw.new_cluster)

    def record() -> str:
        cluster.scale(1)
        with cluster.get_client() as client:
            client.wait_for_workers(1, timeout=60)
            with dask_observe.record("behind a gateway", client=client) as run:
                assert client.submit(abs, -1).result() == 1
        assert run.status == "finished"
        (registered,) = dask_observe.open_store().telemetry.clusters()
        assert registered["address"].startswith("gateway://")
        assert registered["dashboard"] == f"{gateway.url}/clusters/{cluster.name}"
        return str(registered["id"])

    try:
        cluster_id = await asyncio.to_thread(record)
        root = f"ws://localhost:{jp_http_port}{jp_base_url}"
        await assert_status_page_works(get, cluster_id, root, jp_auth_header)
    finally:
        await asyncio.to_thread(cluster.shutdown)
        await asyncio.to_thread(gw.close)


def test_a_redirect_to_the_gateway_s_route_stays_under_the_proxy() -> None:
    from dask_observe.server.proxy import redirect_target

    prefix = "/dask-observe/dashboard/abc/~1.x"
    base = "/clusters/c0ffee"
    assert redirect_target("/clusters/c0ffee/status", prefix, base) == (
        f"{prefix}/status"
    )
    assert redirect_target("/clusters/c0ffee", prefix, base) == prefix
    # Another cluster's route is not this one's: under this dashboard still.
    assert redirect_target("/clusters/other/status", prefix, base) == (
        f"{prefix}/clusters/other/status"
    )

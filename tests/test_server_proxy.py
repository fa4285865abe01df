"""The dashboard proxy in a real Jupyter server, to a real LocalCluster's bokeh
dashboard: its pages and their websocket work, and nothing else is reachable."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from distributed import Client, LocalCluster
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

import dask_observe


@pytest.fixture
def jp_server_config(store_path: Path) -> dict[str, Any]:
    return {"ServerApp": {"jpserver_extensions": {"dask_observe": True}}}


@pytest.fixture
def cluster_id(client: Client, store_path: Path) -> str:
    with dask_observe.record("registers the cluster", client=client):
        client.submit(abs, -1).result()
    (cluster,) = dask_observe.open_store().clusters()
    return str(cluster["id"])


@pytest.fixture
def get(
    http_server_client: Any, jp_base_url: str, jp_auth_header: dict[str, str]
) -> Any:
    """GET a raw path under the server (no escaping: the test controls it)."""

    async def fetch(path: str) -> Any:
        return await http_server_client.fetch(
            jp_base_url + path, headers=jp_auth_header, raise_error=False
        )

    return fetch


async def test_the_status_page_and_its_bokeh_websocket_work_through_the_proxy(
    cluster_id: str, get: Any, jp_http_port: int, jp_base_url: str,
    jp_auth_header: dict[str, str],
) -> None:  # fmt: skip
    page = await get(f"dask-observe/dashboard/{cluster_id}/status")
    assert page.code == 200
    html = page.body.decode()
    assert "Bokeh" in html or "bokeh" in html
    # The page's session token opens the bokeh websocket, through the proxy too.
    token = re.search(r'"token":\s*"([^"]+)"', html)
    assert token, "no bokeh session token in the page"
    url = (
        f"ws://localhost:{jp_http_port}{jp_base_url}"
        f"dask-observe/dashboard/{cluster_id}/status/ws"
    )
    ws = await websocket_connect(
        HTTPRequest(url, headers=jp_auth_header), subprotocols=["bokeh", token[1]]
    )
    message = await ws.read_message()
    assert isinstance(message, str)
    header = json.loads(message)
    assert header["msgtype"] == "ACK"
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
        (cluster,) = dask_observe.open_store().clusters()
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

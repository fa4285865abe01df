"""The Jupyter server extension, in a real Jupyter server (pytest-jupyter)."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError
from tornado.websocket import websocket_connect

from dask_observe.store import BaseStore

from .routes import ROUTES


async def test_runs_route_lists_the_stores_runs(
    jp_fetch: Any, store_path: Path
) -> None:
    with BaseStore(store_path) as store:
        first = store.create_run("<script>alert(1)</script>", cluster="tcp://x:1")
        store.end_run(first, "finished", n_tasks=7)
        store.create_run("second")
    response = await jp_fetch("dask-observe", "api", "runs")
    assert response.code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    runs = json.loads(response.body)["runs"]
    assert [r["name"] for r in runs] == ["second", "<script>alert(1)</script>"]
    assert runs[1]["status"] == "finished" and runs[1]["n_tasks"] == 7
    assert set(runs[1]) >= {"id", "started", "ended", "duration_s", "cluster"}
    # Untrusted text travels JSON-encoded only.
    assert b"<script>" in response.body and b"text/html" not in response.body
    assert json.loads(response.body)["total"] == 2


async def test_runs_route_answers_the_newest_page_and_the_count(
    jp_fetch: Any, store_path: Path
) -> None:
    # The panel asks for the cards it shows: a year's 1,000 runs, each poll,
    # were 268 KiB and 50 ms of the server's.
    with BaseStore(store_path) as store:
        for i in range(5):
            store.end_run(store.create_run(f"night {i}"), "finished")
    response = await jp_fetch("dask-observe", "api", "runs", params={"limit": "2"})
    page = json.loads(response.body)
    assert [r["name"] for r in page["runs"]] == ["night 4", "night 3"]
    assert page["total"] == 5
    with pytest.raises(HTTPClientError) as bad:
        await jp_fetch("dask-observe", "api", "runs", params={"limit": "-1"})
    assert bad.value.code == 400


async def test_runs_route_without_a_store_yet_is_an_empty_list(
    jp_fetch: Any, store_path: Path
) -> None:
    response = await jp_fetch("dask-observe", "api", "runs")
    assert json.loads(response.body) == {"runs": [], "total": 0}
    assert not store_path.exists()  # reading never creates the store


async def test_a_store_that_is_not_ours_is_a_json_error(
    jp_fetch: Any, store_path: Path
) -> None:
    store_path.parent.mkdir(parents=True)
    store_path.write_text("not sqlite")
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("dask-observe", "api", "runs")
    assert info.value.code == 500
    assert info.value.response is not None
    body = json.loads(info.value.response.body)
    assert "not a dask-observe store" in body["message"]


async def test_another_applications_database_is_left_byte_identical_by_the_server(
    jp_fetch: Any, store_path: Path
) -> None:
    store_path.parent.mkdir(parents=True)
    with sqlite3.connect(store_path) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE notes (text)")
    conn.close()
    os.chmod(store_path, 0o600)
    before = {p.name: p.read_bytes() for p in store_path.parent.iterdir()}
    for parts in (("runs",), ("runs", "last"), ("clusters",)):
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch("dask-observe", "api", *parts)
        assert info.value.code == 500
    assert {p.name: p.read_bytes() for p in store_path.parent.iterdir()} == before


@pytest.mark.parametrize("route", ROUTES)
async def test_every_route_refuses_the_unauthenticated(
    route: str, jp_serverapp: Any, jp_base_url: str, http_server_client: Any
) -> None:
    # The same server jp_fetch talks to, but with no token and no cookie.
    response = await http_server_client.fetch(jp_base_url + route, raise_error=False)
    assert response.code == 403
    assert b"dask-observe" not in response.body


async def test_the_stream_refuses_an_unauthenticated_websocket_upgrade(
    jp_serverapp: Any, jp_base_url: str, jp_http_port: int, http_server_client: Any
) -> None:
    # (http_server_client: the server listens once a client fixture asks for it)
    url = f"ws://localhost:{jp_http_port}{jp_base_url}dask-observe/api/stream"
    with pytest.raises(HTTPClientError) as info:
        await websocket_connect(url)
    assert info.value.code == 403


#: A Jupyter server with dask-observe's extension in an environment without
#: dask, whose stream a websocket client subscribes to.
NO_DASK_SERVER = """
import sys
sys.modules["dask"] = None
sys.modules["distributed"] = None
import json
from tornado.ioloop import IOLoop
from tornado.websocket import websocket_connect
from jupyter_server.serverapp import ServerApp

port, root = sys.argv[1], sys.argv[2]
app = ServerApp()
app.initialize(argv=[
    f"--port={port}", "--ip=127.0.0.1", "--ServerApp.token=secret",
    "--ServerApp.open_browser=False", f"--ServerApp.root_dir={root}",
    '--ServerApp.jpserver_extensions={"dask_observe": True}',
])

async def subscribe():
    url = f"ws://127.0.0.1:{port}/dask-observe/api/stream?token=secret"
    ws = await websocket_connect(url)
    ws.write_message(json.dumps(
        {"type": "subscribe", "run": "last", "kinds": ["logs", "flags", "progress"]}
    ))
    print(json.loads(await ws.read_message())["type"])
    ws.close()

IOLoop.current().run_sync(subscribe, timeout=60)
"""


def test_a_server_without_dask_streams_a_run(tmp_path: Path) -> None:
    """The claim of server/__init__.py, through a real server and websocket."""
    path = tmp_path / "s.sqlite"
    with BaseStore(path) as store:
        store.create_run("from a kernel elsewhere")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run(
        [sys.executable, "-c", NO_DASK_SERVER, str(port), str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "DASK_OBSERVE__STORE": str(path)},
        timeout=120,
    )
    assert out.stdout.strip() == "subscribed", out.stderr[-3000:]


def test_the_server_side_reads_the_store_without_dask(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with BaseStore(path) as store:
        store.create_run("from a kernel elsewhere")
    # A server environment without dask: importing it fails outright.
    code = (
        "import sys; sys.modules['dask'] = None; sys.modules['distributed'] = None\n"
        "from pathlib import Path\n"
        "from dask_observe.server import _load_jupyter_server_extension\n"
        "from dask_observe.server.routes import read_run, read_report\n"
        "from dask_observe.server.subscriptions import Subscription, judge_flags\n"
        "import dask_observe.server.proxy, dask_observe.server.stream\n"
        "import dask_observe.server.archive_routes, dask_observe.archive\n"
        "from dask_observe.store import BaseStore\n"
        "with BaseStore(Path(sys.argv[1]), readonly=True) as store:\n"
        "    print(store.run_records()[0]['name'])\n"
        "    assert read_run(store, 'last')['flags'] == []\n"
        "    assert 'dobs-report' in read_report(store, 'last')\n"
        "    sub = Subscription(store, {'run': 'last',\n"
        "                               'kinds': ['logs', 'flags', 'progress']})\n"
        "    sub.rows_after(store, 0); sub.progress(store)\n"
        "    assert judge_flags(store, sub.run_id) == []\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "from a kernel elsewhere"

"""How long the run list takes beside heavy or hostile work, on a real server.

    .venv/bin/python benchmarks/fairness.py --repeat 20

The server's tests prove that such work stalls nobody (the run list answers
while it is under way); this measures how long the run list then takes. A real
``jupyter server`` with the extension (its own process: no test's garbage in its
heap) serves a store of 300,000 log lines, and ``GET dask-observe/api/runs`` is
timed alone and beside each of: a catastrophic pattern (``(a+)+$``, which
Python's ``re`` takes a minute over), more pattern queries than the server runs
at once, every stream the server allows held open, a stream closed while its
first read scans the whole run. Medians and maxima of ``--repeat`` tries each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import tempfile
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from stream import free_port, start_server
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

from dask_observe.server.manager import CAPS
from dask_observe.store import BaseStore

CLUSTER = "tcp://bench:8786"


def fill(path: Path) -> None:
    """A run still recording with 300,000 lines, and 200 lines of a's then a b."""
    with BaseStore(path) as store:
        store.create_run("followed", cluster=CLUSTER)
        now = time.time()
        lines = [f"line {i}" for i in range(300_000)] + ["a" * 28 + "b"] * 200
        store.telemetry.append(
            CLUSTER,
            [("log", now + i * 1e-6, 30, "worker", "w", "u", line)
             for i, line in enumerate(lines)],
        )  # fmt: skip


class Server:
    def __init__(self, port: int, token: str) -> None:
        self.base = f"127.0.0.1:{port}/dask-observe/api"
        self.headers = {"Authorization": f"token {token}"}
        self.client = AsyncHTTPClient()

    async def get(self, path: str, **params: Any) -> int:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        request = HTTPRequest(
            f"http://{self.base}/{path}{query}", headers=self.headers,
            request_timeout=60,
        )  # fmt: skip
        try:
            return (await self.client.fetch(request)).code
        except HTTPClientError as e:
            return e.code

    async def stream(self, filters: dict[str, Any] | None = None) -> Any:
        ws = await websocket_connect(
            HTTPRequest(f"ws://{self.base}/stream", headers=self.headers)
        )
        if filters is not None:
            await ws.write_message(
                json.dumps({"type": "subscribe", "run": "last", "filters": filters})
            )
            await ws.read_message()  # subscribed: its first read begins
        return ws

    async def runs(self) -> float:
        began = time.perf_counter()
        code = await self.get("runs")
        if code != 200:
            raise RuntimeError(f"/runs answered {code}")
        return time.perf_counter() - began


async def alone(server: Server) -> float:
    return await server.runs()


async def beside_catastrophic_pattern(server: Server) -> float:
    hostile = asyncio.ensure_future(
        server.get("runs/last/logs", contains="(a+)+$", regex=1)
    )
    await asyncio.sleep(0.02)
    took = await server.runs()
    await hostile
    return took


async def beside_more_patterns_than_allowed(server: Server) -> float:
    queries = asyncio.gather(
        *(
            server.get("runs/last/logs", contains=f"^z{i}", regex=1)
            for i in range(CAPS["pattern"] + 4)
        )
    )
    await asyncio.sleep(0.02)
    took = await server.runs()
    await queries
    return took


async def beside_every_stream_open(server: Server) -> float:
    streams = [await server.stream() for _ in range(CAPS["stream"] - 1)]
    took = await server.runs()
    for ws in streams:
        ws.close()
    await asyncio.sleep(0.2)  # the server learns of the closes
    return took


async def after_a_stream_closed_mid_read(server: Server) -> float:
    (await server.stream({"contains": "nowhere"})).close()
    return await server.runs()


CASES: list[tuple[str, Callable[[Server], Awaitable[float]]]] = [
    ("alone", alone),
    ("beside a catastrophic pattern", beside_catastrophic_pattern),
    (
        f"beside {CAPS['pattern'] + 4} pattern queries",
        beside_more_patterns_than_allowed,
    ),
    (f"beside {CAPS['stream'] - 1} open streams", beside_every_stream_open),
    ("after a stream closed mid-read", after_a_stream_closed_mid_read),
]


async def measure(port: int, token: str, repeat: int) -> None:
    server = Server(port, token)
    await server.runs()  # the first read of the store (and the reading processes)
    print("| `/runs` | median | max |")
    print("| --- | --- | --- |")
    for name, case in CASES:
        took = [await case(server) for _ in range(repeat)]
        print(
            f"| {name} | {statistics.median(took) * 1e3:.0f} ms "
            f"| {max(took) * 1e3:.0f} ms |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    store = Path(tempfile.mkdtemp()) / "observe.sqlite"
    fill(store)
    port, token = free_port(), secrets.token_hex(16)
    process = start_server(store, port, token)
    try:
        asyncio.run(measure(port, token, args.repeat))
    finally:
        process.terminate()
        process.wait()


if __name__ == "__main__":
    main()

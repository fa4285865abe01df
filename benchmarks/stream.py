"""Event-stream latency, from store commit to client receipt, and server memory.

    .venv/bin/python benchmarks/stream.py --rates 1000 20000 --seconds 10

A real ``jupyter server`` with the extension serves a temporary store; a writer
commits log lines to it at each rate (a batch every 50 ms, stamped with the time
of their commit), while websocket clients follow the cluster. Latency is the
receipt time minus the commit stamp, per line. Then 20 subscribers follow the
same writer at the lowest rate, and the server's resident memory is read before
and after. The server's CPU (its reading processes included) is the load each
way of following the store puts on it, as a share of one core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from dask_observe.store import BaseStore

CLUSTER = "tcp://bench:8786"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(store: Path, port: int, token: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DASK_OBSERVE__STORE": str(store)}
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
         f"--port={port}", "--ip=127.0.0.1", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={store.parent}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}")
            return process
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("jupyter server did not start")


def write(store_path: Path, rate: int, seconds: float, stop: threading.Event) -> int:
    """Commit ``rate`` lines a second in 50 ms batches, each stamped at commit."""
    written = 0
    with BaseStore(store_path) as store:
        instance, cursor = store.telemetry.cursor(CLUSTER)
        instance = instance or "bench"
        end = time.monotonic() + seconds
        while time.monotonic() < end and not stop.is_set():
            n = max(1, rate // 20)
            now = time.time()
            records = [
                (cursor + i + 1, ("log", now, 30, "worker", "w", "bench", f"line {i}"))
                for i in range(n)
            ]
            store.telemetry.ingest(
                CLUSTER, records, read_at=(None if cursor == 0 else instance, cursor),
                instance=instance, last=cursor + n, dropped={},
            )  # fmt: skip
            cursor += n
            written += n
            time.sleep(max(0.0, 0.05 - (time.time() - now)))
    return written


async def follow(
    url: str, token: str, latencies: list[float], stop: asyncio.Event
) -> None:
    ws = await websocket_connect(
        HTTPRequest(url, headers={"Authorization": f"token {token}"})
    )
    with BaseStore(STORE) as store:
        cluster_id = store.telemetry.register_cluster(CLUSTER, None)
        after = store.last_seq()
    ws.write_message(json.dumps({"type": "subscribe", "cluster": cluster_id,
                                 "kinds": ["logs"], "after": after}))  # fmt: skip
    while not stop.is_set():
        try:
            message = await asyncio.wait_for(ws.read_message(), 0.5)
        except TimeoutError:
            continue
        if message is None:
            return
        received = time.time()
        data = json.loads(message)
        if data["type"] == "error":  # the benchmark is broken: say so
            raise RuntimeError(data["message"])
        latencies += [received - row["time"] for row in data.get("logs", ())]
    ws.close()


async def measure(
    url: str, token: str, rate: int, seconds: float, clients: int
) -> list[float]:
    latencies: list[float] = []
    stop = asyncio.Event()
    followers = [
        asyncio.ensure_future(follow(url, token, latencies, stop))
        for _ in range(clients)
    ]
    await asyncio.sleep(1.0)
    halt = threading.Event()
    await asyncio.to_thread(write, STORE, rate, seconds, halt)
    await asyncio.sleep(1.0)
    stop.set()
    await asyncio.gather(*followers)
    return latencies


def row(rate: int, clients: int, latencies: list[float], cpu: float) -> str:
    p50 = statistics.median(latencies) * 1e3
    p95 = quantile(latencies, 0.95) * 1e3
    return (
        f"| {rate:,} | {clients} | {p50:.0f} ms | {p95:.0f} ms | {len(latencies):,} "
        f"| {cpu:.0%} |"
    )


def cpu_seconds(process: psutil.Process) -> float:
    """CPU the server used so far, its reading processes included."""
    total = 0.0
    for p in [process, *process.children(recursive=True)]:
        try:
            times = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def timed_measure(
    process: psutil.Process, url: str, token: str, rate: int, seconds: float, n: int
) -> tuple[list[float], float]:
    """The latencies, and the server's CPU (a share of one core) meanwhile."""
    cpu, wall = cpu_seconds(process), time.monotonic()
    got = asyncio.run(measure(url, token, rate, seconds, n))
    return got, (cpu_seconds(process) - cpu) / (time.monotonic() - wall)


def quantile(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


STORE = Path(tempfile.mkdtemp()) / "observe.sqlite"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", type=int, nargs="+", default=[1000, 20000])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--subscribers", type=int, default=20)
    args = parser.parse_args()
    with BaseStore(STORE) as store:
        store.telemetry.register_cluster(CLUSTER, None)
    port, token = free_port(), secrets.token_hex(16)
    server = start_server(STORE, port, token)
    url = f"ws://127.0.0.1:{port}/dask-observe/api/stream"
    try:
        print("| lines/s | subscribers | p50 | p95 | lines received | server CPU |")
        print("| --- | --- | --- | --- | --- | --- |")
        process = psutil.Process(server.pid)
        for rate in args.rates:
            got, cpu = timed_measure(process, url, token, rate, args.seconds, 1)
            print(row(rate, 1, got, cpu), flush=True)
        rss_before = process.memory_info().rss
        peak = [rss_before]
        done = threading.Event()

        def sample() -> None:  # the server's memory while 20 clients follow
            while not done.wait(0.2):
                try:
                    peak[0] = max(peak[0], process.memory_info().rss)
                except psutil.NoSuchProcess:  # (seen once: the server had died)
                    return

        sampler = threading.Thread(target=sample)
        sampler.start()
        got, cpu = timed_measure(
            process, url, token, args.rates[0], args.seconds, args.subscribers
        )
        done.set()
        sampler.join()
        rss_after = peak[0]
        print(row(args.rates[0], args.subscribers, got, cpu))
        print()
        print(
            f"server RSS: {rss_before / 2**20:.0f} MiB before, {rss_after / 2**20:.0f}"
            f" MiB at most with {args.subscribers} subscribers"
        )
    finally:
        server.terminate()
        server.wait(timeout=20)


if __name__ == "__main__":
    main()

"""A dask-gateway server as a deployment runs one, on the loopback: its
local backend starts each cluster's scheduler and workers as processes of
this environment, its proxy routes the dashboards (``/clusters/<name>/``) and
the schedulers' TLS connections (``gateway://``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .remote import free_port

CONFIG = """
c.DaskGateway.backend_class = "dask_gateway_server.backends.local.UnsafeLocalBackend"
c.DaskGateway.authenticator_class = "dask_gateway_server.auth.SimpleAuthenticator"
c.DaskGateway.address = "127.0.0.1:{api}"
c.Proxy.address = "127.0.0.1:{web}"
c.Proxy.tcp_address = "127.0.0.1:{tcp}"
c.LocalBackend.clusters_directory = {clusters!r}
c.ClusterConfig.scheduler_cmd = [{python!r}, "-m", "distributed.cli.dask_scheduler"]
c.ClusterConfig.worker_cmd = [{python!r}, "-m", "distributed.cli.dask_worker"]
c.ClusterConfig.worker_cores = 1
c.ClusterConfig.worker_memory = "1G"
"""


@dataclass
class GatewayServer:
    #: Where clients and browsers reach it (its proxy's HTTP routes).
    url: str
    #: Where clients reach the schedulers (TLS through its proxy).
    proxy_address: str


@contextmanager
def gateway_server(folder: Path) -> Iterator[GatewayServer]:
    """A running dask-gateway server; stopped (and its clusters) after."""
    api, web, tcp = free_port(), free_port(), free_port()
    config = folder / "dask_gateway_config.py"
    config.write_text(
        CONFIG.format(
            api=api, web=web, tcp=tcp, python=sys.executable,
            clusters=str(folder / "clusters"),
        )
    )  # fmt: skip
    program = Path(sys.executable).parent / "dask-gateway-server"
    log = (folder / "gateway.log").open("wb")
    process = subprocess.Popen(
        [str(program), "-f", str(config)],
        cwd=folder,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{web}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "the gateway did not start: "
                    + (folder / "gateway.log").read_text()[-3000:]
                )
            time.sleep(0.2)
        yield GatewayServer(url, f"gateway://127.0.0.1:{tcp}")
    finally:
        # Its group: the server and any scheduler or worker it started.
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()

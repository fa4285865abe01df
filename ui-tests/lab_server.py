"""A real ``jupyter lab`` on a free port, and Chromium's settings for these
machines: shared by the browser tests and the panel benchmark."""

from __future__ import annotations

import http.client
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("DASK_OBSERVE_CHROMIUM", "/usr/bin/chromium")
# Flags that let Chromium run headless as root on a machine with no network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@dataclass
class Lab:
    url: str
    token: str
    home: Path  # the server's config, runtime, settings and workspaces
    store_path: Path
    root: Path
    process: subprocess.Popen[bytes] | None = None
    #: The application: "jupyterlab", or "notebook" for Notebook 7 (same server
    #: extension, same labextension).
    app: str = "jupyterlab"
    #: More environment for the server (dask config: DASK_OBSERVE__...).
    env: dict[str, str] = field(default_factory=dict)

    @property
    def settings(self) -> Path:
        """JUPYTERLAB_SETTINGS_DIR: a user's settings, as files."""
        return self.home / "settings"

    def set_user_settings(self, plugin: str, values: str) -> None:
        """Write a plugin's user settings (read when a page loads)."""
        package, name = plugin.split(":")
        folder = self.settings / package
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.jupyterlab-settings").write_text(values)

    def page_url(self, path: str = "lab") -> str:
        return f"{self.url}{path}?token={self.token}"

    def start(self) -> None:
        """Start the server (again: same port, token and files) and wait for
        it. A port taken between ``_free_port`` and the server's bind (a
        dask worker of another test process: the kernel hands out a port just
        let go) is traded for another free one, three times at most: the
        server, left to try the next ports by itself, answered a page's
        request from a dask worker's port."""
        for _ in range(3):
            if self._start_once():
                return
            self.url = f"http://127.0.0.1:{_free_port()}/"
        raise RuntimeError("jupyter lab found its port taken three times")

    def _start_once(self) -> bool:
        """Start the server on its port and wait for it; False if that port
        was taken."""
        env = {
            **os.environ,
            "DASK_OBSERVE__STORE": str(self.store_path),
            "JUPYTER_CONFIG_DIR": str(self.home / "config"),
            "JUPYTER_RUNTIME_DIR": str(self.home / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(self.settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(self.home / "workspaces"),
            **self.env,
        }
        log = self.root / "jupyter-lab.log"
        with log.open("ab") as out:
            start = out.tell()
            self.process = subprocess.Popen(
                [
                    sys.executable, "-m", self.app, "--no-browser", "--allow-root",
                    f"--port={self.url.rsplit(':', 1)[1].strip('/')}",
                    "--ServerApp.port_retries=0",  # its port, or none
                    "--ip=127.0.0.1", f"--IdentityProvider.token={self.token}",
                    f"--ServerApp.root_dir={self.root}",
                ],
                env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        return _wait_until_up(self, self.process, log, start)

    def api(self, method: str, path: str) -> Any:
        """A call to the server's REST API; its JSON answer, if any."""
        request = urllib.request.Request(
            f"{self.url}{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shut_down_kernels(self) -> None:
        """Shut down every kernel the server runs (and their sessions)."""
        if self.process is None:
            return
        for session in self.api("GET", "api/sessions") or []:
            self.api("DELETE", f"api/sessions/{session['id']}")
        for kernel in self.api("GET", "api/kernels") or []:
            self.api("DELETE", f"api/kernels/{kernel['id']}")

    def reset(self) -> None:
        """As a fresh server would be for the next test: no store, no saved
        workspace, no user settings but the one every lab here starts with."""
        shutil.rmtree(self.store_path.parent, ignore_errors=True)
        shutil.rmtree(self.home / "workspaces", ignore_errors=True)
        shutil.rmtree(self.settings, ignore_errors=True)
        _quiet(self)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_until_up(
    lab: Lab, process: subprocess.Popen[bytes], log: Path, start: int
) -> bool:
    """Whether the server came up (False: its port was taken; its log from
    byte ``start`` says so)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = log.read_bytes()[start:].decode(errors="replace")
            if "is already in use" in said:
                return False
            raise RuntimeError(f"jupyter lab exited early:\n{said}")
        try:
            with urllib.request.urlopen(lab.page_url("api/status"), timeout=2):
                return True
        # Not up yet, or another program answering on the port (it then
        # exits, saying the port is in use).
        except (OSError, http.client.HTTPException):
            time.sleep(0.25)
    raise RuntimeError(f"jupyter lab did not answer in 90 s:\n{log.read_text()}")


def _quiet(lab: Lab) -> None:
    """No "get notified about Jupyter news?" toast over the screenshots."""
    lab.set_user_settings(
        "@jupyterlab/apputils-extension:notification", '{"fetchNews": "false"}'
    )


def _no_build_check(lab: Lab) -> None:
    """No "build recommended?" check as each page loads (JupyterLab's
    ``page_config.json`` settings, as a site that builds nothing sets them):
    the server answered it by running yarn under node, 0.56 CPU-second of a
    load's 3.60 (benchmarks/README.md, "The panel"). The panel
    is a prebuilt extension: no build is ever recommended for it."""
    folder = lab.home / "config" / "labconfig"
    folder.mkdir(parents=True, exist_ok=True)
    settings = {"buildCheck": False, "buildAvailable": False}
    (folder / "page_config.json").write_text(json.dumps(settings))


@contextmanager
def running_lab(
    store_path: Path,
    folder: Path,
    app: str = "jupyterlab",
    env: dict[str, str] | None = None,
) -> Iterator[Lab]:
    """``jupyter lab`` (or ``app``) as a user starts it, on a free port, with a
    fresh workspace in ``folder``, reading the store at ``store_path`` (and
    ``env`` added to its environment)."""
    port = _free_port()
    lab = Lab(
        f"http://127.0.0.1:{port}/", secrets.token_hex(16), folder / "lab",
        store_path, folder, app=app, env=env or {},
    )  # fmt: skip
    _quiet(lab)
    _no_build_check(lab)
    try:
        lab.start()
        yield lab
    finally:
        lab.stop()

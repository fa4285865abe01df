"""A real JupyterLab server and Debian's Chromium, driven by Playwright."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

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
ARTIFACTS = Path(__file__).with_name("artifacts")


@dataclass
class Lab:
    url: str
    token: str

    def page_url(self, path: str = "lab") -> str:
        return f"{self.url}{path}?token={self.token}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_until_up(lab: Lab, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"jupyter lab exited early:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(lab.page_url("api/status"), timeout=2):
                return
        except OSError:
            time.sleep(0.25)
    raise RuntimeError(f"jupyter lab did not answer in 90 s:\n{log.read_text()}")


@pytest.fixture(autouse=True)
def jp_asyncio_loop() -> None:
    """Replaces pytest-jupyter's per-test event loop, which fights Playwright's.

    These tests start JupyterLab as a separate process; nothing here needs that loop.
    """


@pytest.fixture(autouse=True)
def jp_server_cleanup() -> None:
    """No in-process Jupyter server to clean up here (see jp_asyncio_loop)."""


@pytest.fixture
def lab(store_path: Path, tmp_path: Path) -> Iterator[Lab]:
    """``jupyter lab`` as a user starts it, on a free port, with a fresh workspace."""
    port, token = _free_port(), secrets.token_hex(16)
    lab = Lab(url=f"http://127.0.0.1:{port}/", token=token)
    home = tmp_path / "lab"
    env = {
        **os.environ,
        "DASK_OBSERVE__STORE": str(store_path),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
    }
    # No "get notified about Jupyter news?" toast over the screenshots.
    notification = home / "settings" / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    (notification / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false"}'
    )
    log = tmp_path / "jupyter-lab.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                "--allow-root",
                f"--port={port}",
                "--ip=127.0.0.1",
                f"--IdentityProvider.token={token}",
                f"--ServerApp.root_dir={tmp_path}",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_until_up(lab, process, log)
        yield lab
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        raise RuntimeError(
            f"no Chromium at {CHROMIUM}: run scripts/setup.sh (it installs Debian's "
            "chromium) or set DASK_OBSERVE_CHROMIUM"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    yield page
    context.close()

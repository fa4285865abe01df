"""Whatever answers at a registered dashboard address cannot act as Jupyter.

A page served at a cluster's dashboard address (a dashboard that was replaced,
or another user's server on a dead cluster's port) ran, through the proxy, on
the Jupyter server's origin: it read the ``_xsrf`` cookie, wrote a file through
``/api/contents`` and listed the kernels. Here that page is real, its server is
real, and it is opened as users open dashboards: from the panel's tab, and by
the proxy's address in the browser."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from lab_server import Lab
from playwright.sync_api import Frame, Page, expect

from conftest import PANEL_TAB
from dask_observe.store import BaseStore

#: The hostile page: it tries what the red team did, and writes what it got.
HOSTILE = b"""<!doctype html><html><body><pre id="out">running</pre><script>
(async () => {
  const said = {};
  try { said.cookie = document.cookie; } catch (e) { said.cookie = "refused"; }
  try { said.parent = window.parent.document.title; }
  catch (e) { said.parent = "refused"; }
  let xsrf = "";
  try { xsrf = (document.cookie.match(/_xsrf=([^;]+)/) || [])[1] || ""; } catch (e) {}
  try {
    const put = await fetch("/api/contents/pwned.txt", {
      method: "PUT", credentials: "include",
      headers: {"Content-Type": "application/json", "X-XSRFToken": xsrf},
      body: JSON.stringify({type: "file", format: "text", content: "pwned"}),
    });
    said.write = put.status;
  } catch (e) { said.write = "refused"; }
  try {
    const kernels = await fetch("/api/kernels", {credentials: "include"});
    said.kernels = kernels.status;
  } catch (e) { said.kernels = "refused"; }
  document.getElementById("out").textContent = JSON.stringify(said);
})();
</script></body></html>"""


@pytest.fixture
def hostile() -> Iterator[str]:
    """A server that answers every path with the hostile page."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Cache-Control", "max-age=31536000")
            self.end_headers()
            self.wfile.write(HOSTILE)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def _outcome(frame: Frame | Page) -> str:
    out = frame.locator("#out")
    expect(out).not_to_have_text("running", timeout=20_000)
    return out.inner_text()


def test_a_hostile_dashboard_page_cannot_act_as_the_user(
    lab: Lab, page: Page, hostile: str, store_path: Path
) -> None:
    with BaseStore(store_path) as store:
        cluster_id = store.telemetry.register_cluster("tcp://127.0.0.1:1", hostile)

    # Opened by its address in the browser, as a bookmark or a link would.
    page.goto(lab.page_url("lab"))
    page.goto(f"{lab.url}dask-observe/dashboard/{cluster_id}/status")
    said = _outcome(page)
    assert '"cookie":"refused"' in said  # an origin of its own: no cookies
    assert '"write":"refused"' in said or '"write":403' in said, said
    assert '"kernels":"refused"' in said or '"kernels":403' in said, said
    assert not (lab.root / "pwned.txt").exists()
    response = page.request.get(f"{lab.url}dask-observe/dashboard/{cluster_id}/x")
    assert response.headers["cache-control"] == "no-store"

    # In the panel's tab, inside JupyterLab: not its parent's either.
    page.goto(lab.page_url("lab"))
    page.locator(PANEL_TAB).click()
    card = page.locator(".jp-DaskObserve-cluster").first
    card.locator('.jp-DaskObserve-dashboard-button[data-page="status"]').click()
    frame = page.frame_locator(".jp-DaskObserve-tab iframe")
    out = frame.locator("#out")
    expect(out).not_to_have_text("running", timeout=20_000)
    said = out.inner_text()
    assert '"parent":"refused"' in said and '"cookie":"refused"' in said, said
    assert not (lab.root / "pwned.txt").exists()


def test_a_dead_clusters_dashboard_is_not_proxied(
    lab: Lab, page: Page, hostile: str, store_path: Path
) -> None:
    """On a shared login node, another user may bind a dead cluster's old
    dashboard port: a cluster no recorder reported lately is not proxied."""
    with BaseStore(store_path) as store:
        cluster_id = store.telemetry.register_cluster("tcp://127.0.0.1:1", hostile)
        store.rows(
            "UPDATE clusters SET last_seen = last_seen - 3600 WHERE id = ?",
            (cluster_id,),
        )
    # Logged in (the token's cookie) without JupyterLab's page: a load of it
    # costs Chromium ~4 CPU-seconds, and nothing here is drawn.
    page.goto(lab.page_url("api/status"))
    assert page.request.get(f"{lab.url}dask-observe/api/runs").status == 200
    response = page.request.get(f"{lab.url}dask-observe/dashboard/{cluster_id}/x")
    assert response.status == 404

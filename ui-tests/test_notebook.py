"""A %%dask_record cell run in a real JupyterLab notebook, in a real Chromium."""

from __future__ import annotations

import re
import time
from pathlib import Path

import nbformat
from distributed import Client
from lab_server import Lab
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeout

import dask_observe
from conftest import ARTIFACTS, PANEL_TAB, python_notebook, recording_notebook
from dask_observe.recording.liveness import TOUCH_INTERVAL_S


def write_notebook(folder: Path, scheduler: str) -> Path:
    nb = recording_notebook(
        scheduler,
        "%%dask_record browser\n"
        "import time, dask\n"
        "@dask.delayed\n"
        "def nap(i):\n"
        "    time.sleep(0.3)\n"
        "    return i\n"
        "sum(dask.compute(*[nap(i) for i in range(30)]))",
    )
    path = folder / "record.ipynb"
    nbformat.write(nb, path)
    return path


def test_a_dask_record_cell_shows_progress_then_its_report(
    client: Client, store_path: Path, lab: Lab, page: Page
) -> None:
    assert client.scheduler is not None
    write_notebook(lab.root, str(client.scheduler.address))
    open_and_start(page, lab, "record.ipynb")

    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile("^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Run All Cells$")).click()

    # The live display: its header moves while the cell blocks in dask.compute.
    header = page.locator(".jupyter-widgets", has_text="tasks/s").last
    expect(header).to_be_visible(timeout=60_000)
    seen: list[int] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and header.count():
        try:
            text = header.inner_text(timeout=2_000)
        except PlaywrightTimeout:  # replaced by the report since count()
            break
        found = re.search(r"(\d+) / 30 tasks", text or "")
        if found:
            seen.append(int(found[1]))
            if len(set(seen)) == 2:
                ARTIFACTS.mkdir(exist_ok=True)
                page.screenshot(path=ARTIFACTS / "notebook-progress.png")
        time.sleep(0.3)
    moving = sorted({n for n in seen if 0 < n < 30})
    assert len(moving) >= 2, seen

    # Then the report takes the widget's place, as static HTML.
    report = page.locator(".dobs-report")
    expect(report).to_be_visible(timeout=30_000)
    expect(page.locator(".jupyter-widgets", has_text="tasks/s")).to_have_count(0)
    run = dask_observe.open_store().run("last")
    expect(report.locator('[data-figure="n_tasks"]')).to_have_text(
        f"{run.summary()['n_tasks']:,}"
    )
    expect(report.locator("img[alt='task stream']")).to_be_visible()
    expect(report).to_contain_text("No flag: nothing looked wrong.")
    report.scroll_into_view_if_needed()
    page.screenshot(path=ARTIFACTS / "notebook-report.png")

    # Between cells, the cluster stays live while the kernel's client is
    # connected: the kernel goes on telling the store so after the run ended
    # (liveness followed recording: a cluster went grey 15 s after each cell,
    # its dashboard buttons disabled, while the kernel still used it).
    ended = time.time()
    deadline = time.monotonic() + 3 * TOUCH_INTERVAL_S
    with dask_observe.open_store() as store:
        while store.telemetry.clusters()[0]["last_seen"] <= ended + 1:
            assert time.monotonic() < deadline, "the kernel stopped telling the store"
            time.sleep(0.2)
    page.locator(PANEL_TAB).click()
    cluster = page.locator(".jp-DaskObserve-cluster").first
    expect(cluster.locator(".jp-DaskObserve-cluster-seen")).to_have_text("live")
    status = cluster.locator('.jp-DaskObserve-dashboard-button[data-page="status"]')
    expect(status).to_be_enabled()
    status.click()
    frame = page.frame_locator(".jp-DaskObserve-tab iframe")
    expect(frame.locator("canvas").first).to_be_visible(timeout=30_000)


def open_and_start(page: Page, lab: Lab, name: str) -> None:
    """Open a notebook of the lab's folder and wait until its kernel idles.
    JupyterLab may ask which kernel to start (the notebook's own, python3),
    or start it at once: whichever shows first (waiting 8 s for a dialog
    that seldom came cost every run of a test 8 s)."""
    page.goto(lab.page_url(f"lab/tree/{name}"))
    expect(page.locator(".jp-Notebook")).to_be_visible(timeout=30_000)
    kernel = page.locator(".jp-Toolbar-kernelName", has_text="Python 3")
    accept = page.locator(".jp-Dialog .jp-mod-accept")
    expect(kernel.or_(accept).first).to_be_visible(timeout=30_000)
    if accept.count():
        accept.click()
    expect(kernel).to_be_visible(timeout=30_000)
    expect(
        page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
    ).to_be_attached(timeout=60_000)


def run_cell(page: Page, index: int) -> None:
    """Run the notebook's cell ``index`` (0-based) as a user does: select it,
    Shift+Enter; return once it has run (its execution count is shown)."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    cell.locator(".jp-InputPrompt").click()
    page.keyboard.press("Shift+Enter")
    expect(cell.locator(".jp-InputPrompt")).to_have_text(
        re.compile(r"\[\d+\]"), timeout=60_000
    )


def test_a_client_made_in_a_notebook_is_listed_live_then_last_seen_once_closed(
    store_path: Path, lab: Lab, page: Page
) -> None:
    """Nothing recorded: %load_ext alone finds the client a cell makes. The
    panel lists it within 5 s, its dashboard opens through the proxy; once
    closed, within 5 s nothing reads as live, and the dashboard tab says why
    it froze and closes."""
    nb = python_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "%load_ext dask_observe\n"
            "from distributed import Client, LocalCluster\n"
            "cluster = LocalCluster(n_workers=2, threads_per_worker=1,"
            " processes=False, dashboard_address=':0')\n"
            "client = Client(cluster)\n"
            "client.submit(sum, [1, 2]).result()"
        ),
        nbformat.v4.new_code_cell("client.close()\ncluster.close()"),
    ]
    nbformat.write(nb, lab.root / "discover.ipynb")
    open_and_start(page, lab, "discover.ipynb")
    page.locator(PANEL_TAB).click()
    empty = page.locator(".jp-DaskObserve-clusters-status")
    expect(empty).to_contain_text("%load_ext dask_observe")  # a fresh store

    run_cell(page, 0)
    made = time.monotonic()
    cluster = page.locator(".jp-DaskObserve-cluster").first
    seen = cluster.locator(".jp-DaskObserve-cluster-seen")
    expect(seen).to_have_text("live", timeout=5_000)
    listed = time.monotonic() - made
    assert listed < 5, listed
    expect(empty).to_be_hidden()
    # By notebook: the kernel's session names it (JPY_SESSION_NAME).
    made_in = cluster.locator(".jp-DaskObserve-cluster-by")
    expect(made_in).to_have_text("in discover.ipynb")
    workers = page.locator(".jp-DaskObserve-worker")
    expect(workers).to_have_count(2, timeout=10_000)
    cluster.locator('.jp-DaskObserve-dashboard-button[data-page="status"]').click()
    frame = page.frame_locator(".jp-DaskObserve-tab iframe")
    expect(frame.locator("canvas").first).to_be_visible(timeout=30_000)
    notice = page.locator(".jp-DaskObserve-tab-notice")
    expect(notice).to_be_hidden()

    tabs = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab")
    tabs.filter(has_text="discover.ipynb").click()
    run_cell(page, 1)
    closed = time.monotonic()
    expect(seen).to_have_text(re.compile("^last seen "), timeout=5_000)
    expect(made_in).to_have_text("was in discover.ipynb")
    expect(workers.locator(".jp-DaskObserve-worker-seen")).to_have_count(
        2, timeout=5_000
    )
    assert time.monotonic() - closed < 5
    panel = page.locator("#dask-observe-panel")
    expect(panel.locator(".jp-DaskObserve-worker-processing")).to_have_count(0)
    expect(panel.locator(".jp-DaskObserve-metrics-summary")).not_to_contain_text(
        "processing"
    )
    tabs.filter(has_text="Dask status").click()
    expect(notice).to_be_visible()
    expect(notice).to_contain_text("This cluster went away (last seen ")
    page.screenshot(path=ARTIFACTS / "panel-cluster-gone.png")
    notice.get_by_role("button", name="Close this tab").click()
    expect(page.locator(".jp-DaskObserve-tab")).to_have_count(0)


def test_a_dask_gateway_cluster_made_in_a_notebook_is_listed_and_its_dashboard_opens(
    store_path: Path, lab: Lab, page: Page, tmp_path: Path
) -> None:
    """A dask-gateway server's local backend (started here): the cluster a
    cell makes through it is listed, and its dashboard opens by the
    gateway's route (``/clusters/<name>/``), the one address of it that a
    browser's side can reach in a real deployment."""
    from tests.gateway import gateway_server

    with gateway_server(tmp_path) as gateway:
        nb = python_notebook()
        nb.cells = [
            nbformat.v4.new_code_cell(
                "%load_ext dask_observe\n"
                "from dask_gateway import Gateway\n"
                f"gateway = Gateway({gateway.url!r},"
                f" proxy_address={gateway.proxy_address!r}, auth='basic')\n"
                "cluster = gateway.new_cluster()\n"
                "cluster.scale(1)\n"
                "client = cluster.get_client()\n"
                "client.wait_for_workers(1, timeout=60)\n"
                "client.submit(sum, [1, 2]).result()"
            ),
            nbformat.v4.new_code_cell("client.close()\ncluster.shutdown()"),
        ]
        nbformat.write(nb, lab.root / "gateway.ipynb")
        open_and_start(page, lab, "gateway.ipynb")
        page.locator(PANEL_TAB).click()
        run_cell(page, 0)
        cluster = page.locator(".jp-DaskObserve-cluster").first
        expect(cluster.locator(".jp-DaskObserve-cluster-seen")).to_have_text(
            "live", timeout=10_000
        )
        expect(cluster.locator(".jp-DaskObserve-cluster-by")).to_have_text(
            "in gateway.ipynb"
        )
        (registered,) = dask_observe.open_store().telemetry.clusters()
        assert registered["address"].startswith(gateway.proxy_address + "/")
        assert registered["dashboard"].startswith(gateway.url + "/clusters/")
        cluster.locator('.jp-DaskObserve-dashboard-button[data-page="status"]').click()
        frame = page.frame_locator(".jp-DaskObserve-tab iframe")
        expect(frame.locator("canvas").first).to_be_visible(timeout=30_000)
        page.screenshot(path=ARTIFACTS / "panel-gateway-dashboard.png")
        tabs = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab")
        tabs.filter(has_text="gateway.ipynb").click()
        run_cell(page, 1)

"""The Dask Observe side panel in a real JupyterLab, in a real Chromium."""

from __future__ import annotations

from pathlib import Path

from distributed import Client
from playwright.sync_api import Page, expect

import dask_observe
from conftest import ARTIFACTS, Lab

PANEL_TAB = '.jp-SideBar .lm-TabBar-tab[data-id="dask-observe-panel"]'


def test_the_side_panel_lists_a_run_recorded_beforehand(
    client: Client, store_path: Path, lab: Lab, page: Page
) -> None:
    # A real run on a real cluster, with markup in its name: it must show as text.
    name = "<b>nightly</b> etl"
    with dask_observe.record(name):
        client.gather(client.map(lambda x: x + 1, range(12)))

    page.goto(lab.page_url())
    tab = page.locator(PANEL_TAB)
    expect(tab).to_have_attribute("title", "Dask Observe")
    tab.click()

    panel = page.locator("#dask-observe-panel")
    expect(panel).to_be_visible()
    runs = panel.locator(".jp-DaskObserve-run")
    expect(runs).to_have_count(1)
    run = runs.first
    expect(run.locator(".jp-DaskObserve-run-name")).to_have_text(name)
    expect(run.locator(".jp-DaskObserve-run-status")).to_have_text("finished")
    expect(run.locator(".jp-DaskObserve-run-tasks")).to_have_text("12 tasks")
    expect(run.locator(".jp-DaskObserve-run-id")).to_have_text("#1")
    assert panel.locator("b").count() == 0  # the name was not parsed as HTML
    expect(panel.locator(".jp-DaskObserve-runs-status")).to_have_text("1 run")

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "panel-runs.png")

    # A run recorded while the panel is open appears on its next refresh, on top.
    with dask_observe.record("later"):
        client.submit(abs, -1).result()
    expect(runs).to_have_count(2, timeout=15_000)
    expect(runs.first.locator(".jp-DaskObserve-run-name")).to_have_text("later")
    expect(panel.locator(".jp-DaskObserve-runs-status")).to_have_text("2 runs")

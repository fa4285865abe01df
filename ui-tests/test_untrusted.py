"""The report kept in a notebook, opened as a colleague opens it: executed by
nbclient (as papermill and schedulers do), never trusted, in JupyterLab and in
Notebook 7. Their sanitizer drops ``<svg>`` and ``<style>``: what is left must
still read as the report."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from distributed import LocalCluster
from lab_server import Lab, running_lab
from nbclient import NotebookClient
from playwright.sync_api import Page, expect

from conftest import ARTIFACTS, recording_notebook

# The colleague's notebook ran on a LocalCluster as a notebook makes it, with
# worker processes: its truth (no flag) is a cluster the test process, busy
# with the suite, does not hold (threads of it were flagged so).
pytestmark = pytest.mark.worker_processes

N_TASKS = 200


def executed_notebook(folder: Path, scheduler: str) -> Path:
    """A notebook whose %%dask_record cell ran N_TASKS tasks, saved unsigned."""
    nb = recording_notebook(
        scheduler,
        "%%dask_record shared\n"
        "import time\n"
        "def work(i):\n"
        "    time.sleep(0.005)\n"
        "    return i\n"
        f"sum(client.gather(client.map(work, range({N_TASKS}))))",
    )
    # The kernel inherits the test's environment, DASK_OBSERVE__STORE included.
    NotebookClient(
        nb, kernel_name="python3", timeout=180,
        resources={"metadata": {"path": str(folder)}},
    ).execute()  # fmt: skip
    path = folder / "shared.ipynb"
    nbformat.write(nb, path)  # not signed: it opens untrusted
    return path


@pytest.fixture(scope="module")
def shared_notebook(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The notebook a colleague received, executed once for both applications
    (an execution is a kernel's start and a recorded cell: ~5 s)."""
    folder = tmp_path_factory.mktemp("executed")
    with pytest.MonkeyPatch.context() as env:  # the kernel's store: its own
        env.setenv("DASK_OBSERVE__STORE", str(folder / "store" / "observe.sqlite"))
        return executed_notebook(folder, cluster.scheduler_address)


@pytest.fixture(params=["jupyterlab", "notebook"])
def app(
    request: pytest.FixtureRequest,
    shared_notebook: Path,
    store_path: Path,
    tmp_path: Path,
) -> Iterator[tuple[Lab, str]]:
    if request.param == "jupyterlab":
        # The test process's JupyterLab (a start saved), as fresh as a new one.
        lab: Lab = request.getfixturevalue("lab")
        lab.reset()
        shutil.copy(shared_notebook, lab.root / shared_notebook.name)
        yield lab, "lab/tree/shared.ipynb"
        return
    shutil.copy(shared_notebook, tmp_path / shared_notebook.name)
    with running_lab(store_path, tmp_path, app=request.param) as notebook:
        yield notebook, "notebooks/shared.ipynb"


def test_an_untrusted_notebook_shows_the_reports_charts_and_figures(
    app: tuple[Lab, str], page: Page
) -> None:
    lab, path = app
    page.goto(lab.page_url(path))
    report = page.locator(".dobs-report")
    expect(report).to_be_visible(timeout=60_000)
    # Untrusted: JupyterLab removed every <style>; no inline <svg> was there.
    assert report.locator("style, svg").count() == 0

    # The charts are images with real boxes (the task stream is wide).
    images = report.locator("img")
    assert images.count() >= 5
    stream = report.locator("img[alt='task stream']")
    expect(stream).to_be_visible()
    box = stream.bounding_box()
    assert box is not None and box["width"] > 400 and box["height"] > 20
    for i in range(images.count()):
        image = images.nth(i)
        image.scroll_into_view_if_needed()
        assert image.evaluate("i => i.complete && i.naturalWidth > 0"), i
        shown = image.bounding_box()
        assert shown is not None and shown["width"] > 8 and shown["height"] > 5

    # The headline figures sit in a grid: five a row, side by side.
    cells = report.locator(".dobs-figures td")
    assert cells.count() >= 10
    tops = [cells.nth(i).bounding_box()["y"] for i in range(5)]  # type: ignore[index]
    lefts = [cells.nth(i).bounding_box()["x"] for i in range(5)]  # type: ignore[index]
    assert max(tops) - min(tops) < 2 and lefts == sorted(lefts)
    assert cells.nth(5).bounding_box()["y"] > tops[0]  # type: ignore[index]

    # Text, not a wall of task keys.
    text = report.inner_text()
    assert len(re.findall(r"work-[0-9a-f]{32}", text)) <= 5
    assert f"{N_TASKS:,}" in text and "No flag: nothing looked wrong." in text

    ARTIFACTS.mkdir(exist_ok=True)
    report.scroll_into_view_if_needed()
    page.screenshot(path=ARTIFACTS / f"untrusted-report-{lab.app}.png", full_page=True)

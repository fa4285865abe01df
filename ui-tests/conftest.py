"""A real JupyterLab server and Debian's Chromium, driven by Playwright."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from lab_server import CHROMIUM, CHROMIUM_ARGS, Lab, running_lab
from playwright.sync_api import Browser, Page, sync_playwright

ARTIFACTS = Path(__file__).with_name("artifacts")


def recording_notebook(scheduler: str, cell: str) -> nbformat.NotebookNode:
    """A notebook that loads dask_observe, connects to ``scheduler`` and then
    runs ``cell`` (a ``%%dask_record`` cell, say)."""
    nb: nbformat.NotebookNode = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3", "display_name": "Python 3", "language": "python",
    }  # fmt: skip
    nb.cells = [
        nbformat.v4.new_code_cell(
            "%load_ext dask_observe\n"
            "from distributed import Client\n"
            f"client = Client({scheduler!r})"
        ),
        nbformat.v4.new_code_cell(cell),
    ]
    return nb


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
    with running_lab(store_path, tmp_path) as lab:
        yield lab


# Per module, not per session: Playwright's sync API keeps an event loop running
# on this thread while it is open, and the jp_asyncio_loop of tests/ cannot close
# its loop beside it (a run that puts a ui-tests module before tests/ failed so).
@pytest.fixture(scope="module")
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

"""A real JupyterLab server and Debian's Chromium, driven by Playwright."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dask.config
import nbformat
import pytest
from lab_server import CHROMIUM, CHROMIUM_ARGS, Lab, running_lab
from playwright.sync_api import Browser, Locator, Page, sync_playwright

ARTIFACTS = Path(__file__).with_name("artifacts")
#: The side panel's tab in JupyterLab's left sidebar.
PANEL_TAB = '.jp-SideBar .lm-TabBar-tab[data-id="dask-observe-panel"]'


def python_notebook() -> nbformat.NotebookNode:
    """An empty notebook of the python3 kernel (JupyterLab asks for none)."""
    nb: nbformat.NotebookNode = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3", "display_name": "Python 3", "language": "python",
    }  # fmt: skip
    return nb


def recording_notebook(scheduler: str, cell: str) -> nbformat.NotebookNode:
    """A notebook that loads dask_observe, connects to ``scheduler`` and then
    runs ``cell`` (a ``%%dask_record`` cell, say)."""
    nb = python_notebook()
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


@pytest.fixture(scope="session")
def shared_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One ``jupyter lab`` for the tests of a test process (a start costs 2-3 s
    alone, ~5 CPU-seconds in a loaded suite): each test gets it with a fresh
    store, workspace and settings (see ``store_path``)."""
    folder = tmp_path_factory.mktemp("lab")
    with running_lab(folder / "observe-store" / "observe.sqlite", folder) as lab:
        yield lab


@pytest.fixture
def store_path(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """As the suite's own (a fresh store, the configured default), but for a
    test with a ``lab``: the store of the module's lab, made empty."""
    if "lab" in request.fixturenames:
        lab: Lab = request.getfixturevalue("shared_lab")
        lab.reset()
        path = lab.store_path
    else:
        path = tmp_path / "observe-store" / "observe.sqlite"
    monkeypatch.setenv("DASK_OBSERVE__STORE", str(path))
    with dask.config.set({"observe.store": str(path)}):
        yield path


@pytest.fixture
def lab(shared_lab: Lab, store_path: Path) -> Iterator[Lab]:
    """The module's JupyterLab, as fresh as a new one; the kernels this test
    started are shut down after it (they would go on recording its cluster)."""
    yield shared_lab
    shared_lab.shut_down_kernels()


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


def steady(control: Locator, still_ms: int = 400, timeout_ms: int = 20_000) -> None:
    """Wait until ``control`` has stood still for ``still_ms``, as a user's
    eye lets it before the hand clicks. (The panel's sections are as tall as
    what they hold and fill as their answers come: a run's Report button
    moved 5-8 times in its first second on a loaded host, by up to 207 px,
    and a click whose press and release straddle a move is lost: twice the
    suite clicked a drawn Report button and no tab opened.)"""
    page = control.page
    box, since, waited = control.bounding_box(), 0, 0
    while since < still_ms:
        if waited > timeout_ms:
            raise AssertionError(f"{control} never stood still: {box}")
        page.wait_for_timeout(50)
        waited += 50
        now = control.bounding_box()
        since = since + 50 if now == box else 0
        box = now

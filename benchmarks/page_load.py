"""What one JupyterLab page load costs the machine, with the panel's extension.

The browser tests load JupyterLab ~20 times in the README's test command (a
fresh browser context each, as a user's first visit). Each load is measured
as every process's CPU (``/proc/stat``) from the ``goto`` until the panel's
tab is there and 3 s more (the page's start-up requests, the panel's first
polls), in a fresh context of one Chromium per server. Two servers side by
side, a round of each in turn (these machines are noisy):

- ``as started``: ``jupyter lab`` as ``ui-tests/lab_server.py`` started it
  before: each page asks the server whether JupyterLab needs a build, which
  the server answers by running yarn under node (``jupyterlab.commands``);
- ``no build check``: the same with ``{"buildCheck": false,
  "buildAvailable": false}`` in ``labconfig/page_config.json``, as the
  browser tests now start it.

    .venv/bin/python benchmarks/page_load.py [--rounds 3] [--loads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).parents[1] / "ui-tests"))
from lab_server import CHROMIUM, CHROMIUM_ARGS, Lab, running_lab

PANEL_TAB = '.jp-SideBar .lm-TabBar-tab[data-id="dask-observe-panel"]'
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float:
    """CPU-seconds the whole machine has spent busy (all processes)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields) - idle) / CLOCK_TICKS


def with_build_check(lab: Lab) -> None:
    """Undo ``running_lab``'s page_config.json: the server as it was."""
    (lab.home / "config" / "labconfig" / "page_config.json").unlink()
    lab.stop()
    lab.start()


def loads(build_check: bool, n: int, folder: Path) -> list[float]:
    """CPU-seconds of ``n`` page loads (after one to warm the server up)."""
    with running_lab(folder / "store" / "observe.sqlite", folder) as lab:
        if build_check:
            with_build_check(lab)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
            )
            costs = []
            for _ in range(n + 1):
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                page = context.new_page()
                time.sleep(0.5)  # the context's own start, not the load's
                before = busy_seconds()
                page.goto(lab.page_url())
                page.locator(PANEL_TAB).wait_for()
                page.wait_for_timeout(3000)
                costs.append(busy_seconds() - before)
                context.close()
            browser.close()
    return costs[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loads", type=int, default=2, help="measured per round")
    args = parser.parse_args()
    measured: dict[str, list[float]] = {"as started": [], "no build check": []}
    with tempfile.TemporaryDirectory(prefix="page-load-") as tmp:
        for i in range(args.rounds):
            for name in measured:
                folder = Path(tmp) / f"{i}-{name.replace(' ', '-')}"
                folder.mkdir()
                measured[name] += loads(name == "as started", args.loads, folder)
    for name, costs in measured.items():
        print(
            f"{name:>15}: {statistics.mean(costs):.2f} CPU-s a load "
            f"(median {statistics.median(costs):.2f}, {len(costs)} loads: "
            f"{json.dumps([round(c, 2) for c in costs])})"
        )


if __name__ == "__main__":
    main()

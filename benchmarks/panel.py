"""Does the side panel keep the page responsive while logs pour in?

A real JupyterLab in Debian's Chromium shows the panel following a recorded
2-worker LocalCluster. A worker logs at a steady RATE lines/s for SECONDS; the
browser's long-task API (PerformanceObserver, type "longtask": main-thread tasks
over 50 ms) records every stall meanwhile. The same is measured with the cluster
quiet, side by side, as the baseline. Target: no task over 100 ms at 2,000 lines/s.

Then, over the lines the flood left in the view (up to the buffer's 100,000): the
mouse wheel scrolls from the newest line to the oldest while the page counts its
animation frames, and a text filter is typed and cleared, each time until the
view shows the result. Both report long tasks the same way.

    .venv/bin/python benchmarks/panel.py [--rate 2000] [--seconds 20] [--buffer N]
        [--no-scroll]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import dask.config
from distributed import Client, LocalCluster
from playwright.sync_api import Page, sync_playwright

import dask_observe

sys.path.insert(0, str(Path(__file__).parents[1] / "ui-tests"))
from lab_server import CHROMIUM, CHROMIUM_ARGS, running_lab

PANEL_TAB = '.jp-SideBar .lm-TabBar-tab[data-id="dask-observe-panel"]'

#: Collects the main thread's long tasks from the page's first moment.
OBSERVE_LONG_TASKS = """
window.__longTasks = [];
new PerformanceObserver(list => {
  for (const entry of list.getEntries()) {
    window.__longTasks.push([entry.startTime, entry.duration]);
  }
}).observe({ type: 'longtask', buffered: true });
"""


def pour(rate: int, seconds: float) -> int:
    """Log ``rate`` lines a second for ``seconds``, in 10 ms steps; runs on a worker."""
    log = logging.getLogger("bench.pour")
    start, sent = time.monotonic(), 0
    while (elapsed := time.monotonic() - start) < seconds:
        due = int(elapsed * rate)
        for i in range(sent, due):
            log.warning("line %07d of a steady stream of log output", i)
        sent = max(sent, due)
        time.sleep(0.01)
    return sent


def long_tasks_since(page: Page, t0: float) -> dict[str, Any]:
    """The page's main-thread tasks over 50 ms since ``t0`` (performance.now())."""
    tasks = page.evaluate(f"window.__longTasks.filter(t => t[0] >= {t0})")
    durations = sorted(d for _, d in tasks)
    return {
        "long tasks": len(durations),
        "longest ms": round(durations[-1], 1) if durations else 0.0,
        "total long ms": round(sum(durations), 1),
    }


def measure(page: Page, client: Client, rate: int, seconds: float) -> dict[str, Any]:
    """Long tasks of the page while the cluster logs ``rate`` lines/s."""
    t0: float = page.evaluate("performance.now()")
    sent = 0
    if rate:
        sent = client.submit(pour, rate, seconds, pure=False).result()
    else:
        time.sleep(seconds)
    time.sleep(1.0)  # the last batches arrive and draw
    shown = page.locator(".jp-DaskObserve-logs-count").text_content() or ""
    return {
        "rate": rate,
        "lines sent": sent,
        "panel count": shown,
        **long_tasks_since(page, t0),
    }


#: Counts animation frames (the page's drawn frames) from the moment it is run.
COUNT_FRAMES = """
window.__frames = 0;
const tick = () => { window.__frames += 1; requestAnimationFrame(tick); };
requestAnimationFrame(tick);
"""

LOGS = ".jp-DaskObserve-logs"


def scroll(page: Page) -> dict[str, Any]:
    """Wheel from the newest line to the oldest; frames drawn and rows in the DOM."""
    viewport = page.locator(f"{LOGS}-viewport")
    box = viewport.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.evaluate(COUNT_FRAMES)
    t0: float = page.evaluate("performance.now()")
    start, frames0 = time.monotonic(), page.evaluate("window.__frames")
    steps, most_rows = 0, 0
    # Big wheel steps: the whole buffer in a few hundred events, every one drawn.
    while page.evaluate(f"document.querySelector('{LOGS}-viewport').scrollTop") > 0:
        page.mouse.wheel(0, -20_000)
        steps += 1
        if steps % 25 == 0:
            most_rows = max(most_rows, viewport.locator(".jp-DaskObserve-log").count())
    seconds = time.monotonic() - start
    frames = page.evaluate("window.__frames") - frames0
    first = viewport.locator(".jp-DaskObserve-log").first.get_attribute("data-seq")
    return {
        "phase": "scroll to the oldest",
        "wheel steps": steps,
        "seconds": round(seconds, 2),
        "frames/s": round(frames / seconds, 1),
        "rows in DOM (max)": most_rows,
        "oldest shown seq": first,
        **long_tasks_since(page, t0),
    }


def refilter(page: Page, text: str) -> dict[str, Any]:
    """Type ``text`` into the filter (or clear it); time until the count shows it."""
    count = page.locator(f"{LOGS}-count")
    before = count.text_content()
    t0: float = page.evaluate("performance.now()")
    page.locator(f"{LOGS}-filter").fill(text)
    page.wait_for_function(
        "([el, before]) => el.textContent !== before"
        " && el.dataset.filtering === 'false'",
        arg=[count.element_handle(), before],
    )
    took: float = page.evaluate("performance.now()") - t0
    return {
        "phase": f"filter {text!r}" if text else "clear the filter",
        "ms until shown": round(took, 1),
        "panel count": count.text_content(),
        **long_tasks_since(page, t0),
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    columns = list(dict.fromkeys(c for row in rows for c in row))
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(str(row.get(c, "")) for c in columns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--buffer", type=int, default=100_000, help="the panel's log buffer (lines)"
    )
    parser.add_argument(
        "--no-scroll",
        action="store_true",
        help="skip the scroll (a million lines take thousands of wheel steps)",
    )
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="dobs-panel-bench-"))
    store = folder / "observe.sqlite"
    dask.config.set({"observe.store": str(store)})
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, dashboard_address=":0", processes=True
        ) as cluster,
        Client(cluster) as client,
        running_lab(store, folder) as lab,
        sync_playwright() as playwright,
        dask_observe.record("panel benchmark", client=client),
    ):
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.add_init_script(OBSERVE_LONG_TASKS)
        lab.set_user_settings(
            "dask-observe:plugin", f'{{"logBufferSize": {args.buffer}}}'
        )
        page.goto(lab.page_url())
        page.locator(PANEL_TAB).click()
        state = page.locator(".jp-DaskObserve-logs-state")
        page.wait_for_function(
            "el => el.dataset.state === 'open'", arg=state.element_handle()
        )
        time.sleep(3)  # the page settles: JupyterLab's own start-up tasks
        # The observer sees stalls here: a 150 ms busy loop must show as one.
        t0 = page.evaluate("performance.now()")
        page.evaluate(
            "setTimeout(() => { const t = performance.now();"
            " while (performance.now() - t < 150) {} }, 0)"
        )
        time.sleep(0.5)
        seen = page.evaluate(f"window.__longTasks.filter(t => t[0] >= {t0})")
        assert any(d >= 150 for _, d in seen), f"long-task API saw no stall: {seen}"
        rows = [measure(page, client, r, args.seconds) for r in (0, args.rate, 0)]
        after = [] if args.no_scroll else [scroll(page)]
        after += [refilter(page, "line 012"), refilter(page, "")]
        browser.close()
    print_table(rows)
    print()
    print_table(after)


if __name__ == "__main__":
    main()

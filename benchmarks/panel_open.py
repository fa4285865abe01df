"""The side panel over a store a year of work fills: how long does opening it,
and switching between runs, keep the page's main thread busy?

The store holds RUNS finished runs (a few names, as a team's jobs), the newest
with LINES log lines and one 1,000 lines long. A real JupyterLab in Debian's
Chromium: each step's main-thread work is Chromium's own count of its task
time (CDP ``Performance.getMetrics``, ``TaskDuration``), read when the step's
result shows and again once the page settles; long tasks (over 50 ms) by a
PerformanceObserver.

Steps: open the panel until the runs list shows (with no live cluster, it
follows the newest run's last lines meanwhile; ``--live``: the cluster's
newest lines); replay the newest run until its last line shows; switch to the
1,000-line run; switch back. Target (issue 68): each under 200 ms of
main-thread work.

    .venv/bin/python benchmarks/panel_open.py [--runs 1000] [--lines 100000] [--live]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from playwright.sync_api import CDPSession, Page, sync_playwright

from dask_observe.store import BaseStore

sys.path.insert(0, str(Path(__file__).parents[1] / "ui-tests"))
from lab_server import CHROMIUM, CHROMIUM_ARGS, running_lab
from panel import OBSERVE_LONG_TASKS  # benchmarks/panel.py, beside this one

PANEL_TAB = '.jp-SideBar .lm-TabBar-tab[data-id="dask-observe-panel"]'
CLUSTER = "tcp://10.0.0.1:8786"
JOBS = ("nightly etl", "features", "report", "backfill", "train")
WORKERS = [f"tcp://10.0.0.{i}:40000" for i in range(2, 6)]
#: The runs list's status once it drew: "1,000 runs, the newest 25 shown".
LISTED = r"^[\d,]+ runs"
#: Resolves once an element matching a selector has text matching a pattern,
#: looked for at each change of the page (a MutationObserver). Playwright's
#: own waits query the page at every frame, and their queries counted as the
#: panel's main-thread work.
WAIT_TEXT = """([selector, pattern, timeout]) => new Promise((resolve, reject) => {
  const re = new RegExp(pattern);
  const found = () => Array.from(document.querySelectorAll(selector))
    .some(e => re.test(e.textContent ?? ''));
  if (found()) { resolve(true); return; }
  const observer = new MutationObserver(() => {
    if (found()) { observer.disconnect(); clearTimeout(timer); resolve(true); }
  });
  const timer = setTimeout(() => {
    observer.disconnect();
    reject(new Error(`no ${selector} says ${pattern}`));
  }, timeout);
  const all = {childList: true, subtree: true, characterData: true};
  observer.observe(document.body, all);
})"""


def fill(path: Path, runs: int, lines: int, live: bool) -> tuple[int, int]:
    """The store: ``runs`` finished runs, the newest with ``lines`` lines and
    the one before with 1,000. Their ids (newest, the 1,000-line one). The
    cluster closed, unless ``live``: a registered cluster counts as live for
    15 s (CLUSTER_ALIVE_S), and the panel then follows its newest 20,000
    lines rather than the newest run's last ones; which of the two a run
    measured hung on how long JupyterLab took to start."""
    with BaseStore(path) as store:
        store.telemetry.register_cluster(CLUSTER, None)
        ids = []
        for i in range(runs):
            run_id = store.create_run(JOBS[i % len(JOBS)], cluster=CLUSTER)
            n = lines if i == runs - 1 else 1_000 if i == runs - 2 else 0
            now = time.time()
            for start in range(0, n, 50_000):
                store.telemetry.append(
                    CLUSTER,
                    [
                        ("log", now + j * 1e-6, 20, "worker", WORKERS[j % 4],
                         "distributed.worker", f"line {j:07d} of run {run_id}")
                        for j in range(start, min(n, start + 50_000))
                    ],
                )  # fmt: skip
            store.end_run(run_id, "finished")
            ids.append(run_id)
        if not live:
            store.telemetry.close_cluster(CLUSTER)
    return ids[-1], ids[-2]


@contextmanager
def kept_live(path: Path, live: bool) -> Iterator[None]:
    """With ``live``, the cluster touched every 5 s meanwhile, as a recorder
    touches the clusters it watches."""
    stop = threading.Event()

    def touch() -> None:
        with BaseStore(path) as store:
            while not stop.wait(5.0):
                store.telemetry.touch_cluster(CLUSTER)

    toucher = threading.Thread(target=touch, daemon=True)
    if live:
        toucher.start()
    try:
        yield
    finally:
        stop.set()
        if live:
            toucher.join()


def task_seconds(cdp: CDPSession) -> float:
    metrics = cdp.send("Performance.getMetrics")["metrics"]
    return float(next(m["value"] for m in metrics if m["name"] == "TaskDuration"))


def step(
    page: Page, cdp: CDPSession, name: str, act: Any, shown: Any
) -> dict[str, Any]:
    """Do ``act``, wait for ``shown``; main-thread ms until then, and until the
    page settled (1 s more: drawing after the result, the next poll's work)."""
    before = task_seconds(cdp)
    t0: float = page.evaluate("performance.now()")
    started = time.monotonic()
    act()
    shown()
    wall = time.monotonic() - started
    until_shown = task_seconds(cdp) - before
    page.wait_for_timeout(1000)
    settled = task_seconds(cdp) - before
    tasks = page.evaluate(f"window.__longTasks.filter(t => t[0] >= {t0})")
    durations = sorted(d for _, d in tasks)
    return {
        "step": name,
        "main thread ms (shown)": round(1000 * until_shown),
        "main thread ms (settled)": round(1000 * settled),
        "wall ms": round(1000 * wall),
        "long tasks": len(durations),
        "longest ms": round(durations[-1]) if durations else 0,
    }


def self_times(profile: dict[str, Any], top: int = 25) -> list[tuple[float, str]]:
    """A CDP CPU profile's self time (ms) by function and script, largest
    first: where a step's main-thread work went."""
    nodes = {node["id"]: node for node in profile["nodes"]}
    sampled: dict[int, float] = {}
    stamps = profile.get("timeDeltas") or []
    for node_id, delta in zip(profile.get("samples") or [], stamps, strict=False):
        sampled[node_id] = sampled.get(node_id, 0.0) + delta / 1000
    by_name: dict[str, float] = {}
    for node_id, ms in sampled.items():
        frame = nodes[node_id]["callFrame"]
        script = frame["url"].rsplit("/", 1)[-1] or "(native)"
        function = frame["functionName"] or "(anonymous)"
        name = f"{function} {script}:{frame['lineNumber']}"
        by_name[name] = by_name.get(name, 0.0) + ms
    return sorted(((ms, name) for name, ms in by_name.items()), reverse=True)[:top]


def timeline(trace: bytes, top: int = 12) -> list[tuple[float, str]]:
    """Chromium's timeline of a step: the renderer main thread's time (ms) by
    kind of work (script, style, layout, paint, parsing...), largest first.
    Only the outermost events count, so nothing twice."""
    import json

    events = json.loads(trace)
    events = events.get("traceEvents", events) if isinstance(events, dict) else events
    main = {
        (e["pid"], e["tid"])
        for e in events
        if e.get("name") == "thread_name"
        and e.get("args", {}).get("name") == "CrRendererMain"
    }
    spans = sorted(
        (e for e in events if (e.get("pid"), e.get("tid")) in main
         and e.get("ph") == "X" and "dur" in e),
        key=lambda e: (e["ts"], -e["dur"]),
    )  # fmt: skip
    by_kind: dict[str, float] = {}
    outer_end = -1.0
    for e in spans:  # the outermost events only: time inside one counts once
        if e["ts"] >= outer_end:
            by_kind[e["name"]] = by_kind.get(e["name"], 0.0) + e["dur"] / 1000
            outer_end = e["ts"] + e["dur"]
    return sorted(((ms, kind) for kind, ms in by_kind.items()), reverse=True)[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument(
        "--profile",
        action="store_true",
        help="print where opening the panel spent its main-thread time "
        "(Chromium's sampling profiler; its own cost inflates the step)",
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="open while the cluster is live (touched every few seconds, as a "
        "recorder would): the panel follows its newest lines",
    )
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="dobs-panel-open-"))
    store = folder / "observe.sqlite"
    made = time.monotonic()
    newest, small = fill(store, args.runs, args.lines, args.live)
    print(f"store: {args.runs:,} runs, {args.lines:,} lines "
          f"({time.monotonic() - made:.1f} s to write)")  # fmt: skip
    with (
        kept_live(store, args.live),
        running_lab(store, folder) as lab,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.add_init_script(OBSERVE_LONG_TASKS)
        cdp = page.context.new_cdp_session(page)
        cdp.send("Performance.enable")
        page.goto(lab.page_url())
        page.locator(PANEL_TAB).wait_for()
        page.wait_for_timeout(3000)  # JupyterLab's own start-up tasks
        if page.locator("#dask-observe-panel").is_visible():
            page.locator(PANEL_TAB).click()  # restored open: closed first
            page.wait_for_timeout(1000)
        status = page.locator(".jp-DaskObserve-runs-status")
        count = page.locator("#dask-observe-panel .jp-DaskObserve-logs-count")

        def says(selector: str, pattern: str) -> Any:
            return lambda: page.evaluate(WAIT_TEXT, [selector, pattern, 60_000])

        def replay(run_id: int) -> Any:
            card = page.locator(f'.jp-DaskObserve-run[data-run-id="{run_id}"]')
            return lambda: card.locator(".jp-DaskObserve-run-replay").click()

        def lines_shown(run_id: int, last: int) -> Any:
            """Until the run's last line is in the list (the panel replays a
            run from near its end; its tab, every line)."""
            return says(
                "#dask-observe-panel .jp-DaskObserve-log-message",
                re.escape(f"line {last - 1:07d} of run {run_id}"),
            )

        if args.profile:
            cdp.send("Profiler.enable")
            cdp.send("Profiler.setSamplingInterval", {"interval": 200})
            cdp.send("Profiler.start")
            browser.start_tracing(page=page, categories=["devtools.timeline"])
        rows = [
            step(page, cdp, "open the panel", page.locator(PANEL_TAB).click,
                 says(".jp-DaskObserve-runs-status", LISTED)),
        ]  # fmt: skip
        if args.profile:
            print("opening the panel, the main thread's time by kind (ms):")
            for ms, kind in timeline(browser.stop_tracing()):
                print(f"  {ms:7.1f}  {kind}")
            profiled = cdp.send("Profiler.stop")["profile"]
            print("opening the panel, self time by function (ms):")
            for ms, name in self_times(profiled):
                print(f"  {ms:7.1f}  {name}")
        rows += [
            step(page, cdp, f"replay run {newest} ({args.lines:,} lines)",
                 replay(newest), lines_shown(newest, args.lines)),
            step(page, cdp, f"switch to run {small} (1,000 lines)",
                 replay(small), lines_shown(small, 1_000)),
            step(page, cdp, f"switch back to run {newest}",
                 replay(newest), lines_shown(newest, args.lines)),
        ]  # fmt: skip
        listed = status.text_content()
        kept = count.text_content()
        browser.close()
    print(f"the runs list says: {listed}; the replayed run's logs: {kept}")
    columns = list(rows[0])
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(str(row[c]) for c in columns))


if __name__ == "__main__":
    main()

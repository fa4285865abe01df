"""Reports of runs recorded on a real LocalCluster: what a user sees in them."""

from __future__ import annotations

import base64
import json
import logging
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import dask
import numpy as np
import pytest
from distributed import Client, wait

import dask_observe
from dask_observe.analysis import figures as run_figures
from dask_observe.report import taskstream as stream_chart

from .conftest import wait_until
from .tasks import spin

# Fine metrics and profiles of CPU-bound tasks: in worker processes, whose
# GIL the test process does not share (conftest.cluster).
pytestmark = pytest.mark.worker_processes


def slow(x: int) -> int:
    time.sleep(0.02)
    return x


def shout(x: int) -> int:
    logging.getLogger("distributed.worker").warning(
        "<script>alert(1)</script> shouted %d", x
    )
    return x


def boom(x: int) -> int:
    raise ValueError(f"<b>bad</b> input {x}")


def inline_images(html: str) -> str:
    """The ``<img>`` tags of a report, each with its decoded SVG after it."""
    found = re.findall(r'<img src="data:image/svg\+xml;base64,([^"]+)"([^>]*)>', html)
    return "".join(
        f"<img{rest}>{base64.b64decode(data).decode()}" for data, rest in found
    )


def figures(html: str) -> dict[str, str]:
    """The headline figures, as the report marks them for machines."""
    return dict(re.findall(r'data-figure="(\w+)" data-value="([^"]*)"', html))


@pytest.fixture
def failed_run(client: Client, store_path: Path) -> dask_observe.Run:
    with (
        pytest.raises(ValueError, match="bad"),
        dask_observe.record("mixed", client=client) as run,
    ):
        client.gather(client.map(slow, range(40)))
        client.submit(shout, 1).result()
        client.submit(boom, 1).result()
    return run


def test_the_report_shows_the_runs_figures_and_needs_nothing_from_outside(
    failed_run: dask_observe.Run, tmp_path: Path
) -> None:
    report = failed_run.report()
    summary = failed_run.summary()
    assert summary["status"] == "failed"
    shown = figures(report.inline_html)
    assert int(shown["n_tasks"]) == summary["n_tasks"] == 42
    assert int(shown["n_failed"]) == summary["n_failed"] == 1
    assert float(shown["duration_s"]) == pytest.approx(summary["duration_s"], abs=1e-3)
    assert int(shown["workers"]) == 2 and int(shown["threads"]) == 2
    assert float(shown["compute_s"]) >= 40 * 0.02
    assert int(shown["n_flags"]) == len(failed_run.flags()) == summary["n_flags"]

    for html in (report.inline_html, report.html):
        # Offline and static: no script, nothing loaded from anywhere (images
        # are data: URIs).
        assert "<script" not in html
        assert not re.search(r"\bhref\s*=|url\(|@import", html)
        sources = re.findall(r'\bsrc="([^"]*)"', html)
        assert all(s.startswith("data:image/svg+xml;base64,") for s in sources)
    # The full report draws its charts inline; the one a notebook keeps has them
    # as images: a task stream and a memory chart per worker and for the cluster.
    assert 'aria-label="task stream"' in report.html
    assert report.html.count('aria-label="memory of ') == 3
    assert 'alt="task stream"' in inline_images(report.inline_html)
    assert inline_images(report.inline_html).count('alt="memory of ') == 3

    inline = report.inline_html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; shouted 1" in inline
    assert 'data-flag="task-errors"' in inline
    # The failure with its exception, escaped, and its worker's last lines.
    failure = inline[inline.index("Failed tasks (1)") :]
    assert "ValueError" in failure and "&lt;b&gt;bad&lt;/b&gt; input 1" in failure
    assert "Compute Failed" in failure
    for prefix in ("slow", "shout", "boom"):
        assert re.search(f"<td[^>]*>{prefix}</td>", inline)
    assert f"%dask_observe report {failed_run.id} -o" in inline

    saved = report.save(tmp_path)
    assert saved == tmp_path / f"run-{failed_run.id}.html"
    page = saved.read_text()
    assert page.startswith("<!DOCTYPE html>") and figures(page) == shown


def test_10000_tiny_tasks_with_profile_and_transfers_report_in_under_300_kb(
    make_client: Callable[..., Client], store_path: Path
) -> None:
    """... and their report, once the run ended, reads what its end stored of
    them rather than their rows (a million rows took 5.5 s)."""
    # Every section a report can have: a task stream of 10,000 tasks (flagged
    # tiny), a profile (crunch) and transfers. Queued tiny tasks cost ~1.8 ms
    # each on 2 cores, ~0.6 ms without queuing; a scheduler reads
    # worker-saturation as it starts, so the cluster is the test's own (set
    # around the suite's running cluster, it changed nothing: 18 s, not 6).
    with dask.config.set({"distributed.scheduler.worker-saturation": float("inf")}):
        client = make_client(n_workers=2, threads_per_worker=1)
    a, b = client.nthreads()
    with (
        # The flag's share of wall time depends on the machine's load (3x
        # slower on a loaded CI machine): not what is tested here.
        dask.config.set({"observe.flags.tiny-tasks.share": 0.05}),
        dask_observe.record("many", client=client) as run,
    ):
        client.gather(client.map(abs, range(-10_000, 0)))
        client.gather(client.map(crunch, [4_000_000] * 2, pure=False))
        moved = client.map(np.ones, [100_000] * 4, workers=[a], pure=False)
        sums = client.map(np.sum, moved, workers=[b], pure=False)
        # Bounded: a worker lost here (once, a SIGSEGV of worker a) leaves the
        # tasks pinned to it unrunnable for good; a hang would take this test
        # process's later tests with it (tests/hung.py).
        wait(sums, timeout=60)
        client.gather(sums)
    report = run.report()
    assert run.summary()["n_tasks"] == 10_010
    assert int(figures(report.inline_html)["n_tasks"]) == 10_010
    inline = inline_images(report.inline_html)
    assert 'aria-label="profile icicle graph"' in inline
    assert 'aria-label="bytes moved between workers"' in inline
    assert len(report.inline_html.encode()) < 300_000
    assert len(report.html.encode()) < 300_000
    flags = run.flags()
    tiny = flags[flags["kind"] == "tiny-tasks"]
    assert len(tiny) == 1 and "x more work" in str(tiny["advice"].iloc[0])

    def report_now() -> str:  # as another process reads it, nothing cached
        with dask_observe.open_store(store_path) as store:
            return store.run(run.id).report().html

    assert report_now() == report.html
    with dask_observe.open_store(store_path) as store:
        stored = store.kept.task_figures(run.id)
        assert stored is not None
        version, kept = stored
        # Drawn from the rows, the report is the same, byte for byte.
        with store._transaction() as conn:
            conn.execute("DELETE FROM task_figures WHERE run_id = ?", (run.id,))
    assert report_now() == report.html
    with dask_observe.open_store(store_path) as store:
        store.kept.set_task_figures(run.id, version, json.dumps(kept))
        with store._transaction() as conn:
            conn.execute(
                "DELETE FROM tasks WHERE seq > (SELECT seq_start FROM runs"
                " WHERE id = ?) AND seq <= (SELECT seq_end FROM runs WHERE id = ?)",
                (run.id, run.id),
            )
        assert store.run(run.id).tasks().empty
    # Without its rows, the report is still whole: it read the stored figures.
    assert report_now() == report.html
    # Stored by another version (whose figures may differ), they are made
    # again from the rows, here none.
    with dask_observe.open_store(store_path) as store:
        store.kept.set_task_figures(run.id, "0.0.1", json.dumps(kept))
    assert "No task ran in this run." in report_now()


#: Twelve prefixes (the most an inline report's legend lists).
STEPS = [
    "load", "clean", "parse", "join", "merge", "split", "count", "rank",
    "score", "sort", "write", "check",
]  # fmt: skip


def test_each_prefix_has_a_colour_of_its_own_and_keeps_it_in_the_next_run(
    client: Client, store_path: Path
) -> None:
    legends = []
    for attempt in range(2):
        with dask_observe.record("steps", client=client) as run:
            client.gather(
                [client.submit(abs, -i, key=f"{step}-{attempt}") for i, step in
                 enumerate(STEPS)]
            )  # fmt: skip
        # The task stream's legend: a swatch (its fill) and a name per prefix.
        legend = re.search(
            r'<svg[^>]*aria-label="legend: [^"]*deserialize".*?</svg>',
            inline_images(run.report().inline_html),
            re.S,
        )
        assert legend is not None
        fills = re.findall(
            r'fill="(#[0-9a-f]{6})"/><text[^>]*>([^<]+)</text>', legend[0], re.I
        )
        legends.append({name: fill for fill, name in fills if name in STEPS})
    first, second = legends
    assert sorted(first) == sorted(STEPS)
    assert len(set(first.values())) == len(STEPS)  # no two alike
    assert second == first


@pytest.mark.timing  # judged against the machine's load
def test_fine_metrics_say_where_the_threads_time_went(
    client: Client, store_path: Path
) -> None:
    with dask_observe.record("split", client=client) as run:
        spins = client.map(spin, [0.3] * 4, key=[f"spin-{i}" for i in range(4)])
        naps = client.map(time.sleep, [0.3] * 4, key=[f"sleep-{i}" for i in range(4)])
        client.gather(spins + naps)
    fine = run.fine_metrics()
    assert list(fine.columns) == ["context", "prefix", "activity", "unit", "value"]
    seconds = fine[(fine["context"] == "execute") & (fine["unit"] == "seconds")]

    def split(prefix: str, activity: str) -> float:
        of = (seconds["prefix"] == prefix) & (seconds["activity"] == activity)
        return float(seconds[of]["value"].sum())

    # Four tasks of each: 1.2 s on the CPU spinning, 1.2 s waiting asleep.
    assert 1.2 <= split("spin", "thread-cpu") < 2.0
    assert 1.2 <= split("sleep", "thread-noncpu") < 2.0
    assert split("sleep", "thread-cpu") < 0.1
    # The report draws the same split, summed over prefixes.
    inline = run.report().inline_html
    shown = figures(inline)
    assert "Where the time went" in inline
    assert float(shown["time_thread_cpu"]) == pytest.approx(
        seconds[seconds["activity"] == "thread-cpu"]["value"].sum(), abs=1e-5
    )


#: JupyterLab's own HTML sanitizer (what renders untrusted notebooks), in node.
SANITIZE = """
const { Sanitizer } = require(process.argv[1]);
let html = '';
process.stdin.on('data', (d) => (html += d));
process.stdin.on('end', () => process.stdout.write(new Sanitizer().sanitize(html)));
"""
SANITIZER = (
    Path(__file__).resolve().parent.parent
    / "node_modules/@jupyterlab/apputils/lib/sanitizer.js"
)


def sanitized(html: str) -> str:
    done = subprocess.run(
        ["node", "-e", SANITIZE, str(SANITIZER)],
        input=html,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


def test_the_report_in_a_notebook_survives_jupyterlabs_sanitizer_whole(
    failed_run: dask_observe.Run,
) -> None:
    inline = failed_run.report().inline_html
    kept = sanitized(inline)
    # Every chart is an image the sanitizer keeps, the same images.
    charts = re.findall(r'<img src="(data:image/svg\+xml;base64,[^"]+)"', inline)
    assert len(charts) >= 6  # stream, legend, time bars, memory legend + charts
    assert re.findall(r'<img src="(data:image/svg\+xml;base64,[^"]+)"', kept) == charts
    # Every inline style survives in full: the layout is what a trusted view has.
    styles = re.findall(r'style="([^"]*)"', inline)
    assert re.findall(r'style="([^"]*)"', kept) == styles
    assert "<style" not in inline and "<svg" not in inline
    # Text reads as text: no task key is repeated into a wall of keys.
    text = re.sub(r"<[^>]+>", " ", kept)
    keys = re.findall(r"\bslow-[0-9a-f]{32}\b", text)
    assert len(keys) <= 5
    assert "&lt;script&gt;alert(1)&lt;/script&gt; shouted 1" in kept
    # Where HTML is not shown at all, text/plain is a short summary, not a dump.
    plain = repr(failed_run.report())
    assert len(plain.splitlines()) <= 8
    assert "42 tasks, 1 failed in" in plain and "peak memory" in plain
    assert "flag task-errors (" in plain
    assert not re.search(r"slow-[0-9a-f]{32}", plain)


def crunch(n: int) -> int:
    """Pure Python arithmetic: the innermost frame a profiler samples."""
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def churn(n: int) -> str:
    """Another pure-Python task function, of strings."""
    text = ""
    for i in range(n):
        text = str(i) + text[:20]
    return text


@pytest.mark.alone  # its shares of CPU-bound tasks
@pytest.mark.timing  # judged against the machine's load
def test_the_profile_names_each_cpu_bound_task_function(
    make_client: Callable[..., Client], store_path: Path
) -> None:
    # A cluster of its own: the session's workers' profiles hold what earlier
    # tests ran, and in the full suite (2 of 4 runs on 2026-11-24, never
    # alone) the task beside the run lost its name to dask's caller there.
    client = make_client(n_workers=2, threads_per_worker=1, processes=True)
    # Two task functions called by dask's task machinery (one caller with two
    # innermost callees). The truth: each spends its CPU time in itself, as
    # much as the workers measured for its prefix (fine performance metrics).
    # Beside them, as on a shared cluster, a task of no run still computes when
    # the run starts: the cluster's whole profile holds it too, and it must not
    # hide the run's own functions there (it did: CI, the whole profile fell
    # back to dask's caller when other work held over a tenth of its samples).
    beside = client.submit(spin, 1.5, pure=False)
    wait_until(lambda: any(client.processing().values()), "the task beside it runs")
    with dask_observe.record("crunching", client=client) as run:
        client.gather(
            client.map(crunch, [8_000_000] * 2, pure=False)
            + client.map(churn, [3_000_000] * 2, pure=False)
        )
    fine = run.fine_metrics()
    execute = fine[(fine["context"] == "execute") & (fine["unit"] == "seconds")]
    cpu = execute[execute["activity"] == "thread-cpu"]
    measured = cpu.groupby("prefix")["value"].sum()
    # A sampler sees a function on the stack while it waits for a core too
    # (thread-noncpu: another process had it): on a loaded host crunch sampled
    # 1.45 s against 1.01 s of CPU. What the task threads spent in the task,
    # CPU or not, bounds it above.
    on_stack = execute[execute["activity"].isin(["thread-cpu", "thread-noncpu"])]
    ran = on_stack.groupby("prefix")["value"].sum()
    profile = run.profile()
    assert list(profile.columns) == [
        "prefix", "function", "filename", "lineno", "self_s", "total_s", "native",
    ]  # fmt: skip
    assert not profile["native"].any()  # recorded without native=True
    assert (profile["self_s"] <= profile["total_s"] + 1e-9).all()
    whole = profile[profile["prefix"] == ""]
    for name in ("crunch", "churn"):
        ours = whole[whole["function"] == name]
        # (What was read, if not: an empty profile means the run's fine metrics
        # held under PROFILE_S of compute when it ended; a missing prefix, that
        # a worker's profile of it came back empty.)
        found = (profile.groupby("prefix").size().to_dict(), measured.to_dict())
        assert len(ours) == 1, found
        assert ours["filename"].iloc[0].endswith("test_report.py")
        # Its self time is there, not in dask's ``__call__`` above it.
        assert ours["self_s"].iloc[0] >= 0.9 * ours["total_s"].iloc[0]
        # As much as the workers measured, within a sampler's reach: distributed
        # samples on the worker's event loop, which waits for the GIL like the
        # task threads, so on a busy machine it samples less often than its
        # interval (CI: churn sampled 1.02 s of 1.72 s). A run's start that
        # held that loop (reading package metadata on it) left none of crunch.
        assert 0.4 * measured[name] <= ours["self_s"].iloc[0], (whole, measured)
        assert ours["self_s"].iloc[0] <= 1.3 * ran[name] + 0.1, (whole, ran)
        # And its prefix's own profile is (nearly) all of it.
        mine = profile[profile["prefix"] == name]
        hottest = mine.sort_values("self_s").iloc[-1]
        assert hottest["function"] == name
        assert hottest["self_s"] >= 0.8 * mine["self_s"].sum()
    beside.result()
    assert "spin" in set(whole["function"]), whole
    report = run.report()
    shown = report.inline_html
    assert "<h4" in shown and "Profile (" in shown
    assert re.search(r"<code>crunch</code></td><td[^>]*>[^<]*test_report\.py:", shown)
    icicle = re.search(
        r'<svg[^>]*aria-label="profile icicle graph".*?</svg>',
        inline_images(shown),
        re.S,
    )
    assert icicle is not None
    # Both functions are boxes of the graph (their names fit in them).
    assert ">crunch</text>" in icicle[0] and ">churn</text>" in icicle[0]
    # Library code by its import path, the standard library by its file's name.
    everything = shown + inline_images(shown)
    assert "site-packages/" not in everything and "/lib/python3." not in everything


def test_data_moved_between_workers_is_told_by_pair_and_type(
    client: Client, store_path: Path
) -> None:
    # The truth: 4 arrays of 8 MB made on one worker, summed on the other.
    a, b = client.nthreads()
    with dask_observe.record("moving", client=client) as run:
        arrays = client.map(np.ones, [1_000_000] * 4, workers=[a], pure=False)
        client.gather(client.map(np.sum, arrays, workers=[b], pure=False))
    transfers = run.transfers()
    assert list(transfers.columns) == [
        "time", "worker", "peer", "type", "bytes", "seconds", "count", "keys",
        "bandwidth",
    ]  # fmt: skip
    assert set(zip(transfers["peer"], transfers["worker"], strict=True)) == {(a, b)}
    assert set(transfers["type"]) == {"ndarray"}
    assert transfers["keys"].sum() == 4
    assert transfers["bytes"].sum() >= 4 * 8_000_000
    assert (transfers["bandwidth"] > 0).all()
    shown = run.report().inline_html
    assert "Transfers between workers (30.52 MiB in" in shown
    assert 'alt="bytes moved between workers"' in shown
    assert re.search(r"<td[^>]*>ndarray</td><td[^>]*>30\.52 MiB</td>", shown)
    # The task stream draws each wait for the data before its task: a
    # rectangle a transfer, as a large run's binned stream counts them.
    stream = inline_images(shown).split('aria-label="task stream"')[1]
    assert stream.count("<title>transfer</title>") >= 1
    table = run_figures.task_table(run, run.started)
    drawn = stream_chart._few_segments(table)
    assert drawn == list(stream_chart._segments(table).itertuples(index=False))
    assert sum(category == "transfer" for _, category, _, _ in drawn) >= 1


def test_a_task_key_with_a_control_character_leaves_every_chart_an_image(
    client: Client, store_path: Path
) -> None:
    """XML forbids U+0001 even as a reference: such a key made the task
    stream's SVG unparsable, a broken image in the report."""
    import xml.etree.ElementTree as ET

    with dask_observe.record("odd keys", client=client) as run:
        client.submit(abs, -1, key="bad\x01key-1").result()
        client.submit(abs, -2, key="fine-key-2").result()
    inline = run.report().inline_html  # what the notebook keeps: images
    charts = re.findall(r'<img src="data:image/svg\+xml;base64,([^"]+)"', inline)
    assert charts
    for chart in charts:
        ET.fromstring(base64.b64decode(chart))  # raises on an unparsable one


def test_a_report_leads_with_the_answer_and_folds_repeated_cards(
    tmp_path: Path,
) -> None:
    """An out-of-memory run listed four near-identical memory-restart cards and
    two memory-pressure ones before killed-worker, which is the answer."""
    from dask_observe.diagnose import Flag

    from .conftest import dask_observe_cli
    from .synthetic import SyntheticRun

    def restart(i: int) -> Flag:
        worker = f"tcp://127.0.0.1:{40000 + i}"
        return Flag(
            "memory-restart", "error", 1.0 + i, worker,
            f"Worker {worker} exceeded 95% of its memory limit (RSS {900 + i} MiB): "
            "its nanny restarted it.", "Give workers more memory.",
            [{"time": 1.0 + i, "worker": worker, "text": f"restart {i}"}],
        )  # fmt: skip

    flags = [
        *(restart(i) for i in range(4)),
        Flag("memory-pressure", "warning", 0.5, "tcp://127.0.0.1:40000",
             "Worker tcp://127.0.0.1:40000 paused at 80% memory.", "Less data."),
        Flag("memory-pressure", "warning", 0.6, "tcp://127.0.0.1:40001",
             "Worker tcp://127.0.0.1:40001 paused at 81% memory.", "Less data."),
        Flag("killed-worker", "error", 6.0, None,
             "Task 'grow' failed with KilledWorker: its workers died for memory.",
             "Process less data per task."),
    ]  # fmt: skip
    path = tmp_path / "observe.sqlite"
    with dask_observe.Store(path) as store:
        run = SyntheticRun(store, "oom").tasks(2, 0.1).end(7.0)
        run.keep_judged_flags(flags)
        html = store.run(run.id).report().html
    told = re.findall(r'data-flag="([a-z-]+)"', html)
    assert told == ["killed-worker", "memory-restart", "memory-pressure"]
    assert "Flags (7)" in html  # every flag counted, repeats folded
    assert "its nanny restarted it. (4 like it, on 4 workers)" in html
    assert "paused at 80% memory. (2 like it, on 2 workers)" in html
    for i in range(4):
        assert f"restart {i}" in html  # each card's evidence kept
    lines = dask_observe_cli(path, "flags", str(run.id)).stdout
    kinds = [k for k in ("killed-worker", "memory-restart", "memory-pressure")]
    assert sorted(kinds, key=lines.index) == kinds


def test_each_rectangle_of_the_task_stream_names_its_own_task(tmp_path: Path) -> None:
    """A task that erred before it ran (a dependent of a failed one) has no
    times and is drawn nowhere; the tasks after it kept their own names (they
    took their neighbours')."""
    from dask_observe.report.svg import LABEL_WIDTH

    from .synthetic import SPAN, SyntheticRun

    with dask_observe.Store(tmp_path / "observe.sqlite") as store:
        written = SyntheticRun(store, "stream")
        written.task(0.0, 1.0, "load", key="load-0")
        start = written.start
        written.records.append(
            ("task", start + 1.0, "never-ran", "sum", SPAN, None, None, None, None,
             "erred", 0, 0.0, 0.0, 0.0, 0.0, 0.0, "ValueError", None)
        )  # fmt: skip
        written.task(2.0, 1.0, "load", key="load-1")
        written.task(4.0, 2.0, "load", key="load-2")
        run = written.end(7.0)
        html = store.run(run.id).report().html
    chart = html.split('aria-label="task stream"')[1].split("</svg>")[0]
    drawn = re.findall(
        r'<rect x="([\d.]+)" y="\d+" width="([\d.]+)"[^>]*><title>([^<]*)</title>',
        chart,
    )
    named = {title.split(" (")[0]: float(x) for x, _, title in drawn if "(" in title}
    assert set(named) == {"load-0", "load-1", "load-2"}
    # Each name on its own task's rectangle: in the order they started.
    assert named["load-0"] < named["load-1"] < named["load-2"]
    assert named["load-0"] >= LABEL_WIDTH


def test_every_worker_that_died_has_a_memory_chart(tmp_path: Path) -> None:
    """A worker killed before its first heartbeat has no memory series of the
    scheduler's: only its own fast samples, or nothing. It is the worker a
    reader of a memory death looks for; it has a chart (or says it has no
    reading), beside the workers the heartbeats measured."""
    from dask_observe.report.svg import short_address

    from .synthetic import A, SyntheticRun

    climbed, silent = "tcp://10.0.0.3:4001", "tcp://10.0.0.4:4001"
    with dask_observe.Store(tmp_path / "observe.sqlite") as store:
        written = SyntheticRun(store, "memory death").tasks(2, 0.5)
        for t in (0.5, 1.5, 2.5):
            written.metrics(t, A, memory_managed=2**20, memory_unmanaged=2**20,
                            memory_spilled=0, memory_limit=2**30)  # fmt: skip
        for t, rss in ((0.2, 300 * 2**20), (0.4, 900 * 2**20)):
            written.metrics(t, climbed, memory_rss=rss)
        written.event(0.5, "worker-removed", climbed, stimulus_id="killed")
        written.event(0.6, "worker-removed", silent, stimulus_id="killed")
        run = written.end(3.0)
        html = store.run(run.id).report().html
    for worker in (A, climbed, silent):
        assert f'aria-label="memory of {short_address(worker)}"' in html, worker
    assert f"{short_address(climbed)}: peak 900.00 MiB (left the cluster)" in html
    assert f"{short_address(silent)}: no memory reading (left the cluster)" in html


def test_a_stopped_runs_picture_shows_a_task_no_heartbeat_timed(
    tmp_path: Path,
) -> None:
    """On a loaded host no heartbeat told the scheduler how long the one
    stuck task had run (elapsed None), and the report's picture of where the
    run stood left the task out, its stack and native frames with it (a CI
    run). The truth: the task, its worker's word of when it began (3 s
    before the stop), its stack and what py-spy read beneath it."""
    from .synthetic import A, SyntheticRun

    with dask_observe.Store(tmp_path / "observe.sqlite") as store:
        written = SyntheticRun(store, "stuck")
        key = "sleep_in_c-1"
        frames = [["/home/me/work.py", 7, "sleep_in_c", "libc.sleep(n)", False]]
        written.event(1.5, "task-running", A, key=key, since=written.start + 1.0)
        written.event(2.0, "task-stack", A, key=key, prefix="sleep_in_c",
                      thread=1, frames=frames)  # fmt: skip
        written.event(2.1, "task-native", A, key=key,
                      native=["clock_nanosleep (libc.so.6)"])  # fmt: skip
        stopped = {
            "worker": A, "status": "running", "managed": 0, "unmanaged": 2**20,
            "limit": 2**30, "n_processing": 1,
            "processing": [{"key": key, "prefix": "sleep_in_c", "elapsed": None}],
        }  # fmt: skip
        written.event(4.0, "run-stopped", None, span=written.span,
                      workers=[stopped], n_workers=1, stalled_s=3.0)  # fmt: skip
        html = written.end(4.0).report().html
    assert f"<b>{key}</b> (sleep_in_c) on {A}, running 3.00 s:" in html
    assert "<b>  File &quot;/home/me/work.py&quot;, line 7, in sleep_in_c" in html
    assert "in compiled code, beneath:" in html
    assert "clock_nanosleep (libc.so.6)" in html


@pytest.mark.parametrize(
    ("idle", "expected"),
    [
        (8.0, {"still running at the end": 3.5, "idle or other spans": 4.5}),
        # No heartbeat carried distributed's metrics within the run (a
        # loaded host, a short hang): not nowhere (the demo's hang read {}).
        (None, {"still running at the end": 3.5}),
    ],
)
def test_a_task_running_at_the_end_holds_its_thread_by_its_workers_word(
    tmp_path: Path, idle: float | None, expected: dict[str, float]
) -> None:
    """The scheduler knows how long a running task has run only from its
    worker's last heartbeat, none of which may have come on a loaded host;
    the worker said itself when the task started (``task-running``). Its
    thread was that task's, not idle, for the 3.5 s it ran, whether
    distributed counted them idle or not at all."""
    from .synthetic import A, SyntheticRun

    with dask_observe.Store(tmp_path / "observe.sqlite") as store:
        written = SyntheticRun(store, "hang")
        key = "wait_forever-1"
        stopped = {
            "worker": A,
            "processing": [{"key": key, "prefix": "wait_forever", "elapsed": None}],
        }
        written.event(0.5 + 1.0, "task-running", A, key=key, since=written.start + 0.5)
        written.event(4.0, "run-stopped", None, workers=[stopped])
        if idle is not None:
            written.meter("execute", "N/A", "idle or other spans", "seconds", idle)
        run = written.end(4.0)
        split = run_figures.time_split(run)
    assert split == expected

"""A run out into the ecosystem: an OpenTelemetry collector (a real OTLP/HTTP
receiver that decodes what arrives with opentelemetry-proto), a Chrome trace
as Perfetto reads it, Parquet as pandas reads it."""

from __future__ import annotations

import itertools
import json
import logging
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import dask.config
import pandas as pd
import psutil
import pytest
from distributed import Client

import dask_observe
from dask_observe.api import Run
from dask_observe.store import BaseStore

from .conftest import DASK_OBSERVE, dask_observe_cli, subprocess_env, wait_until
from .otlp import Collector, attributes_of
from .synthetic import SyntheticRun
from .tasks import say


def recorded(client: Client, name: str, n: int = 6) -> tuple[Run, list[str]]:
    lines = [f"{name} line {i} {uuid.uuid4().hex}" for i in range(n)]
    with dask_observe.record(name, client=client) as run:
        client.gather(client.map(say, lines))
    return run, lines


def test_a_finished_run_goes_to_a_collector_as_logs_metrics_and_task_spans(
    client: Client, store_path: Path, collector: Collector
) -> None:
    run, lines = recorded(client, "to-otel")
    done = dask_observe_cli(store_path, "export", str(run.id), "--otlp", collector.url)
    assert done.returncode == 0, done.stderr
    assert f"to {collector.url}" in done.stdout and "not taken" not in done.stdout

    # Every line, as a warning of its logger, from its worker.
    records = collector.log_records()
    ours = {r.body.string_value: (resource, r) for resource, r in records}
    assert set(lines) <= set(ours)
    resource, record = ours[lines[0]]
    assert resource["service.name"] == "dask"
    assert resource["dask_observe.api.name"] == "to-otel"
    assert record.severity_text == "WARNING" and record.severity_number == 13
    attributes = attributes_of(record.attributes)
    assert attributes["dask.process.kind"] == "worker"
    assert attributes["dask.worker.address"] in client.nthreads()
    # The task that said it, as the store has it.
    (task,) = run.logs(contains=lines[0])["task"]
    assert str(task).startswith("say-")
    assert attributes["dask.task.key"] == task
    assert len(records) == len(run.logs())

    # A span per task under the run's root span, the key and phases on it.
    spans = collector.spans()
    (root,) = [s for s in spans if s.name == "run to-otel"]
    tasks = [s for s in spans if s.parent_span_id == root.span_id]
    assert len(tasks) == len(run.tasks()) == len(lines)
    keys = {attributes_of(s.attributes)["dask.task.key"] for s in tasks}
    assert keys == set(run.tasks()["key"])
    assert all(s.trace_id == root.trace_id for s in tasks)
    assert all(root.start_time_unix_nano <= s.start_time_unix_nano for s in tasks)

    # The workers' memory as gauges, one series per worker.
    memory = collector.gauges()["dask.memory_process"]
    workers = {attributes_of(p.attributes)["dask.worker.address"] for p in memory}
    assert workers == set(client.nthreads())
    assert all(p.as_double > 0 for p in memory)


def test_live_export_delivers_a_workers_line_while_the_run_goes_on(
    client: Client, store_path: Path, collector: Collector
) -> None:
    # A cell recorded before the endpoint was set: its recorder lingers for
    # the next run, which must still export as configured then.
    recorded(client, "before the endpoint", n=1)
    line = f"live {uuid.uuid4().hex}"
    arrived_at = None
    with (
        dask.config.set(
            {
                "observe.export.otlp.endpoint": collector.url,
                "observe.export.otlp.interval": "200ms",
            }
        ),  # fmt: skip
        dask_observe.record("live", client=client) as run,
    ):
        said_at = time.monotonic()
        assert client.submit(say, line).result() == line
        deadline = said_at + 10
        while time.monotonic() < deadline and arrived_at is None:
            bodies = {r.body.string_value for _, r in collector.log_records()}
            if line in bodies:
                arrived_at = time.monotonic()
            time.sleep(0.05)
    assert arrived_at is not None, "the line never reached the collector"
    assert arrived_at - said_at < 5
    # When the run ends, its trace is closed: the root span and the task's span.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        spans = collector.spans()
        roots = [s for s in spans if s.name == "run live"]
        if roots:
            break
        time.sleep(0.1)
    (root,) = roots
    assert attributes_of(root.attributes)["dask_observe.api.id"] == run.id
    assert any(s.name == "say" and s.parent_span_id == root.span_id for s in spans)


def exporting_processes() -> set[int]:
    found = set()
    for p in psutil.Process().children():
        try:
            if "dask_observe.export.live" in " ".join(p.cmdline()):
                found.add(p.pid)
        except psutil.Error:  # gone, or exited and not yet waited for
            continue
    return found


def test_live_export_sends_from_a_process_of_its_own_that_ends_with_it(
    collector: Collector,
) -> None:
    from dask_observe.export.live import LiveExport

    before = exporting_processes()  # (recorders of earlier tests linger)
    export = LiveExport(collector.url, "tcp://nowhere:8786", interval_s=0.1)
    export.begin_run(7, "apart", None, time.time() - 1)
    now = time.time()
    export.offer([("log", now, 30, "worker", "tcp://w:1", "user.etl", "from afar")])
    task = (now, "inc-1", "inc", "", "tcp://w:1", 1, now - 0.5, now, "memory", 28,
            0.5, 0.0, 0.0, 0.0, 0.0, None, None)  # fmt: skip
    export.offer([("task", *task)])
    wait_until(lambda: exporting_processes() - before, "the export's process")
    ours = exporting_processes() - before
    export.end_run(7, now, "finished", [])
    export.close(timeout=30)
    # Everything arrived, and the process that sent it is gone.
    assert [r.body.string_value for _, r in collector.log_records()] == ["from afar"]
    spans = {s.name: s for s in collector.spans()}
    assert set(spans) == {"run apart", "inc"}
    assert spans["inc"].parent_span_id == spans["run apart"].span_id
    assert not ours & exporting_processes()
    assert export.dropped == 0


def test_the_run_s_span_encloses_a_task_the_clocks_put_before_its_start(
    tmp_path: Path, collector: Collector
) -> None:
    """A worker's task times are moved onto the scheduler's clock by an
    estimate (distributed's scheduler_delay): under load, a task that started
    right after the run read 4 ms before it (seen in the suite). The run's
    span still holds all of its tasks, as a trace viewer expects."""
    from dask_observe.export.otlp_run import export_run

    with dask_observe.Store(tmp_path / "s.sqlite") as store:
        run = SyntheticRun(store, "early")
        run.task(-0.004, 0.01, "say").task(0.5, 0.6, "say")
        recorded = run.end(1.0)
        export_run(recorded, [], collector.url)
        started, ended = recorded.started, recorded.window_end()
    spans = collector.spans()
    (root,) = (s for s in spans if s.name == "run early")
    tasks = [s for s in spans if s.parent_span_id == root.span_id]
    assert len(tasks) == 2
    assert root.start_time_unix_nano == min(s.start_time_unix_nano for s in tasks)
    assert root.start_time_unix_nano == pytest.approx((started - 0.004) * 1e9, abs=1e4)
    # The end: the later of the run's and its last task's (here 0.1 s after).
    assert root.end_time_unix_nano == max(s.end_time_unix_nano for s in tasks)
    assert root.end_time_unix_nano == pytest.approx((ended + 0.1) * 1e9, abs=1e4)


def test_back_to_back_tasks_the_clock_estimate_overlaps_are_drawn_in_turn(
    tmp_path: Path,
) -> None:
    """The same estimate, renewed by a heartbeat between two tasks of one
    thread, made the second start 3 ms before the first stopped (the suite's
    chrome-trace test failed on it once): a trace viewer would draw it inside
    the first. Each starts where the one before it on its thread ended."""
    with dask_observe.Store(tmp_path / "s.sqlite") as store:
        run = SyntheticRun(store, "estimated")
        run.task(0.1, 0.5, "first").task(0.597, 0.5, "second").task(1.2, 0.1, "third")
        trace = json.loads(
            run.end(2.0).to_chrome_trace(tmp_path / "trace.json").read_text()
        )
    first, second, third = sorted(
        (e for e in trace["traceEvents"] if e["ph"] == "X"), key=lambda e: e["ts"]
    )
    # Microseconds since the run's start (which the store keeps to a
    # microsecond or so).
    assert first["ts"] + first["dur"] == second["ts"]
    assert (first["ts"], first["dur"]) == pytest.approx((100_000, 500_000), abs=1)
    assert (second["ts"], second["dur"]) == pytest.approx((600_000, 497_000), abs=1)
    # No overlap: as it was.
    assert (third["ts"], third["dur"]) == pytest.approx((1_200_000, 100_000), abs=1)


def test_live_export_above_max_task_spans_sends_a_span_per_prefix_and_worker(
    collector: Collector,
) -> None:
    from dask_observe.export.live import LiveExport

    export = LiveExport(
        collector.url, "tcp://nowhere:8786", interval_s=1.0, max_task_spans=3
    )
    now = time.time()
    export.begin_run(8, "many", None, now - 5)
    export.offer(
        [
            ("task", now, f"inc-{i}", "inc", "", "tcp://w:1", 1, now - 1 + i / 100,
             now - 1 + i / 100 + 0.004, "erred" if i == 9 else "memory", 28, 0.004,
             0.0, 0.0, 0.0, 0.0, None, None)
            for i in range(10)
        ]
    )  # fmt: skip
    export.end_run(8, now, "finished", [])
    export.close(timeout=30)
    spans = collector.spans()
    # The first three tasks a span each; the other seven one span.
    assert sorted(s.name for s in spans) == ["inc", "inc", "inc", "inc x7", "run many"]
    (root,) = (s for s in spans if s.name == "run many")
    (group,) = (s for s in spans if s.name == "inc x7")
    assert group.parent_span_id == root.span_id
    found = attributes_of(group.attributes)
    assert found["dask.task.count"] == 7 and found["dask.task.erred"] == 1
    assert found["dask.worker.address"] == "tcp://w:1"
    assert found["dask.task.compute_s"] == pytest.approx(7 * 0.004)
    # From the first of them to start to the last to stop.
    assert group.start_time_unix_nano == pytest.approx((now - 0.97) * 1e9, abs=1e4)
    assert group.end_time_unix_nano == pytest.approx((now - 0.906) * 1e9, abs=1e4)


def test_a_dead_collector_changes_nothing_but_a_counted_reported_drop(
    client: Client, store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        dask.config.set(
            {
                "observe.export.otlp.endpoint": "http://127.0.0.1:9",  # nobody there
                "observe.export.otlp.interval": "200ms",
                "observe.export.otlp.timeout": "500ms",
            }
        ),  # fmt: skip
        caplog.at_level(logging.WARNING, logger="dask_observe"),
        dask_observe.record("nowhere", client=client) as run,
    ):
        lines = client.gather(client.map(say, [f"x {i}" for i in range(5)]))
        # A send refused, and known to the recorder: a run's end keeps the
        # drops known by then. Waited for, not slept on: the export's process
        # starts at the first records and imports the OpenTelemetry SDK, which
        # in a loaded suite took longer than the 2.5 s once slept here.
        wait_until(
            lambda: any("OpenTelemetry collector" in r.message for r in caplog.records),
            "the collector's refusal, reported",
        )
    assert lines == [f"x {i}" for i in range(5)]
    assert run.status == "finished"
    assert len(run.logs(contains="x ")) == 5
    dropped = run.events("export-dropped")
    assert len(dropped) == 1 and dropped["data"].iloc[0]["count"] > 0
    said = [r for r in caplog.records if "OpenTelemetry collector" in r.message]
    assert len(said) == 1, [r.message for r in caplog.records]


def test_a_chrome_trace_has_a_slice_per_task_on_its_threads_track(
    client: Client, store_path: Path, tmp_path: Path
) -> None:
    run, lines = recorded(client, "perfetto", n=12)
    path = tmp_path / "trace.json"
    done = dask_observe_cli(
        store_path, "export", "last", "--format", "chrome-trace", "-o", str(path)
    )
    assert done.returncode == 0, done.stderr
    assert "ui.perfetto.dev" in done.stdout
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == len(run.tasks()) == len(lines)
    assert {e["args"]["key"] for e in slices} == set(run.tasks()["key"])
    names = {
        (e["pid"], e.get("tid")): e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"].endswith("_name")
    }
    # Each slice sits on a named thread of a named worker process.
    for e in slices:
        assert names[e["pid"], None].startswith("worker tcp://")
        assert names[e["pid"], e["tid"]].startswith("thread ")
        assert e["dur"] >= 0 and e["ts"] >= 0
    # Both workers ran tasks (12 tasks on two single-threaded workers).
    assert len({e["pid"] for e in slices}) == 2
    # On one thread, slices do not overlap (what a track can draw).
    by_track: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in slices:
        by_track.setdefault((e["pid"], e["tid"]), []).append(
            (e["ts"], e["ts"] + e["dur"])
        )
    for spans in by_track.values():
        spans.sort()
        assert all(a[1] <= b[0] + 1 for a, b in itertools.pairwise(spans))
    assert any(e["ph"] == "C" and e["name"].startswith("memory") for e in events)
    assert trace["otherData"]["run"] == run.id


def test_parquet_tables_round_trip_a_row_per_task_and_line(
    client: Client, store_path: Path, tmp_path: Path
) -> None:
    run, lines = recorded(client, "tables")
    out = tmp_path / "tables"
    done = dask_observe_cli(
        store_path, "export", "last", "--format", "parquet", "-o", str(out)
    )
    assert done.returncode == 0, done.stderr
    tasks = pd.read_parquet(out / "tasks.parquet")
    pd.testing.assert_frame_equal(tasks, run.tasks(), check_dtype=False)
    logs = pd.read_parquet(out / "logs.parquet")
    assert len(logs) == len(run.logs())
    assert set(lines) <= set(logs["message"])
    (summary,) = pd.read_parquet(out / "run.parquet").to_dict("records")
    assert (summary["id"], summary["name"]) == (run.id, "tables")
    assert "packages" in json.loads(summary["environment"])
    events = pd.read_parquet(out / "events.parquet")
    assert all(isinstance(json.loads(d), dict) for d in events["data"])
    for table in ("metrics", "flags", "fine_metrics", "transfers"):
        assert (out / f"{table}.parquet").exists()
    # The same through the API.
    written = run.to_parquet(tmp_path / "api")
    assert pd.read_parquet(written["tasks"])["key"].tolist() == tasks["key"].tolist()


def test_export_says_what_it_needs(store_path: Path, client: Client) -> None:
    recorded(client, "args", n=1)
    neither = dask_observe_cli(store_path, "export", "last")
    assert neither.returncode == 1
    assert "--otlp ENDPOINT or --format" in neither.stderr
    nowhere = dask_observe_cli(store_path, "export", "last", "--format", "parquet")
    assert nowhere.returncode == 1 and "needs -o PATH" in nowhere.stderr
    refused = subprocess.run(
        [DASK_OBSERVE, "export", "last", "--otlp", "http://127.0.0.1:9"],
        env={**subprocess_env(store_path), "DASK_OBSERVE__EXPORT__OTLP__TIMEOUT": "1s"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1
    assert "not taken" in refused.stdout and "Traceback" not in refused.stderr


def test_exports_never_follow_a_link_nor_overwrite_without_force(
    store_path: Path, tmp_path: Path
) -> None:
    """A link planted where an export goes (logs.parquet -> a victim file) was
    written through, and a second export replaced the first silently."""
    with BaseStore(store_path) as store:
        run_id = store.create_run("exported", cluster="tcp://x:1")
        store.end_run(run_id, "finished")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "logs.parquet").symlink_to(victim)
    trace = tmp_path / "trace.json"
    trace.symlink_to(victim)
    report = tmp_path / "report.html"
    report.symlink_to(victim)
    for command in (
        ["export", "last", "--format", "parquet", "-o", str(out), "--force"],
        ["export", "last", "--format", "chrome-trace", "-o", str(trace), "--force"],
        ["report", "last", "-o", str(report), "--force"],
    ):
        done = dask_observe_cli(store_path, *command)
        assert done.returncode == 1, command
        assert "is a symbolic link: not followed" in done.stderr, command
    assert victim.read_text() == "precious"
    fresh = tmp_path / "fresh.json"
    first = dask_observe_cli(store_path, "export", "last", "--format",
                             "chrome-trace", "-o", str(fresh))  # fmt: skip
    assert first.returncode == 0, first.stderr
    again = dask_observe_cli(store_path, "export", "last", "--format",
                             "chrome-trace", "-o", str(fresh))  # fmt: skip
    assert again.returncode == 1 and "pass --force to overwrite" in again.stderr
    forced = dask_observe_cli(store_path, "export", "last", "--format",
                              "chrome-trace", "-o", str(fresh), "--force")  # fmt: skip
    assert forced.returncode == 0, forced.stderr


class Hostile:
    """A collector that does not collect: it redirects (to another local
    server standing for a link-local metadata address) or drips its answer a
    byte a second. Counts what reached each."""

    def __init__(self, behaviour: str) -> None:
        self.hits: dict[str, int] = {"collector": 0, "elsewhere": 0}
        hostile = self

        class Elsewhere(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hostile.hits["elsewhere"] += 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_POST = do_GET

            def log_message(self, *args: Any) -> None:
                pass

        class Collector(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                hostile.hits["collector"] += 1
                if behaviour == "redirect":
                    self.send_response(307)
                    self.send_header("Location", f"{hostile.elsewhere}/meta-data")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "60")
                self.end_headers()
                for _ in range(60):  # a byte a second: each read is quick
                    try:
                        self.wfile.write(b"\0")
                        self.wfile.flush()
                    except OSError:
                        return
                    time.sleep(1)

            def log_message(self, *args: Any) -> None:
                pass

        self.servers = [
            ThreadingHTTPServer(("127.0.0.1", 0), handler)
            for handler in (Collector, Elsewhere)
        ]
        for server in self.servers:
            threading.Thread(target=server.serve_forever, daemon=True).start()
        self.url, self.elsewhere = (
            f"http://127.0.0.1:{s.server_port}" for s in self.servers
        )


@pytest.mark.parametrize("behaviour", ["redirect", "drip"])
def test_a_collector_that_redirects_or_drips_takes_nothing_and_holds_nothing(
    store_path: Path, behaviour: str
) -> None:
    """A redirect (the old code followed it and counted the run as sent) is
    not followed and counts as not taken; an answer dripped a byte a second
    (which held the export for 100 s) is given up at the timeout (2 s here)."""
    with BaseStore(store_path) as store:
        run_id = store.create_run("sent", cluster="tcp://x:1")
        store.telemetry.append("tcp://x:1", [
            ("log", time.time(), 30, "worker", "w", "u", "a line to send"),
        ])  # fmt: skip
        store.end_run(run_id, "finished")
    hostile = Hostile(behaviour)
    began = time.monotonic()
    done = subprocess.run(
        [DASK_OBSERVE, "export", "last", "--otlp", hostile.url],
        env={**subprocess_env(store_path), "DASK_OBSERVE__EXPORT__OTLP__TIMEOUT": "2s"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    took = time.monotonic() - began
    assert done.returncode == 1, done.stdout + done.stderr
    assert "did not take" in done.stdout + done.stderr
    assert hostile.hits["collector"] >= 1 and hostile.hits["elsewhere"] == 0
    assert took < 40  # the drip lasts 60 s a request; the old code waited it out
    for server in hostile.servers:
        server.shutdown()

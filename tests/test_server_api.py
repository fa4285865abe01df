"""The server's REST routes and event stream over a run recorded on a real
LocalCluster, served by a real Jupyter server (pytest-jupyter)."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import os
import re
import socket
import sqlite3
import struct
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import pytest
from distributed import Client
from tornado.httpclient import HTTPClientError

import dask_observe
from dask_observe.server import payloads
from dask_observe.store import BaseStore
from dask_observe.store.retention import Policy

from .conftest import ended
from .synthetic import SyntheticRun
from .tasks import chatter, fail, speak_every_way

N_LINES = 10_000


@pytest.fixture
def recorded(client: Client, store_path: Path) -> dask_observe.Run:
    with (
        pytest.raises(RuntimeError),
        dask_observe.record("chatty", client=client) as run,
    ):
        client.submit(chatter, N_LINES).result()
        client.submit(fail, 1).result()
    return ended(run)


@pytest.fixture
def stored_run(store_path: Path) -> int:
    """Run 1, written to the store with no cluster: what the bad requests name
    (each of them recorded a run of 10,000 lines before, 1-2 s a case)."""
    with BaseStore(store_path) as store:
        run_id = store.create_run("stored")
        store.end_run(run_id, "finished")
    return run_id


CLUSTER = "tcp://10.0.0.1:8786"


async def get_json(jp_fetch: Any, *parts: str, **params: Any) -> Any:
    response = await jp_fetch("dask-observe", "api", *parts, params=params)
    assert response.headers["Content-Type"].startswith("application/json")
    return json.loads(response.body)


async def test_a_runs_detail_logs_report_and_cluster(
    jp_fetch: Any, recorded: dask_observe.Run, client: Client
) -> None:
    detail = await get_json(jp_fetch, "runs", str(recorded.id))
    assert detail["run"]["name"] == "chatty" and detail["run"]["status"] == "failed"
    assert detail["summary"]["n_failed"] == 1
    # The run's verdict: its task's error (and on a busy host, its stalls).
    kinds = [f["kind"] for f in detail["flags"]]
    assert kinds == list(recorded.flags()["kind"]) and "task-errors" in kinds

    # Pages in store order; each line's text comes back JSON-encoded, as it was.
    page = await get_json(
        jp_fetch, "runs", "last", "logs", contains="<SCRIPT>", limit="4000"
    )
    assert len(page["lines"]) == 4000 and page["next"] == page["lines"][-1]["seq"]
    assert page["lines"][0]["message"] == "line 00000 <script>alert(0)</script>"
    assert page["lines"][0]["level"] == "WARNING"
    total, after = len(page["lines"]), page["next"]
    while after is not None:  # pages of at most 5,000 whatever the limit asked
        more = await get_json(
            jp_fetch, "runs", "last", "logs", contains="<script>", after=str(after),
            limit="9999",
        )  # fmt: skip
        assert 0 < len(more["lines"]) <= 5000
        total, after = total + len(more["lines"]), more["next"]
    assert total == N_LINES

    response = await jp_fetch("dask-observe", "api", "runs", str(recorded.id), "report")
    assert response.headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    # Other sites cannot frame it (Jupyter's rule, which this policy replaces).
    assert "frame-ancestors 'self'" in response.headers["Content-Security-Policy"]
    html = response.body.decode()
    assert 'class="dobs-report"' in html and "<script" not in html

    clusters = (await get_json(jp_fetch, "clusters"))["clusters"]
    assert client.scheduler is not None
    (cluster,) = [c for c in clusters if c["address"] == client.scheduler.address]
    assert cluster["alive"] is True
    assert cluster["silent_since"] is None  # it answers (test_remote: a frozen one)
    assert cluster["dashboard"] == client.dashboard_link.removesuffix("/status")

    # Each route sends its payload's fields, no more (the run listing sent
    # every run's environment and settings, kilobytes a run, every 5 s).
    (run,) = (await get_json(jp_fetch, "runs"))["runs"]
    assert list(run) == list(payloads.RunPayload.__annotations__)
    assert list(cluster) == list(payloads.ClusterPayload.__annotations__)
    assert list(detail["flags"][0]) == list(payloads.FlagPayload.__annotations__)
    history = await get_json(jp_fetch, "runs", str(recorded.id), "history")
    assert list(history) == list(payloads.HistoryPayload.__annotations__)
    assert list(history["runs"][0]) == list(payloads.HistoryRunPayload.__annotations__)


def test_the_panels_payload_types_are_generated_from_the_servers() -> None:
    """src/data/payloads.ts is what scripts/payload_types.py makes of the server's
    payloads now: a field added, renamed or retyped on one side is on both."""
    script = Path(__file__).parent.parent / "scripts" / "payload_types.py"
    spec = importlib.util.spec_from_file_location("payload_types", script)
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    written = generator.TARGET.read_text()
    assert written == generator.generate(), "run scripts/payload_types.py"
    # Each payload of the routes above is an interface there, field for field.
    for payload in ("RunPayload", "ClusterPayload", "FlagPayload", "LogLinePayload"):
        fields = list(getattr(payloads, payload).__annotations__)
        interface = payload.replace("Payload", "")
        body = re.search(rf"export interface I{interface} {{(.*?)\n}}", written, re.S)
        assert body is not None
        assert re.findall(r"^  (\w+):", body[1], re.M) == fields


async def test_two_runs_compared_as_a_page_that_runs_no_script(
    jp_fetch: Any, client: Client, store_path: Path
) -> None:
    for name in ("<b>before</b>", "after"):
        with dask_observe.record(name, client=client) as run:
            client.gather(client.map(inc, range(50 if name == "after" else 10)))
        ended(run)
    response = await jp_fetch("dask-observe", "api", "runs", "1", "compare", "2")
    assert response.headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]
    # Other sites cannot frame it (Jupyter's rule, which this policy replaces).
    assert "frame-ancestors 'self'" in response.headers["Content-Security-Policy"]
    html = response.body.decode()
    assert 'class="dobs-compare"' in html and "<script" not in html
    assert "&lt;b&gt;before&lt;/b&gt;" in html and "<b>before" not in html
    # 10 tasks then 50: b/a is 5 (a count of tasks is no verdict by itself).
    row = re.search(r'<tr data-verdict="\w*"><td>tasks</td>.*?</tr>', html)
    assert row is not None and "5.00x" in row.group(0)

    with BaseStore(store_path) as store:
        empty = store.create_run("no tasks")
        store.end_run(empty, "finished")
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("dask-observe", "api", "runs", "1", "compare", str(empty))
    assert info.value.code == 400


def inc(x: int) -> int:
    return x + 1


@pytest.mark.parametrize(
    ("parts", "params", "code", "says"),
    [
        (("runs", "99"), {}, 404, "no run 99"),
        (("runs", "1", "logs"), {"contains": "(", "regex": "1"}, 400, "bad regular"),
        (("runs", "1", "logs"), {"level": "<b>loud</b>"}, 400, "unknown log level"),
        (("runs", "1", "logs"), {"after": "x"}, 400, "after must be a whole number"),
        (("runs", "1", "logs"), {"fields": "[1]"}, 400, "must be an object"),
        (("runs", "1", "logs"), {"fields": '{"a": {}}'}, 400, "a text, a number"),
        (("runs", "1", "logs"), {"fields": "{"}, 400, "fields must be JSON"),
        (("runs", "%3Cscript%3E"), {}, 404, ""),
        (("stream", "rows"), {"subscribe": '{"run": 1}'}, 400, "give subscribe"),
        (("stream", "rows"), {"subscribe": "{", "upto": "9"}, 400, "must be JSON"),
        (
            ("stream", "rows"),
            {"subscribe": '{"run": 1, "kinds": ["<b>x</b>"]}', "upto": "9"},
            400,
            "unknown kinds",
        ),
        (("stream", "rows"), {"subscribe": '{"run": 99}', "upto": "9"}, 404, "no run"),
    ],
)
async def test_bad_requests_are_json_errors_that_echo_nothing_unescaped(
    jp_fetch: Any,
    stored_run: int,
    parts: tuple[str, ...],
    params: dict[str, str],
    code: int,
    says: str,
) -> None:
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("dask-observe", "api", *parts, params=params)
    assert info.value.code == code
    assert info.value.response is not None
    body = info.value.response.body.decode()
    assert "<script>" not in body and "<b>" not in body
    if says:
        assert says in json.loads(body)["message"]


async def test_a_tab_of_a_pruned_run_or_a_gone_cluster_says_so_on_a_page(
    jp_fetch: Any, store_path: Path
) -> None:
    """A tab restored after its run was pruned (or its cluster went away)
    asks again: the answer is a static page of ours that says what happened
    and what to do, under the no-script policy (Jupyter's own error page
    needs scripts the tabs' sandboxes never run: a blank frame)."""
    with BaseStore(store_path) as store:
        pruned = store.create_run("pruned")
        store.end_run(pruned, "finished")
        kept = store.create_run("kept")
        store.end_run(kept, "finished")
        assert [r["id"] for r in store.prune(Policy(keep_last=1)).runs] == [pruned]
        # A cluster whose dashboard is not proxied: gone for an hour.
        gone = store.telemetry.register_cluster(
            "tcp://127.0.0.1:1", "http://127.0.0.1:1/"
        )
        store.rows(
            "UPDATE clusters SET last_seen = last_seen - 3600 WHERE id = ?", (gone,)
        )
    asked = {
        ("api", "runs", str(pruned), "report"): f"no run {pruned}",
        ("api", "runs", str(kept), "compare", str(pruned)): f"no run {pruned}",
        ("dashboard", str(gone), "status"): "no registered dashboard",
    }
    for parts, says in asked.items():
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch("dask-observe", *parts)
        assert info.value.code == 404
        response = info.value.response
        assert response is not None
        assert response.headers["Content-Type"].startswith("text/html")
        assert "default-src 'none'" in response.headers["Content-Security-Policy"]
        page = response.body.decode()
        assert "<script" not in page and says in page, page
        assert "Close this tab" in page
    assert "went away" in page  # the last: the dashboard's


def test_an_error_page_escapes_what_it_quotes_once() -> None:
    from dask_observe.server.pages import error_page

    page = error_page(404, "no run 3 in /tmp/<b>a&b</b>", "Close this tab.")
    assert "<b>" not in page and "/tmp/&lt;b&gt;a&amp;b&lt;/b&gt;" in page


async def test_a_runs_lines_are_found_by_task_prefix_and_fields(
    jp_fetch: Any, jp_ws_fetch: Any, client: Client, store_path: Path
) -> None:
    """What the Python API filters by, the server does too: a task's lines, a
    prefix's, the lines logged with some ``extra`` fields; page and stream."""
    tags = [uuid.uuid4().hex for _ in range(3)]
    keys = ["speak-0", "speak-1", "other-0"]
    with dask_observe.record("speaks", client=client) as run:
        client.gather(
            [
                client.submit(speak_every_way, t, key=k)
                for t, k in zip(tags, keys, strict=True)
            ]
        )
    ended(run)

    async def lines(**params: str) -> list[dict[str, Any]]:
        return list(
            (await get_json(jp_fetch, "runs", str(run.id), "logs", **params))["lines"]
        )

    # Each task said four things: a print, a line to stderr, a warning, a log.
    assert {line["task"] for line in await lines(prefix="speak")} == set(keys[:2])
    assert len(await lines(prefix="speak")) == 8
    assert len(await lines(task="speak-1")) == 4
    fields = json.dumps({"partition": tags[2], "rows": 3})
    (found,) = await lines(fields=fields)
    assert (found["task"], found["message"]) == ("other-0", f"loaded {tags[2]}")
    assert await lines(fields=json.dumps({"partition": tags[2], "rows": 4})) == []
    # What tasks printed is a source of its own (the panel's source menu).
    printed = await lines(source="stdout", prefix="speak")
    assert sorted(line["message"] for line in printed) == sorted(
        f"processing {tag}" for tag in tags[:2]
    )
    # The live stream takes the same filters.
    ws = await jp_ws_fetch("dask-observe", "api", "stream")
    filters = {"prefix": "speak", "fields": {"partition": tags[1]}}
    ws.write_message(json.dumps({"type": "subscribe", "run": run.id,
                                 "kinds": ["logs"], "filters": filters}))  # fmt: skip
    assert (await receive(ws))["type"] == "subscribed"
    batch = await receive(ws)
    ws.close()
    assert [row["message"] for row in batch["logs"]] == [f"loaded {tags[1]}"]
    ws = await jp_ws_fetch("dask-observe", "api", "stream")
    filters = {"source": "stderr", "task": "speak-0"}
    ws.write_message(json.dumps({"type": "subscribe", "run": run.id,
                                 "kinds": ["logs"], "filters": filters}))  # fmt: skip
    assert (await receive(ws))["type"] == "subscribed"
    batch = await receive(ws)
    ws.close()
    assert [row["message"] for row in batch["logs"]] == [f"retrying {tags[0]}"]


async def receive(ws: Any, timeout: float = 10) -> dict[str, Any]:
    message = await asyncio.wait_for(ws.read_message(), timeout)
    assert message is not None, "the server closed the stream"
    return dict(json.loads(message))


async def test_the_stream_resumes_exactly_after_a_disconnect(
    jp_ws_fetch: Any, recorded: dask_observe.Run
) -> None:
    seen: list[int] = []
    subscribe = {"type": "subscribe", "run": recorded.id, "kinds": ["logs"],
                 "filters": {"contains": "<script>"}}  # fmt: skip

    ws = await jp_ws_fetch("dask-observe", "api", "stream")
    ws.write_message(json.dumps({**subscribe, "after": 0}))
    assert (await receive(ws))["type"] == "subscribed"
    first = await receive(ws)
    assert first["type"] == "batch"
    seen += [row["seq"] for row in first["logs"]]
    ws.close()  # mid-way: 10,000 lines come in batches of 2,000

    assert 0 < len(seen) < N_LINES
    ws = await jp_ws_fetch("dask-observe", "api", "stream")
    ws.write_message(json.dumps({**subscribe, "after": first["last"]}))
    assert (await receive(ws))["after"] == first["last"]
    more = []
    while len(seen) < N_LINES:
        batch = await receive(ws)
        assert batch["type"] == "batch"
        seen += [row["seq"] for row in batch["logs"]]
        more.append(batch.get("more", False))
    ws.close()
    assert len(seen) == len(set(seen)) == N_LINES  # no duplicate, no gap
    assert seen == sorted(seen)
    # A replay's batches say the next follows at once (the panel draws the
    # last, not each): all but the last here.
    assert len(more) >= 2 and all(more[:-1]), more


async def test_a_runs_stream_from_near_its_end_says_it_left_the_rest(
    jp_ws_fetch: Any, store_path: Path
) -> None:
    """-N for a run is about its own last N rows (the panel's replay of a
    100,000-line run drew every line), not the store's: a run older than
    the newest gets its own tail, and the subscription says rows were left."""
    with BaseStore(store_path) as store:
        store.telemetry.register_cluster(CLUSTER, None)
        ids = []
        for name in ("older", "newer"):
            run_id = store.create_run(name, cluster=CLUSTER)
            now = time.time()
            store.telemetry.append(CLUSTER, [
                ("log", now + i * 1e-6, 30, "worker", "tcp://w:1", "user",
                 f"{name} {i}") for i in range(1_000)
            ])  # fmt: skip
            store.end_run(run_id, "finished")
            ids.append(run_id)

    async def lines_of(run_id: int, after: int) -> tuple[bool, list[str]]:
        ws = await jp_ws_fetch("dask-observe", "api", "stream")
        ws.write_message(json.dumps({"type": "subscribe", "run": run_id,
                                     "kinds": ["logs"], "after": after}))  # fmt: skip
        said = await receive(ws)
        assert said["type"] == "subscribed"
        found: list[str] = []
        while len(found) < min(1_000, abs(after) if after else 1_000):
            found += [row["message"] for row in (await receive(ws))["logs"]]
        ws.close()
        return bool(said["tail"]), found

    assert await lines_of(ids[0], -100) == (
        True,
        [f"older {i}" for i in range(900, 1000)],
    )
    assert await lines_of(ids[1], -100) == (
        True,
        [f"newer {i}" for i in range(900, 1000)],
    )
    whole = await lines_of(ids[0], 0)
    assert whole == (False, [f"older {i}" for i in range(1000)])


async def test_a_views_newest_lines_are_its_clusters_own_whatever_came_after(
    jp_ws_fetch: Any, store_path: Path
) -> None:
    """-N counts the cluster's own lines, not the store's rows: a run whose
    300 lines came before 3,000 rows of its metrics, then another cluster's
    3,000 lines, replays its last 100 lines, and so does a view of its
    cluster (the store's last 100 rows held none of them: "No lines in this
    run." under "The run's last lines")."""
    other = "tcp://10.0.0.2:8786"
    with BaseStore(store_path) as store:
        cluster_id = store.telemetry.register_cluster(CLUSTER, None)
        store.telemetry.register_cluster(other, None)
        run_id = store.create_run("lines first", cluster=CLUSTER)
        now = time.time()
        store.telemetry.append(CLUSTER, [
            ("log", now + i * 1e-6, 30, "worker", "tcp://w:1", "user",
             f"line {i}") for i in range(300)
        ])  # fmt: skip
        store.telemetry.append(CLUSTER, [
            ("metrics", now + 1 + i * 1e-3, "tcp://w:1", {"memory": 1e9, "cpu": 50})
            for i in range(1_500)
        ])  # fmt: skip
        store.end_run(run_id, "finished")
        store.telemetry.append(other, [
            ("log", now + 2 + i * 1e-6, 30, "worker", "tcp://v:1", "user",
             f"other {i}") for i in range(3_000)
        ])  # fmt: skip

    async def lines_of(target: dict[str, Any], after: int) -> tuple[bool, list[str]]:
        ws = await jp_ws_fetch("dask-observe", "api", "stream")
        ws.write_message(json.dumps({"type": "subscribe", **target,
                                     "kinds": ["logs"], "after": after}))  # fmt: skip
        said = await receive(ws)
        assert said["type"] == "subscribed"
        found: list[str] = []
        while len(found) < min(300, -after):
            batch = await receive(ws)
            found += [row["message"] for row in batch["logs"]]
        ws.close()
        return bool(said["tail"]), found

    last = [f"line {i}" for i in range(200, 300)]
    assert await lines_of({"run": run_id}, -100) == (True, last)
    assert await lines_of({"cluster": cluster_id}, -100) == (True, last)
    every = [f"line {i}" for i in range(300)]
    assert await lines_of({"cluster": cluster_id}, -1_000) == (False, every)


async def test_the_stream_starts_a_time_window_back_with_since(
    jp_ws_fetch: Any, recorded: dask_observe.Run
) -> None:
    # What the panel's metrics charts ask for: the samples of the last minutes.
    metrics = recorded.metrics(epoch=True)
    times = sorted(set(metrics["time"]))
    # A cut just after the sample before the longest pause: the server counts
    # `since` back from its own now, a little later than the test's, and must
    # still include what follows the pause. (Workers' fast memory samples can
    # be milliseconds apart: a cut between two of them was flaky.)
    widest = max(range(1, len(times)), key=lambda i: times[i] - times[i - 1])
    assert times[widest] - times[widest - 1] > 0.05, times
    cut = times[widest - 1] + 0.001
    expected = metrics[metrics["time"] > cut]
    ws = await jp_ws_fetch("dask-observe", "api", "stream")
    ws.write_message(
        json.dumps(
            {
                "type": "subscribe",
                "run": recorded.id,
                "kinds": ["metrics"],
                "since": time.time() - cut,
            }
        )
    )
    assert (await receive(ws))["type"] == "subscribed"
    batch = await receive(ws)
    assert {r["time"] for r in batch["metrics"]} == set(expected["time"])
    assert len(batch["metrics"]) == len(expected)
    ws.write_message(
        json.dumps(
            {
                "type": "subscribe",
                "run": recorded.id,
                "kinds": ["metrics"],
                "since": "long",
            }
        )
    )
    assert "seconds" in (await receive(ws))["message"]
    ws.close()


async def test_a_time_window_holds_no_older_row_written_after_a_newer_one(
    jp_ws_fetch: Any, store_path: Path
) -> None:
    # Rows are not written in time order: a worker's samples reach the store
    # after the scheduler's of the same moment. Past the window's first row an
    # older one followed, and was sent (the since test failed so in a suite).
    with dask_observe.Store(store_path) as store:  # the API's: runs read as Run
        run = SyntheticRun(store, "late samples")
        # Begun a minute ago: its samples lie in the past.
        store.rows("UPDATE runs SET started = started - 60 WHERE id = ?", (run.id,))
        run.start -= 60
        run.metrics(50.0, None, memory=1.0)  # written first, newer
        run.metrics(45.0, "tcp://w:1", memory=2.0)  # written after, older
        ended = run.end(55.0)
    ws = await jp_ws_fetch("dask-observe", "api", "stream")
    cut = ended.started + 47.5  # between the two samples
    since = time.time() - cut
    ws.write_message(
        json.dumps(
            {"type": "subscribe", "run": ended.id, "kinds": ["metrics"], "since": since}
        )
    )
    said = await receive(ws)
    assert said["type"] == "subscribed", said
    batch = await receive(ws)
    assert [r["time"] for r in batch["metrics"]] == [ended.started + 50.0]
    ws.close()


async def test_the_stream_pushes_new_rows_and_says_what_is_wrong(
    jp_ws_fetch: Any, client: Client, store_path: Path
) -> None:
    ws = await jp_ws_fetch("dask-observe", "api", "stream")
    ws.write_message(json.dumps({"type": "subscribe", "run": 5}))
    error = await receive(ws)
    assert error["type"] == "error"  # no store yet, then no run 5
    ws.write_message("not json")
    assert (await receive(ws))["type"] == "error"

    with dask_observe.record("live", client=client) as run:
        ws.write_message(json.dumps({"type": "subscribe", "run": run.id,
                                     "kinds": ["logs", "progress"]}))  # fmt: skip
        assert (await receive(ws))["type"] == "subscribed"
        await asyncio.to_thread(lambda: client.submit(chatter, 3).result())
        lines: list[str] = []
        progress: dict[str, Any] = {}
        seen: list[str] = []
        while len(lines) < 3 or not progress:
            try:
                message = await receive(ws)
            except TimeoutError:  # say what came (it failed once in a full suite)
                pytest.fail(f"10 s and no more: {lines=} {progress=} {seen=}")
            seen.append(message["type"])
            if message["type"] == "batch":
                lines += [r["message"] for r in message.get("logs", [])]
            elif message["type"] == "progress":
                progress = message["prefixes"]
        assert lines[-1] == "line 00002 <script>alert(2)</script>"
        assert progress == {"chatter": [1, 0]}
    ws.close()


async def test_a_finished_runs_flags_are_its_verdict_sent_once(
    jp_ws_fetch: Any,
    recorded: dask_observe.Run,
    store_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dask_observe.server import subscriptions

    monkeypatch.setattr(subscriptions, "FLAGS_INTERVAL_S", 0.05)  # a running pace
    recorded.flag_list()  # waits for the run's end to store its verdict

    def mark(message: str) -> list[tuple[str, str]]:
        """Set the stored task-errors flag's message; the verdict's flags."""
        with sqlite3.connect(store_path) as conn:
            (stored,) = conn.execute(
                "SELECT flags FROM verdicts WHERE run_id = ?", (recorded.id,)
            ).fetchone()
            flags = json.loads(stored)
            for flag in flags:
                if flag["kind"] == "task-errors":
                    flag["message"] = message
            conn.execute(
                "UPDATE verdicts SET flags = ? WHERE run_id = ?",
                (json.dumps(flags), recorded.id),
            )
        return [(f["kind"], f["message"]) for f in flags]

    # To see that the verdict is what is sent: the task's error, and on a busy
    # host the host's stalls beside it (a suite run under load saw one).
    verdict = mark("STORED")
    assert ("task-errors", "STORED") in verdict
    ws = await jp_ws_fetch("dask-observe", "api", "stream")
    ws.write_message(
        json.dumps({"type": "subscribe", "run": recorded.id, "kinds": ["flags"]})
    )
    assert (await receive(ws))["type"] == "subscribed"
    sent = await receive(ws)
    assert sent["type"] == "flags"
    assert [(f["kind"], f["message"]) for f in sent["flags"]] == verdict
    assert set(sent["flags"][0]) == set(payloads.FLAG_FIELDS)
    # A finished run's verdict cannot change: it is not read (nor judged)
    # again, so a change in the file now is never sent.
    mark("CHANGED")
    with pytest.raises(TimeoutError):
        await receive(ws, timeout=1.0)  # 20 of a running run's intervals
    ws.close()


def ws_frame(text: str) -> bytes:
    """One masked text frame, as a browser sends it."""
    payload = text.encode()
    mask = os.urandom(4)
    header = bytes([0x81])
    if len(payload) < 126:
        header += bytes([0x80 | len(payload)])
    else:
        header += bytes([0x80 | 126]) + struct.pack(">H", len(payload))
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any]:
    first, second = await reader.readexactly(2)
    length = second & 0x7F
    if length == 126:
        (length,) = struct.unpack(">H", await reader.readexactly(2))
    elif length == 127:
        (length,) = struct.unpack(">Q", await reader.readexactly(8))
    assert first & 0x0F == 1, "a text frame"
    return dict(json.loads(await reader.readexactly(length)))


async def test_a_client_that_stops_reading_gets_a_gap_it_can_fill_over_rest(
    jp_fetch: Any,
    jp_http_port: int,
    jp_base_url: str,
    jp_auth_header: dict[str, str],
    store_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server_config = dask.config.config["observe"]["server"]
    monkeypatch.setitem(server_config, "stream-max-pending", "256kiB")
    n = 200_000
    with BaseStore(store_path) as store:
        run_id = store.create_run("flood", cluster="tcp://flood:1")
        lines = [
            ("log", time.time(), 30, "worker", "w", "flood", f"line {i:06d}")
            for i in range(n)
        ]
        store.telemetry.append("tcp://flood:1", lines)
        store.end_run(run_id, "finished")

    # A raw socket with a tiny receive window, so that unread data backs up.
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", jp_http_port))
    reader, writer = await asyncio.open_connection(sock=sock)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            f"GET {jp_base_url}dask-observe/api/stream HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{jp_http_port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n"
            f"Authorization: {jp_auth_header['Authorization']}\r\n\r\n"
        ).encode()
    )
    assert b" 101 " in await reader.readuntil(b"\r\n\r\n")
    subscribe = {"type": "subscribe", "run": run_id, "kinds": ["logs"], "after": 0}
    writer.write(ws_frame(json.dumps(subscribe)))
    await writer.drain()
    await asyncio.sleep(3)  # not reading: the server must stop queueing for us

    streamed: list[int] = []
    gaps: list[tuple[int, int]] = []
    while True:
        message = await asyncio.wait_for(read_frame(reader), 10)
        if message["type"] == "batch":
            streamed += [row["seq"] for row in message["logs"]]
            if message["last"] >= n:
                break
        elif message["type"] == "gap":
            gaps.append((message["after"], message["upto"]))
            if message["upto"] >= n:
                break
    writer.close()
    assert gaps, "the server kept queueing for a client that did not read"

    # What the gaps skipped is there over REST, as a run's lines and as the
    # stream would have sent it, and nothing is missing overall.
    filled: list[int] = []
    resent: list[dict[str, Any]] = []
    for after, upto in gaps:
        start = after
        while after is not None and after < upto:
            page = await get_json(
                jp_fetch, "runs", str(run_id), "logs",
                after=str(after), upto=str(upto), limit="5000",
            )  # fmt: skip
            filled += [line["seq"] for line in page["lines"]]
            after = page["next"]
        while start < upto:
            batch = await get_json(
                jp_fetch, "stream", "rows", upto=str(upto),
                subscribe=json.dumps({**subscribe, "after": start}),
            )  # fmt: skip
            assert batch["last"] > start
            resent += batch["logs"]
            start = batch["last"]
    assert sorted(streamed + filled) == list(range(1, n + 1))
    assert [line["seq"] for line in resent] == sorted(filled)
    assert resent[0]["level"] == "WARNING"  # as the stream sends it
    assert resent[0]["message"].startswith("line ")


async def test_a_runs_history_has_each_runs_figures_verdict_and_changes(
    jp_fetch: Any, store_path: Path
) -> None:
    """What the panel's trend chart draws: the runs of the selected run's name,
    oldest first, the slow one marked, the changed config beside it. The runs
    are written as a recorder writes them, their truth set here (twice the
    same job, then three times its work under a changed config): recorded for
    real, naps on this shared host were not always the same job twice (the
    panel's twin of this test saw one run of them three times as long as the
    others, and rightly marked it). A recorded run's history: above."""
    name = "<i>nightly</i>"
    changed = {"distributed.admin.tick.limit": "4s"}
    with dask_observe.Store(store_path) as store:
        for i, (n, wall, config) in enumerate(
            ((8, 0.5, {}), (8, 0.52, {}), (24, 1.5, changed))
        ):
            run = SyntheticRun(store, name, span=f"span-nightly-{i}")
            run.tasks(n, 0.1, "nap", gap=0.02)  # the same pace each time
            run.held(wall, 120e6)
            environment = {"cluster": {"workers": 2, "threads": 2}, "config": config}
            run.end(wall, settings={}, environment=environment)
        other = SyntheticRun(store, "another job", span="span-other")
        other.tasks(1, 0.01, "nap").end(0.05, settings={}, environment={})

    history = await get_json(jp_fetch, "runs", "3", "history")
    assert history["name"] == name  # JSON text, never markup
    runs = history["runs"]
    assert [r["id"] for r in runs] == [1, 2, 3]
    # On failure, each run's wall time and verdict: what was judged.
    said = [(r["duration_s"], r["verdict"]) for r in runs]
    assert [r["verdict"] for r in runs] == ["", "", "regression"], said
    # Three times the tasks at the same pace: no prefix marked (and too few
    # runs before them for a band).
    assert [r["prefixes"] for r in runs] == [{}, {}, {}]
    assert [r["duration_s"] for r in runs] == pytest.approx([0.5, 0.52, 1.5])
    # The cluster's peak: both workers' 120 MB at once.
    assert [r["peak_memory"] for r in runs] == [240e6] * 3
    assert runs[1]["changed"] == []
    assert "config distributed.admin.tick.limit: None -> 4s" in runs[2]["changed"]
    # Any run of the name gives the same history; another name, its own.
    assert (await get_json(jp_fetch, "runs", "1", "history"))["runs"] == runs
    other = await get_json(jp_fetch, "runs", "last", "history")
    assert other["name"] == "another job" and len(other["runs"]) == 1
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("dask-observe", "api", "runs", "99", "history")
    assert info.value.code == 404


@pytest.fixture
def plugins_installed(
    make_client: Callable[..., Client], store_path: Path
) -> dask_observe.Run:
    """A run on a cluster of its own: its recording installs the plugins, and
    distributed says so ("Starting Worker plugin dask-observe-worker")."""
    client = make_client(n_workers=1, processes=True)
    with dask_observe.record("first", client=client) as run:
        client.submit(chatter, 3).result()  # and three lines of the user's
    return ended(run)


async def test_lines_about_our_own_plugins_are_kept_but_shown_only_on_request(
    jp_fetch: Any, jp_ws_fetch: Any, plugins_installed: dask_observe.Run
) -> None:
    (cluster,) = (await get_json(jp_fetch, "clusters"))["clusters"]

    async def cluster_lines(**filters: Any) -> list[str]:
        """The cluster's lines, as the panel's live logs subscribe to them."""
        ws = await jp_ws_fetch("dask-observe", "api", "stream")
        subscribe = {"type": "subscribe", "cluster": cluster["id"], "kinds": ["logs"],
                     "after": 0, "filters": filters}  # fmt: skip
        ws.write_message(json.dumps(subscribe))
        assert (await receive(ws))["type"] == "subscribed"
        batch = await receive(ws)
        ws.close()
        return [row["message"] for row in batch["logs"]]

    shown = await cluster_lines()
    assert len([line for line in shown if line.startswith("line 0000")]) == 3
    assert not any("plugin dask-observe" in line for line in shown)
    everything = await cluster_lines(own=True)
    assert "Starting Worker plugin dask-observe-worker" in everything
    assert len(everything) > len(shown)


async def test_one_socket_carries_several_subscriptions_each_by_its_id(
    jp_ws_fetch: Any, recorded: dask_observe.Run
) -> None:
    from dask_observe.server.subscriptions import MAX_SUBSCRIPTIONS

    ws = await jp_ws_fetch("dask-observe", "api", "stream")
    ws.write_message(json.dumps(
        {"type": "subscribe", "id": "lines", "run": recorded.id, "kinds": ["logs"],
         "filters": {"contains": "line 0000"}}
    ))  # fmt: skip
    ws.write_message(json.dumps(
        {"type": "subscribe", "id": "flags", "run": recorded.id, "kinds": ["flags"]}
    ))  # fmt: skip
    seen: dict[str, list[str]] = {"lines": [], "flags": []}
    lines: list[str] = []
    while len(lines) < 10 or "flags" not in seen["flags"]:
        message = await receive(ws)
        seen[message["id"]].append(message["type"])
        lines += [row["message"] for row in message.get("logs", [])]
    assert seen["lines"][0] == "subscribed" and seen["flags"][0] == "subscribed"
    assert len(lines) == 10 and all(line.startswith("line 0000") for line in lines)
    # Ended by its id: the other goes on; more than the cap is refused.
    ws.write_message(json.dumps({"type": "unsubscribe", "id": "lines"}))
    for i in range(MAX_SUBSCRIPTIONS):
        ws.write_message(json.dumps(
            {"type": "subscribe", "id": f"more-{i}", "run": recorded.id,
             "kinds": ["events"]}
        ))  # fmt: skip
    refused = None
    while refused is None:
        message = await receive(ws)
        assert message["id"] != "lines"
        if message["type"] == "error":
            refused = message
    assert refused["id"] == f"more-{MAX_SUBSCRIPTIONS - 1}"
    assert f"at most {MAX_SUBSCRIPTIONS} subscriptions" in refused["message"]
    ws.close()


def commit_lines(path: Path, cluster: str, batches: int, per_batch: int) -> None:
    """As a recorder does: batches of log lines committed one after another."""
    with BaseStore(path) as store:
        instance, cursor = store.telemetry.cursor(cluster)
        for b in range(batches):
            lines = [
                (cursor + i + 1,
                 ("log", time.time(), 30, "worker", "w", "x", f"line {b}.{i}"))
                for i in range(per_batch)
            ]  # fmt: skip
            store.telemetry.ingest(
                cluster, lines, read_at=(instance, cursor), instance="one",
                last=cursor + per_batch, dropped={},
            )  # fmt: skip
            instance, cursor = "one", cursor + per_batch
            time.sleep(0.03)


async def test_panels_following_one_cluster_each_get_every_line_once(
    jp_ws_fetch: Any, store_path: Path
) -> None:
    """Three panels, each with two subscriptions to the same cluster, woken by
    the same commits: they share the store's reads, and each subscription
    still gets every line once, in order, under its own id."""
    cluster = "tcp://followed:8786"
    with BaseStore(store_path) as store:
        cluster_id = store.telemetry.register_cluster(cluster, None)
    sockets = [await jp_ws_fetch("dask-observe", "api", "stream") for _ in range(3)]
    for ws in sockets:
        for ident in ("a", "b"):
            ws.write_message(json.dumps(
                {"type": "subscribe", "id": ident, "cluster": cluster_id,
                 "kinds": ["logs"]}
            ))  # fmt: skip
        assert {(await receive(ws))["type"] for _ in "ab"} == {"subscribed"}
    await asyncio.to_thread(commit_lines, store_path, cluster, 20, 50)
    expected = [f"line {b}.{i}" for b in range(20) for i in range(50)]
    for ws in sockets:
        got: dict[str, list[str]] = {"a": [], "b": []}
        while any(len(lines) < len(expected) for lines in got.values()):
            message = await receive(ws)
            got[message["id"]] += [row["message"] for row in message.get("logs", [])]
        assert got == {"a": expected, "b": expected}
        ws.close()


async def test_the_watch_wakes_its_waiters_when_another_process_commits(
    store_path: Path,
) -> None:
    from dask_observe.server.watch import StoreWatch

    BaseStore(store_path).close()
    watch = StoreWatch(store_path)
    seen = watch.version
    waiting = asyncio.gather(*(watch.wait(seen, 60) for _ in range(3)))
    await asyncio.sleep(0.1)
    assert not waiting.done()  # nothing committed: they wait
    await asyncio.to_thread(commit_lines, store_path, "tcp://w:1", 1, 1)
    await asyncio.wait_for(waiting, 30)  # woken by the commit, not their 60 s
    assert watch.version > seen
    # A caller that saw an older version does not wait at all.
    await asyncio.wait_for(watch.wait(seen, 60), 1)
    watch.close()

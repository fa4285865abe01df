"""The team's archive served to the panel by a real Jupyter server: the runs
of ``observe.archive`` as the server is configured, their reports and their
comparisons, as pages that run no script."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dask
import pytest
from distributed import Client
from tornado.httpclient import HTTPClientError

import dask_observe
from dask_observe.server import payloads


async def test_without_an_archive_the_team_view_says_so(jp_fetch: Any) -> None:
    with dask.config.set({"observe.archive": None}):
        response = await jp_fetch("dask-observe", "api", "archive", "runs")
        assert json.loads(response.body) == {
            "archive": None, "runs": [], "total": 0, "skipped": 0
        }  # fmt: skip
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch(
                "dask-observe", "api", "archive", "runs",
                "20261126T000000Z-0123456789ab", "report",
            )  # fmt: skip
    assert e.value.code == 404


async def test_the_team_archive_lists_runs_and_serves_their_pages(
    jp_fetch: Any,
    store_path: Path,
    tmp_path: Path,
    client: Client,
) -> None:
    url = str(tmp_path / "team")
    uids = []
    for name in ("<b>etl</b>", "<b>etl</b>"):
        with dask_observe.record(name, client=client) as run:
            client.gather(client.map(abs, range(10)))
        uids.append(run.publish(url))
    with dask.config.set({"observe.archive": url}):
        response = await jp_fetch("dask-observe", "api", "archive", "runs")
        listing = json.loads(response.body)
        assert listing["archive"] == url
        runs = listing["runs"]
        assert [r["id"] for r in runs] == list(reversed(uids))
        assert list(runs[0]) == list(payloads.ArchiveRunPayload.__annotations__)
        assert runs[0]["name"] == "<b>etl</b>" and runs[0]["host"]
        assert b"<b>" in response.body and b"text/html" not in response.body
        assert listing["total"] == 2
        # The panel asks for the cards it shows (a year's archive is long).
        page = await jp_fetch(
            "dask-observe", "api", "archive", "runs", params={"limit": "1"}
        )
        first = json.loads(page.body)
        assert [r["id"] for r in first["runs"]] == [uids[1]]
        assert first["total"] == 2
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch(
                "dask-observe", "api", "archive", "runs", params={"limit": "-1"}
            )
        assert e.value.code == 400

        report = await jp_fetch(
            "dask-observe", "api", "archive", "runs", uids[1], "report"
        )
        assert "default-src 'none'" in report.headers["Content-Security-Policy"]
        html = report.body.decode()
        assert 'class="dobs-report"' in html and "<script" not in html
        assert "&lt;b&gt;etl&lt;/b&gt;" in html and "<b>etl</b>" not in html
        compared = await jp_fetch(
            "dask-observe", "api", "archive", "runs", uids[0], "compare", uids[1]
        )
        assert "wall time" in compared.body.decode()
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch(
                "dask-observe", "api", "archive", "runs",
                "20200101T000000Z-0123456789ab", "report",
            )  # fmt: skip
        assert e.value.code == 404

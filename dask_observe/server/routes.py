"""REST routes under ``<base_url>dask-observe/api/``; all authenticated.

Every answer is JSON (untrusted text travels JSON-encoded), except a run's report,
which is HTML that escapes what it shows and is served under a policy that lets
no script run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict
from html import escape
from typing import Any, TypeVar

from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from tornado import web

from dask_observe.analysis.compare import compare
from dask_observe.analysis.history import history_records
from dask_observe.api import Run
from dask_observe.server.manager import StoreManager, TooBusy
from dask_observe.server.pages import REPORT_POLICY, ErrorPages
from dask_observe.server.payloads import (
    ClusterPayload,
    HistoryPayload,
    HistoryRunPayload,
    RunPayload,
    cluster_payload,
    flag_payload,
    run_payload,
)
from dask_observe.server.subscriptions import checked_filters, read_rows, within_text
from dask_observe.store import (
    BaseStore,
    QueryTooLong,
    RunNotFound,
    StoreError,
    StoreMissing,
)

#: The resource name for jupyter_server's authorizer.
AUTH_RESOURCE = "dask-observe"

#: Log lines one page holds at most.
MAX_PAGE = 5_000
#: Characters of log text in one page (see subscriptions.BATCH_TEXT).
MAX_PAGE_TEXT = 4 * 1024 * 1024
#: Characters of a subscribe message given to ``stream/rows``.
MAX_SUBSCRIBE = 4_000

T = TypeVar("T")


def read_runs(store: BaseStore, limit: int | None = None) -> list[RunPayload]:
    return [run_payload(record) for record in store.run_records(limit, brief=True)]


def read_runs_page(store: BaseStore, limit: int | None) -> dict[str, Any]:
    """The newest ``limit`` runs (all without one), and how many there are."""
    return {"runs": read_runs(store, limit), "total": store.count_runs()}


def read_clusters(store: BaseStore) -> list[ClusterPayload]:
    return [cluster_payload(record) for record in store.telemetry.clusters()]


def read_run(store: BaseStore, run_id: str) -> dict[str, Any]:
    """A run's record, summary and flags."""
    run = Run.of(store, run_id)
    return {
        "run": store.run_record(run.id),
        "summary": run.summary(),
        "flags": [flag_payload(asdict(f)) for f in run.flag_list()],
    }


def read_logs(store: BaseStore, run_id: str, query: dict[str, Any]) -> dict[str, Any]:
    """One page of a run's log lines in store order: those numbered above
    ``after`` (and at most ``upto``), filtered as the Python API filters."""
    filters = checked_filters(query["filters"])  # as a stream's: bounded
    rows = store.run(run_id).log_page(
        query["after"], query["limit"] + 1, query["upto"], **filters
    )
    # A page is bounded in text too (lines may be 64 KiB): the rest next page.
    kept = min(query["limit"], within_text(rows, MAX_PAGE_TEXT))
    more = len(rows) > kept
    rows = rows[:kept]
    return {"lines": rows, "next": rows[-1]["seq"] if more else None}


#: Runs a history answer holds at most (the newest).
HISTORY_POINTS = 50


def _number(value: Any) -> float | None:
    """A float for JSON: pandas' NaN (unknown) is null, which JSON can say."""
    return None if value is None or value != value else float(value)


def read_history(store: BaseStore, run_id: str) -> HistoryPayload:
    """The history of the run's name: its newest runs, oldest first, with
    their wall time, peak memory, verdict, prefix verdicts and what changed (see
    :func:`dask_observe.analysis.history.history`)."""
    name = str(store.run_record(run_id)["name"])
    runs = [
        HistoryRunPayload(
            id=int(row["id"]),
            started=float(row["started"]),
            status=row["status"],
            duration_s=_number(row["duration_s"]),
            peak_memory=_number(row["peak_memory"]),
            verdict=row["verdict"] or "",
            changed=list(row["changed"]),
            prefixes=dict(row["prefixes"]),
            memory_verdict=row["memory_verdict"] or "",
        )
        for row in history_records(store, name, last=HISTORY_POINTS)
    ]
    return HistoryPayload(name=name, runs=runs)


def read_report(store: BaseStore, run_id: str) -> str:
    return Run.of(store, run_id).report().html


def read_comparison(store: BaseStore, a: str, b: str) -> str:
    from dask_observe.report.comparison import render_html
    from dask_observe.report.style import page

    body = render_html(compare(a, b, store=store))
    return page(f"Runs {escape(a)} and {escape(b)} compared", body)


def whole_argument(
    handler: web.RequestHandler, name: str, default: int | None
) -> int | None:
    """A query argument that must be a whole number SQLite can hold."""
    raw = handler.get_query_argument(name, None)
    if raw is None:
        return default
    if not re.fullmatch(r"\d{1,18}", raw):  # what SQLite's integers hold
        raise web.HTTPError(400, f"{name} must be a whole number below 10**18")
    return int(raw)


def _json_argument(handler: web.RequestHandler, name: str) -> Any:
    """A query argument holding JSON (bounded, not nested deeply), or None."""
    raw = handler.get_query_argument(name, None)
    if raw is None:
        return None
    if len(raw) > MAX_SUBSCRIBE:
        raise web.HTTPError(400, f"{name} may have at most {MAX_SUBSCRIBE} characters")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise web.HTTPError(400, f"{name} must be JSON") from None


class StoreReader(JupyterHandler):
    """Base of the handlers that read the store, through the extension's one
    :class:`StoreManager` (handed in, not global)."""

    auth_resource = AUTH_RESOURCE

    def initialize(self, manager: StoreManager) -> None:
        self.manager = manager

    async def read(
        self,
        reader: Callable[..., T],
        *args: Any,
        empty: Any = None,
        isolated: bool = False,
        page: bool = False,
    ) -> T:
        """A store read by the manager (``isolated``: in a process of its own,
        for reads that run Python for long; ``page``: a page built from a
        whole run, under a page's deadline); ``empty`` answers for a store
        not created yet (else 404). A missing run is 404, a bad filter or a
        read past its deadline 400. Messages quote what the request (or the
        store: run names) said, so they are HTML-escaped, whatever page
        carries them."""
        try:
            return await self.manager.read(reader, *args, isolated=isolated, page=page)
        except StoreMissing as e:
            if empty is not None:
                return empty  # type: ignore[no-any-return]
            raise web.HTTPError(404, "no runs recorded yet") from e
        except RunNotFound as e:
            raise web.HTTPError(404, escape(str(e))) from e
        except QueryTooLong as e:
            raise web.HTTPError(400, escape(str(e))) from e
        except StoreError as e:
            raise web.HTTPError(500, escape(str(e))) from e
        except ValueError as e:
            raise web.HTTPError(400, escape(str(e))) from e

    def finish_html(self, html: str) -> None:
        """Answer a page of ours: static HTML under a policy that runs no script."""
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Content-Security-Policy", REPORT_POLICY)
        self.set_header("X-Content-Type-Options", "nosniff")
        self.finish(html)


class StoreHandler(StoreReader, APIHandler):
    """A store reader that answers JSON, errors included."""

    async def finish_read(
        self, reader: Callable[..., Any], *args: Any, patterned: bool = False
    ) -> None:
        """Answer ``reader``'s result as JSON. A read with a pattern (a
        regular expression tried row by row) takes one of the pattern slots
        (429 when none is free) and runs in a process of its own."""
        if not patterned:
            self.finish(json.dumps(await self.read(reader, *args)))
            return
        try:
            with self.manager.slot("pattern"):
                found = await self.read(reader, *args, isolated=True)
        except TooBusy as e:
            raise web.HTTPError(429, str(e)) from e
        self.finish(json.dumps(found))


class RunsHandler(StoreHandler):
    """``GET dask-observe/api/runs``: the recorded runs, newest first, and
    ``total``, how many there are. Query: limit, the newest that many (the
    panel asks for the cards it shows: a year's 1,000 runs were 268 KiB and
    50 ms of the server's every 5 s while the panel showed 100)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        limit = whole_argument(self, "limit", None)
        page = await self.read(read_runs_page, limit, empty={"runs": [], "total": 0})
        self.finish(json.dumps(page))


class RunHandler(StoreHandler):
    """``GET dask-observe/api/runs/<id>``: a run with its summary and flags."""

    @web.authenticated
    @authorized
    async def get(self, run_id: str) -> None:
        run = await self.read(read_run, run_id, isolated=True)  # flags: pandas
        self.finish(json.dumps(run, default=str))


class RunLogsHandler(StoreHandler):
    """``GET dask-observe/api/runs/<id>/logs``: a page of log lines.

    Query: contains, regex (1/true), level, worker, source, own (1/true: also
    the lines about dask-observe's own plugins), task (a task's key: the
    lines it wrote), prefix (the lines of a prefix's tasks), fields (a JSON
    object: the lines logged with those ``extra`` fields); after and upto
    (sequence numbers), limit. ``next`` is the ``after`` of the next page.
    """

    @web.authenticated
    @authorized
    async def get(self, run_id: str) -> None:
        limit = whole_argument(self, "limit", 1000) or 1000
        regex = self.get_query_argument("regex", "") in ("1", "true")
        raw = {
            "contains": self.get_query_argument("contains", None),
            "regex": regex,
            "level": self.get_query_argument("level", None),
            "worker": self.get_query_argument("worker", None),
            "source": self.get_query_argument("source", None),
            "own": self.get_query_argument("own", "") in ("1", "true"),
            "task": self.get_query_argument("task", None),
            "prefix": self.get_query_argument("prefix", None),
            "fields": _json_argument(self, "fields"),
        }
        query = {
            "after": whole_argument(self, "after", 0) or 0,
            "upto": whole_argument(self, "upto", None),
            "limit": max(1, min(limit, MAX_PAGE)),
            "filters": raw,
        }
        await self.finish_read(read_logs, run_id, query, patterned=regex)


class StreamRowsHandler(StoreHandler):
    """``GET dask-observe/api/stream/rows``: the rows a stream's ``gap`` skipped.

    Query: ``subscribe`` (the subscribe message, as JSON, with ``after`` the
    gap's start) and ``upto`` (its end). Answers one batch as the stream sends
    it, ``{"last", "logs", "metrics", "events"}``; ask again from ``last``
    until it reaches ``upto``.
    """

    @web.authenticated
    @authorized
    async def get(self) -> None:
        upto = whole_argument(self, "upto", None)
        raw = self.get_query_argument("subscribe", "")
        if upto is None or len(raw) > MAX_SUBSCRIBE:
            raise web.HTTPError(400, "give subscribe (a subscribe message) and upto")
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, or nested past the stack
            raise web.HTTPError(
                400, "subscribe must be JSON, not nested deeply"
            ) from None
        if not isinstance(message, dict):
            raise web.HTTPError(400, "subscribe must be a JSON object")
        filters = message.get("filters")
        patterned = isinstance(filters, dict) and bool(filters.get("regex"))
        await self.finish_read(read_rows, message, upto, patterned=patterned)


class RunHistoryHandler(StoreHandler):
    """``GET dask-observe/api/runs/<id>/history``: the newest runs of that run's
    name (at most :data:`HISTORY_POINTS`), each judged against those before."""

    @web.authenticated
    @authorized
    async def get(self, run_id: str) -> None:
        history = await self.read(read_history, run_id, isolated=True)  # pandas
        self.finish(json.dumps(history, default=str))


#: What a missing run's page says (a tab restored after it was pruned).
RUN_GONE = (
    "It may have been deleted or pruned (dask-observe prune, "
    "observe.retention), or this Jupyter server reads another store. Close "
    "this tab: the panel's Runs section lists the runs the store holds."
)


class RunReportHandler(ErrorPages, StoreReader):
    """``GET dask-observe/api/runs/<id>/report``: the full report, as HTML
    (errors as a page of ours that says what to do: ``pages``)."""

    not_found = RUN_GONE

    # Not web.authenticated: it would redirect to the login page; every route of
    # ours answers 403 to a request without credentials, this one included.
    @ws_authenticated
    @authorized
    async def get(self, run_id: str) -> None:
        report = await self.read(read_report, run_id, isolated=True, page=True)
        self.finish_html(report)


class RunComparisonHandler(ErrorPages, StoreReader):
    """``GET dask-observe/api/runs/<a>/compare/<b>``: run b against run a, as
    HTML under the report's no-script policy (a run without tasks: 400)."""

    not_found = RUN_GONE

    @ws_authenticated  # 403, not a login redirect (see RunReportHandler)
    @authorized
    async def get(self, a: str, b: str) -> None:
        page = await self.read(read_comparison, a, b, isolated=True, page=True)
        self.finish_html(page)


class ClustersHandler(StoreHandler):
    """``GET dask-observe/api/clusters``: clusters recorders have watched, with
    their dashboard address and whether a recorder still watches them."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        clusters = await self.read(read_clusters, empty=[])
        self.finish(json.dumps({"clusters": clusters}))

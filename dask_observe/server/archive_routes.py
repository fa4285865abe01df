"""The team's archive (``observe.archive``, as the server is configured),
under ``dask-observe/api/archive/``: its runs, and their reports and
comparisons as pages that run no script. All authenticated, as every route.

Only the archive the server's configuration names is read: a request names
runs, never a URL (one that could would make the server fetch from any host
it can reach for whoever holds a token).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from html import escape
from typing import Any, TypeVar

from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from dask_observe.analysis.compare import compare
from dask_observe.api.archive import Archive
from dask_observe.archive.location import configured as archive_setting
from dask_observe.server.pages import ErrorPages
from dask_observe.server.payloads import ArchiveRunPayload, archive_run_payload
from dask_observe.server.routes import StoreReader, whole_argument
from dask_observe.store import RunNotFound, StoreError

T = TypeVar("T")

#: An archive run id in a route (``new_uid``'s shape).
UID = r"(\d{8}T\d{6}Z-[0-9a-f]{12})"

#: Per process (the server's, each reading process's): the configured archive,
#: whose runs read so far stay read.
_archives: dict[tuple[str, str], Archive] = {}


def configured() -> tuple[str, dict[str, Any]] | None:
    """``observe.archive`` and its options, or None where none is set."""
    url, options = archive_setting()
    return None if url is None else (url, options)


def _archive(url: str, options: dict[str, Any]) -> Archive:
    key = (url, json.dumps(options, sort_keys=True, default=str))
    if key not in _archives:
        _archives[key] = Archive(url, options)
    return _archives[key]


def read_archive_runs(
    url: str, options: dict[str, Any], limit: int | None = None
) -> tuple[list[ArchiveRunPayload], int, int]:
    """The archive's newest ``limit`` runs as sent (all without one), how many
    it holds, and how many entries its listing skipped."""
    archive = _archive(url, options)
    records = archive.run_records()
    runs = [archive_run_payload(r) for r in records[:limit]]
    return runs, len(records), archive.skipped


def read_archive_report(url: str, options: dict[str, Any], uid: str) -> str:
    return _archive(url, options).run(uid).report().html


def read_archive_comparison(url: str, options: dict[str, Any], a: str, b: str) -> str:
    from dask_observe.report.comparison import render_html
    from dask_observe.report.style import page

    body = render_html(compare(a, b, store=_archive(url, options)))
    return page(f"Runs {escape(a)} and {escape(b)} compared", body)


class ArchiveReader(StoreReader):
    """Base of the archive's handlers: reads off the event loop, errors said."""

    async def read(  # type: ignore[override]
        self, reader: Callable[..., T], *args: Any, isolated: bool = False
    ) -> T:
        """``reader(url, options, *args)`` on the manager's threads (or, for
        reports and comparisons, its processes); 404 without an archive."""
        where = configured()
        if where is None:
            raise web.HTTPError(404, "no archive: set observe.archive")
        try:
            return await self.manager.call(reader, *where, *args, isolated=isolated)
        except TimeoutError as e:
            raise web.HTTPError(504, "the archive did not answer in time") from e
        except RunNotFound as e:
            raise web.HTTPError(404, escape(str(e))) from e
        except (StoreError, OSError, ValueError) as e:
            raise web.HTTPError(502, escape(f"the archive: {e}")) from e


class ArchiveRunsHandler(ArchiveReader, APIHandler):
    """``GET dask-observe/api/archive/runs``: ``{"archive", "runs", "total",
    "skipped"}``, the runs published to the configured archive, newest first
    (query: limit, the newest that many, as the panel's Team section asks),
    how many it holds, and how many entries of it were not valid runs
    (``archive`` null and no runs where none is set)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        where = configured()
        if where is None:
            empty: dict[str, Any] = {
                "archive": None,
                "runs": [],
                "total": 0,
                "skipped": 0,
            }
            self.finish(json.dumps(empty))
            return
        limit = whole_argument(self, "limit", None)
        runs, total, skipped = await self.read(read_archive_runs, limit)
        answer = {"archive": where[0], "runs": runs, "total": total, "skipped": skipped}
        self.finish(json.dumps(answer))


#: What a page of a run the archive no longer holds says.
ARCHIVE_RUN_GONE = (
    "The team's archive does not hold it (any more): it may have been pruned "
    "there, or this Jupyter server reads another archive. Close this tab: the "
    "panel's Team section lists the runs the archive holds."
)


class ArchiveReportHandler(ErrorPages, ArchiveReader):
    """``GET dask-observe/api/archive/runs/<uid>/report``: its report page."""

    not_found = ARCHIVE_RUN_GONE

    @ws_authenticated  # 403, not a login redirect (see RunReportHandler)
    @authorized
    async def get(self, uid: str) -> None:
        self.finish_html(await self.read(read_archive_report, uid, isolated=True))


class ArchiveComparisonHandler(ErrorPages, ArchiveReader):
    """``GET dask-observe/api/archive/runs/<a>/compare/<b>``: b against a."""

    not_found = ARCHIVE_RUN_GONE

    @ws_authenticated
    @authorized
    async def get(self, a: str, b: str) -> None:
        html = await self.read(read_archive_comparison, a, b, isolated=True)
        self.finish_html(html)


def archive_routes(api: str, kwargs: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    runs = url_path_join(api, "archive", "runs")
    run = url_path_join(runs, UID)
    return [
        (runs, ArchiveRunsHandler, kwargs),
        (url_path_join(run, "report"), ArchiveReportHandler, kwargs),
        (url_path_join(run, "compare", UID), ArchiveComparisonHandler, kwargs),
    ]

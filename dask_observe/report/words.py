"""The report's words: the run's warning and error lines, its failed tasks
with their exceptions, the notice of a partial recording, and where to look
further. Every recorded text is escaped.
"""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import TYPE_CHECKING

from dask_observe.report.style import STYLES, Limits
from dask_observe.report.style import style as _s
from dask_observe.units import format_seconds, text_or_none

if TYPE_CHECKING:
    from dask_observe.report.model import Failure, ReportData


def clock(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%H:%M:%S.%f")[:-3]


def log_rows(rows: list[tuple[float, str, str, str]]) -> str:
    def row(t: float, level: str, who: str, message: str) -> str:
        cell = _s("log", level) if level in STYLES else _s("log")
        return (
            f"<tr><td{_s('log')}>+{format_seconds(max(t, 0))}</td>"
            f"<td{cell}>{escape(level)}</td><td{_s('log')}>{escape(who)}</td>"
            f"<td{cell}>{escape(message)}</td></tr>"
        )

    return "".join(row(*r) for r in rows)


def _failure(failure: Failure) -> str:
    logs = log_rows(failure.logs)
    where = escape(failure.worker or "a worker that died")
    return (
        f'<div class="dobs-failure"><p{_s("p")}><b>{escape(failure.key)}</b> on '
        f"{where}, at +{format_seconds(failure.time)}</p>"
        + (f"<p{_s('p')}>{escape(failure.story)}</p>" if failure.story else "")
        + f"<pre{_s('pre')}>{escape(failure.exception)}</pre>"
        + (
            f"<details><summary>traceback</summary><pre{_s('pre')}>"
            f"{escape(failure.traceback)}</pre></details>"
            if failure.traceback
            else ""
        )
        + (
            "<details open><summary>last log lines</summary>"
            f"<table{_s('table')}>{logs}</table></details>"
            if logs
            else ""
        )
        + "</div>"
    )


def failures(data: ReportData) -> str:
    if not data.failures:
        return ""
    n_failed = int(data.summary["n_failed"] or 0)
    more = n_failed - len(data.failures)
    extra = f"<p>+{more} more failed tasks: run.tasks().</p>" if more > 0 else ""
    return (
        f"<h4{_s('h4')}>Failed tasks ({n_failed})</h4>"
        + "".join(_failure(f) for f in data.failures)
        + extra
    )


def alerts(data: ReportData, limits: Limits) -> str:
    alerts = data.alerts
    if alerts.empty:
        return ""
    shown = alerts.tail(limits.log_lines)
    rows = list(
        zip(
            shown["time"].astype(float),
            shown["level"].astype(str),
            [
                text_or_none(w) or str(s)
                for w, s in zip(shown["worker"], shown["source"], strict=True)
            ],
            shown["message"].astype(str),
            strict=True,
        )
    )
    which = "the newest " if len(shown) < len(alerts) else ""
    return (
        f"<h4{_s('h4')}>Warnings and errors ({len(alerts):,}; {which}"
        f"{len(shown):,} shown)</h4><table{_s('table')}>{log_rows(rows)}</table>"
    )


def footer(data: ReportData, full: bool) -> str:
    """Where to look further: the commands that read the run (from the
    team's archive, for a run read from one)."""
    lines = _archived(data) or _stored(int(data.summary["id"]), full)
    items = "".join(f"<li>{line}</li>" for line in lines)
    return f"<footer{_s('footer')}>Look further:<ul>{items}</ul></footer>"


def _archived(data: ReportData) -> list[str]:
    archive = data.summary.get("archive")
    if archive is None:
        return []
    uid, url = escape(str(data.summary["id"])), escape(str(archive))
    return [
        f"<code>dask-observe logs {uid} --archive {url}</code>: every log line "
        "of the run",
        f"<code>dask_observe.open_archive({url!r}).run({uid!r}).tasks()</code>: "
        "the data as DataFrames",
    ]


def _stored(run_id: int, full: bool) -> list[str]:
    lines = [
        f"<code>%dask_observe logs {run_id}</code> or "
        f"<code>dask-observe logs {run_id}</code>: every log line of the run",
        f"<code>store.run({run_id}).tasks()</code>, <code>.metrics()</code>, "
        "<code>.flags()</code>: the data as DataFrames",
    ]
    if not full:
        lines.insert(
            0,
            f"<code>%dask_observe report {run_id} -o run-{run_id}.html</code> or "
            f"<code>dask-observe report {run_id} -o run-{run_id}.html</code>: "
            "the full report",
        )
    return lines


def partial(data: ReportData) -> str:
    """A run whose cluster did not take the capture plugins says so first."""
    why = data.summary.get("partial")
    if not why:
        return ""
    return (
        f'<p class="dobs-partial"{_s("partial")} data-figure="partial">'
        "<strong>Recorded partially:"
        f"</strong> {escape(str(why))}. This report holds what distributed itself "
        "kept: the task stream, events and the recent lines of processes still "
        "alive at the end; no memory timeline, no lines of workers that died.</p>"
    )

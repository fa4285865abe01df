"""The report as HTML: self-contained, no JavaScript, every recorded text escaped.

One renderer makes both the inline report (under a notebook cell: short tables,
the newest lines) and the full report (everything, for a file). Figures a test or
a script may want to read back carry ``data-figure`` attributes.
"""

from __future__ import annotations

import re
from html import escape
from typing import TYPE_CHECKING, Any

from dask_observe.report import svg
from dask_observe.units import format_bytes, format_seconds, text_or_none

if TYPE_CHECKING:
    from dask_observe.flags import Flag
    from dask_observe.report.model import Failure, ReportData

STYLE = """
.dobs-report{font:13px/1.4 var(--jp-content-font-family,system-ui,sans-serif);
 color:var(--jp-content-font-color1,inherit);max-width:900px}
.dobs-report h3{font-size:15px;margin:4px 0 8px}
.dobs-report h4{font-size:13px;margin:14px 0 4px}
.dobs-report table{border-collapse:collapse;font-size:12px}
.dobs-report th,.dobs-report td{padding:2px 8px;text-align:right;
 border-bottom:1px solid var(--jp-border-color2,#e0e0e0)}
.dobs-report th:first-child,.dobs-report td:first-child{text-align:left}
.dobs-cards{display:flex;flex-wrap:wrap;gap:6px}
.dobs-card{border:1px solid var(--jp-border-color2,#ddd);border-radius:4px;
 padding:3px 8px;min-width:92px}
.dobs-card b{display:block;font-size:14px}
.dobs-card span{font-size:11px;opacity:.75}
.dobs-bad{color:#d62728}
.dobs-flag{border-left:4px solid #ff7f0e;padding:2px 8px;margin:4px 0}
.dobs-flag.error{border-color:#d62728}.dobs-flag.info{border-color:#2a7fb8}
.dobs-flag p{margin:2px 0}.dobs-advice{opacity:.85;font-style:italic}
.dobs-legend{display:flex;flex-wrap:wrap;gap:4px 12px;font-size:11px;margin:2px 0}
.dobs-key i{display:inline-block;width:10px;height:10px;margin-right:4px;
 vertical-align:middle}
.dobs-lane,.dobs-axis{font-size:10px;fill:currentColor}
.dobs-plot{fill:none;stroke:var(--jp-border-color2,#ddd)}
.dobs-mems{display:flex;flex-wrap:wrap;gap:4px 16px}
.dobs-mem{margin:0}.dobs-mem figcaption{font-size:11px}
.dobs-report pre{white-space:pre-wrap;font-size:11px;margin:2px 0;max-height:24em;
 overflow:auto;background:var(--jp-layout-color2,rgba(127,127,127,.08))}
.dobs-log td{text-align:left;font-family:var(--jp-code-font-family,monospace);
 font-size:11px;white-space:pre-wrap;vertical-align:top}
.dobs-log td:nth-child(-n+3){white-space:nowrap}
.dobs-log .WARNING{color:#c66a00}.dobs-log .ERROR,.dobs-log .CRITICAL{color:#d62728}
.dobs-report footer{margin-top:10px;font-size:12px;opacity:.85}
.dobs-report code{font-family:var(--jp-code-font-family,monospace)}
"""


class Limits:
    """How much of each list a report shows."""

    def __init__(self, full: bool) -> None:
        self.full = full
        self.prefixes = 10_000 if full else 20
        self.memory_charts = 10_000 if full else 8
        self.log_lines = 5_000 if full else 20
        self.legend = 40 if full else 12


def _card(label: str, value: str, figure: str, raw: Any, bad: bool = False) -> str:
    css = ' class="dobs-bad"' if bad else ""
    return (
        f'<div class="dobs-card"><b{css} data-figure="{figure}" '
        f'data-value="{escape(str(raw))}">{escape(value)}</b>'
        f"<span>{escape(label)}</span></div>"
    )


def _summary(data: ReportData) -> str:
    s = data.summary
    n_tasks = int(s["n_tasks"] or 0)
    n_failed = int(s["n_failed"] or 0)
    duration = data.end - data.start
    cards = [
        _card("wall time", format_seconds(duration), "duration_s", f"{duration:.3f}"),
        _card("tasks", f"{n_tasks:,}", "n_tasks", n_tasks),
        _card("failed", f"{n_failed:,}", "n_failed", n_failed, bad=n_failed > 0),
        _card("workers", str(data.workers), "workers", data.workers),
        _card("threads", str(data.threads), "threads", data.threads),
    ]
    for phase, seconds in data.phases.items():
        cards.append(
            _card(
                f"{phase} time", format_seconds(seconds), f"{phase}_s", f"{seconds:.3f}"
            )
        )
    cards += [
        _card("peak memory", format_bytes(data.peak_memory), "peak_memory",
              data.peak_memory or 0),
        _card("spilled (peak)", format_bytes(data.peak_spilled or 0), "spilled",
              data.peak_spilled or 0, bad=bool(data.peak_spilled)),
        _card("error lines", f"{data.n_errors:,}", "n_errors", data.n_errors,
              bad=data.n_errors > 0),
        _card("flags", str(len(data.flags)), "n_flags", len(data.flags),
              bad=bool(data.flags)),
    ]  # fmt: skip
    if data.dropped:
        cards.append(
            _card("records dropped", f"{data.dropped:,}", "dropped", data.dropped, True)
        )
    return f'<div class="dobs-cards">{"".join(cards)}</div>'


def _flag(flag: Flag) -> str:
    evidence = "".join(
        f"<tr><td>{_clock(e['time'])}</td><td>{escape(e['worker'] or '')}</td>"
        f"<td>{escape(str(e['text']))}</td></tr>"
        for e in flag.evidence
    )
    details = (
        f"<details><summary>evidence ({len(flag.evidence)})</summary>"
        f'<table class="dobs-log">{evidence}</table></details>'
        if evidence
        else ""
    )
    return (
        f'<div class="dobs-flag {escape(flag.severity)}" '
        f'data-flag="{escape(flag.kind)}">'
        f"<p><b>{escape(flag.kind)}</b> ({escape(flag.severity)}): "
        f"{escape(flag.message)}</p>"
        f'<p class="dobs-advice">{escape(flag.advice)}</p>{details}</div>'
    )


def _clock(t: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%H:%M:%S.%f")[:-3]


def _flags(data: ReportData) -> str:
    if not data.flags:
        return '<h4>Flags</h4><p data-flags="0">No flag: nothing looked wrong.</p>'
    return f"<h4>Flags ({len(data.flags)})</h4>" + "".join(map(_flag, data.flags))


def _task_stream(data: ReportData, limits: Limits) -> str:
    prefixes = list(data.prefixes["prefix"])
    shown = prefixes[: limits.legend]
    return (
        "<h4>Task stream</h4>"
        + svg.task_stream(data.tasks, data.duration)
        + svg.legend(shown, len(prefixes) - len(shown))
    )


def _figure_name(text: str) -> str:
    """``thread-cpu`` -> ``thread_cpu``: a figure's name is a word."""
    return re.sub(r"\W+", "_", text).strip("_")


def _time_split(data: ReportData) -> str:
    """Where the threads' time went, a bar per activity."""
    from dask_observe.report.model import ACTIVITIES

    total = sum(data.time_split.values())
    if total <= 0:
        return ""
    rows = "".join(
        f"<tr><td>{escape(ACTIVITIES.get(activity, activity))}</td>"
        f'<td data-figure="time_{_figure_name(activity)}" data-value="{seconds:.6f}">'
        f"{format_seconds(seconds)}</td><td>{seconds / total:.0%}</td>"
        f"<td>{svg.share_bar(seconds / total)}</td></tr>"
        for activity, seconds in data.time_split.items()
    )
    return (
        "<h4>Where the time went</h4><table><tr><th>worker threads</th>"
        f"<th>time</th><th>share</th><th></th></tr>{rows}</table>"
    )


def _memory(data: ReportData, limits: Limits) -> str:
    if not data.memory:
        return "<h4>Memory</h4><p>No memory samples were recorded.</p>"
    charts = []
    cluster = data.memory.get("")
    if cluster is not None:
        charts.append(svg.memory_chart(cluster, data.duration, title="cluster"))
    workers = [w for w in data.memory if w]
    peaks = {
        w: float((data.memory[w]["managed"] + data.memory[w]["unmanaged"]).max())
        for w in workers
    }
    workers.sort(key=lambda w: -peaks[w])
    for worker in workers[: limits.memory_charts]:
        reason = data.workers_removed.get(worker)
        charts.append(
            svg.memory_chart(
                data.memory[worker],
                data.duration,
                title=svg._short(worker),
                note="(left the cluster)" if reason is not None else "",
            )
        )
    more = len(workers) - limits.memory_charts
    extra = f"<p>+{more} more workers in the full report.</p>" if more > 0 else ""
    return (
        "<h4>Memory</h4>"
        + svg.memory_legend()
        + f'<div class="dobs-mems">{"".join(charts)}</div>'
        + extra
    )


def _prefixes(data: ReportData, limits: Limits) -> str:
    table = data.prefixes
    if table.empty:
        return ""
    rows = "".join(
        f"<tr><td>{escape(str(r['prefix']))}</td><td>{int(r['count']):,}</td>"
        f"<td>{format_seconds(r['total_s'])}</td>"
        f"<td>{format_seconds(r['mean_s'])}</td><td>{format_bytes(r['nbytes'])}</td>"
        f"<td{' class=dobs-bad' if r['errors'] else ''}>{int(r['errors'])}</td></tr>"
        for r in table.head(limits.prefixes).to_dict("records")
    )
    more = len(table) - limits.prefixes
    extra = f"<p>+{more} more prefixes in the full report.</p>" if more > 0 else ""
    return (
        "<h4>Task prefixes</h4><table><tr><th>prefix</th><th>tasks</th>"
        "<th>total</th><th>mean</th><th>bytes</th><th>errors</th></tr>"
        f"{rows}</table>{extra}"
    )


def _log_rows(rows: list[tuple[float, str, str, str]]) -> str:
    return "".join(
        f'<tr class="{escape(level)}"><td>+{format_seconds(max(t, 0))}</td>'
        f"<td>{escape(level)}</td><td>{escape(who)}</td><td>{escape(msg)}</td></tr>"
        for t, level, who, msg in rows
    )


def _failure(failure: Failure) -> str:
    logs = _log_rows(failure.logs)
    where = escape(failure.worker or "a worker that died")
    return (
        f'<div class="dobs-failure"><p><b>{escape(failure.key)}</b> on {where}, '
        f"at +{format_seconds(failure.time)}</p>"
        f"<pre>{escape(failure.exception)}</pre>"
        + (
            f"<details><summary>traceback</summary><pre>{escape(failure.traceback)}"
            "</pre></details>"
            if failure.traceback
            else ""
        )
        + (
            f'<details open><summary>last log lines</summary><table class="dobs-log">'
            f"{logs}</table></details>"
            if logs
            else ""
        )
        + "</div>"
    )


def _failures(data: ReportData) -> str:
    if not data.failures:
        return ""
    n_failed = int(data.summary["n_failed"] or 0)
    more = n_failed - len(data.failures)
    extra = f"<p>+{more} more failed tasks: run.tasks().</p>" if more > 0 else ""
    return (
        f"<h4>Failed tasks ({n_failed})</h4>"
        + "".join(_failure(f) for f in data.failures)
        + extra
    )


def _alerts(data: ReportData, limits: Limits) -> str:
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
        f"<h4>Warnings and errors ({len(alerts):,}; {which}{len(shown):,} shown)</h4>"
        f'<table class="dobs-log">{_log_rows(rows)}</table>'
    )


def _footer(data: ReportData, full: bool) -> str:
    run_id = int(data.summary["id"])
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
    items = "".join(f"<li>{line}</li>" for line in lines)
    return f"<footer>Look further:<ul>{items}</ul></footer>"


def _partial(data: ReportData) -> str:
    """A run whose cluster did not take the capture plugins says so first."""
    why = data.summary.get("partial")
    if not why:
        return ""
    return (
        '<p class="dobs-partial" data-figure="partial"><strong>Recorded partially:'
        f"</strong> {escape(str(why))}. This report holds what distributed itself "
        "kept: the task stream, events and the recent lines of processes still "
        "alive at the end; no memory timeline, no lines of workers that died.</p>"
    )


def render(data: ReportData, *, full: bool = False) -> str:
    """The report of ``data`` as one HTML fragment (a full page with ``full``)."""
    limits = Limits(full)
    s = data.summary
    title = (
        f"dask-observe run {int(s['id'])} {escape(repr(str(s['name'])))}: "
        f"{escape(str(s['status']))}"
    )
    body = (
        f'<div class="dobs-report" data-run-id="{int(s["id"])}">'
        f"<style>{STYLE}</style><h3>{title}</h3>"
        + _partial(data)
        + _summary(data)
        + _flags(data)
        + _task_stream(data, limits)
        + _time_split(data)
        + _memory(data, limits)
        + _prefixes(data, limits)
        + _failures(data)
        + _alerts(data, limits)
        + _footer(data, full)
        + "</div>"
    )
    if not full:
        return body
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title></head><body>{body}</body></html>"
    )

"""The report as HTML: self-contained, no JavaScript, every recorded text escaped.

One renderer makes both the inline report (under a notebook cell: short tables,
the newest lines) and the full report (everything, for a file). Figures a test or
a script may want to read back carry ``data-figure`` attributes.
"""

from __future__ import annotations

import re
from html import escape
from typing import TYPE_CHECKING, Any

from dask_observe.analysis.native import native_rows
from dask_observe.diagnose.lead import lead
from dask_observe.plaintext import ACTIVITIES, short_path
from dask_observe.report import memorycharts, standing, svg, taskstream
from dask_observe.report.icicle import icicle
from dask_observe.report.matrix import transfer_matrix
from dask_observe.report.style import Limits, page
from dask_observe.report.style import style as _s
from dask_observe.report.style import table as _table
from dask_observe.report.words import alerts, clock, failures, footer, partial
from dask_observe.store.outcome import status_line
from dask_observe.units import format_bytes, format_seconds

if TYPE_CHECKING:
    import pandas as pd

    from dask_observe.diagnose import Flag
    from dask_observe.report.model import ReportData

#: Headline figures a row in the figures table.
FIGURES_PER_ROW = 5


def _card(label: str, value: str, figure: str, raw: Any, bad: bool = False) -> str:
    style = _s("value", "bad") if bad else _s("value")
    return (
        f'<td{_s("figure")}><span{style} data-figure="{figure}" '
        f'data-value="{escape(str(raw))}">{escape(value)}</span><br>'
        f"<span{_s('label')}>{escape(label)}</span></td>"
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
    moved = float(data.transfer_pairs["bytes"].sum()) if len(data.transfer_pairs) else 0
    for phase, seconds in data.phases.items():
        label = f"{phase} time"
        if phase == "transfer" and seconds:
            # Seconds spent fetching 424 B are waiting on a peer, not moving data.
            label += f" ({format_bytes(moved)} moved)"
        cards.append(
            _card(label, format_seconds(seconds), f"{phase}_s", f"{seconds:.3f}")
        )
    cards += [
        _card("peak memory", format_bytes(data.peak_memory), "peak_memory",
              data.peak_memory or 0),
        _card("spilled (peak)", format_bytes(data.peak_spilled or 0), "spilled",
              data.peak_spilled or 0, bad=bool(data.peak_spilled)),
    ]  # fmt: skip
    if data.shuffle_written:  # shards on disk by design: not spilling
        cards.append(_card("shuffle disk", format_bytes(data.shuffle_written),
                           "shuffle_written", data.shuffle_written))  # fmt: skip
    cards += [
        _card("error lines", f"{data.n_errors:,}", "n_errors", data.n_errors,
              bad=data.n_errors > 0),
        _card("flags", str(len(data.flags)), "n_flags", len(data.flags),
              bad=bool(data.flags)),
    ]  # fmt: skip
    if data.dropped:
        cards.append(
            _card("records dropped", f"{data.dropped:,}", "dropped", data.dropped, True)
        )
    rows = [
        cards[i : i + FIGURES_PER_ROW] for i in range(0, len(cards), FIGURES_PER_ROW)
    ]
    body = "".join(f"<tr>{''.join(row)}</tr>" for row in rows)
    return f'<table class="dobs-figures"{_s("table")}>{body}</table>'


def _flag(flag: Flag) -> str:
    evidence = "".join(
        f"<tr><td{_s('log')}>{clock(e['time'])}</td>"
        f"<td{_s('log')}>{escape(e['worker'] or '')}</td>"
        f"<td{_s('log')}>{escape(str(e['text']))}</td></tr>"
        for e in flag.evidence
    )
    details = (
        f"<details><summary>evidence ({len(flag.evidence)})</summary>"
        f"<table{_s('table')}>{evidence}</table></details>"
        if evidence
        else ""
    )
    style = {"error": "flag-error", "info": "flag-info"}.get(flag.severity, "flag")
    return (
        f'<div class="dobs-flag"{_s(style)} data-flag="{escape(flag.kind)}">'
        f"<p{_s('p')}><b>{escape(flag.kind)}</b> ({escape(flag.severity)}): "
        f"{escape(flag.message)}</p>"
        f"<p{_s('advice')}>{escape(flag.advice)}</p>{details}</div>"
    )


def _flags(data: ReportData) -> str:
    if not data.flags:
        return (
            f"<h4{_s('h4')}>Flags</h4>"
            '<p data-flags="0">No flag: nothing looked wrong.</p>'
        )
    # The answer first (what the user lost, then its cause), repeats folded.
    return f"<h4{_s('h4')}>Flags ({len(data.flags)})</h4>" + "".join(
        map(_flag, lead(data.flags))
    )


def _chart(chart: str, limits: Limits) -> str:
    """Inline SVG in the full report (a file: tooltips work), an image in the
    report kept in a notebook (what untrusted notebooks and GitHub show)."""
    return chart if limits.full else svg.image(chart)


def _task_stream(data: ReportData, limits: Limits) -> str:
    prefixes = [str(p) for p in data.prefixes["prefix"]]
    # One assignment for the stream and its legend: colours depend on each other.
    colors = svg.prefix_colors(prefixes)
    return (
        f"<h4{_s('h4')}>Task stream</h4>"
        + _chart(taskstream.task_stream(data.stream, data.duration, colors), limits)
        + "<br>"
        + _chart(svg.legend(prefixes, limits.legend, colors), limits)
    )


def _figure_name(text: str) -> str:
    """``thread-cpu`` -> ``thread_cpu``: a figure's name is a word."""
    return re.sub(r"\W+", "_", text).strip("_")


def _time_split(data: ReportData, limits: Limits) -> str:
    """Where the threads' time went, a bar per activity."""
    total = sum(data.time_split.values())
    if total <= 0:
        return ""
    rows = [
        [
            escape(ACTIVITIES.get(activity, activity)),
            f'<span data-figure="time_{_figure_name(activity)}" '
            f'data-value="{seconds:.6f}">{format_seconds(seconds)}</span>',
            f"{seconds / total:.0%}",
            _chart(svg.share_bar(seconds / total), limits),
        ]
        for activity, seconds in data.time_split.items()
    ]
    return f"<h4{_s('h4')}>Where the time went</h4>" + _table(
        ["worker threads", "time", "share", ""], rows
    )


def _memory(data: ReportData, limits: Limits) -> str:
    heading = f"<h4{_s('h4')}>Memory</h4>"
    readings = any(len(p) for p in data.process.values())
    if not data.memory and not readings and not data.workers_removed:
        return heading + "<p>No memory samples were recorded.</p>"
    charts: list[tuple[str, pd.DataFrame, str, pd.DataFrame | None]] = []
    cluster = data.memory.get("")
    if cluster is not None:
        # The cluster's line is the headline's peak memory, second by second.
        process = data.process.get("")
        charts.append(
            (memorycharts.memory_caption(cluster, "cluster", process=process), cluster,
             "cluster", process)
        )  # fmt: skip
    # Every worker with a reading, and every worker that left: one killed
    # before its first heartbeat has only its own samples and its nanny's
    # reading, or nothing; it is the worker a reader looks for.
    by_worker = {
        w: data.memory.get(w, memorycharts.no_heartbeat())
        for w in {*data.memory, *data.process, *data.workers_removed}
        if w
    }
    peaks = {
        w: memorycharts.process_peak(by_worker[w], data.process.get(w))
        for w in by_worker
    }
    # The highest first; a worker with no reading (a NaN peak) last.
    workers = sorted(by_worker, key=lambda w: (-peaks[w] if peaks[w] >= 0 else 1, w))
    for worker in workers[: limits.memory_charts]:
        left = data.workers_removed.get(worker) is not None
        title = svg.short_address(worker)
        note = "(left the cluster)" if left else ""
        process = data.process.get(worker)
        charts.append(
            (memorycharts.memory_caption(by_worker[worker], title, note, process),
             by_worker[worker], title, process)
        )  # fmt: skip
    cells = [
        f"<td{_s('figure')}><span{_s('label')}>{caption}</span><br>"
        + _chart(
            memorycharts.memory_chart(
                series, data.duration, title=title, process=process
            ),
            limits,
        )
        + "</td>"
        for caption, series, title, process in charts
    ]
    rows = "".join(
        f"<tr>{''.join(cells[i : i + 2])}</tr>" for i in range(0, len(cells), 2)
    )
    more = len(workers) - limits.memory_charts
    extra = f"<p>+{more} more workers in the full report.</p>" if more > 0 else ""
    return (
        heading
        + _chart(memorycharts.memory_legend(), limits)
        + f'<table class="dobs-mems">{rows}</table>'
        + extra
    )


def _profile(data: ReportData, limits: Limits) -> str:
    """Where the task threads spent their time: the icicle graph, the functions
    with the most self time, and per prefix its hottest function."""
    table = data.profile[data.profile["prefix"] == ""]
    if table.empty:
        native = _native(data)
        return f"<h4{_s('h4')}>Profile</h4>" + native if native else ""
    sampled = float(table["self_s"].sum())
    top = table.sort_values("self_s", ascending=False).head(limits.functions)
    rows = [
        [
            f"<code>{escape(str(r['function']))}</code>",
            f"{escape(short_path(str(r['filename'])))}:{int(r['lineno'])}",
            format_seconds(r["self_s"]),
            f"{r['self_s'] / sampled:.0%}" if sampled else "",
            format_seconds(r["total_s"]),
        ]
        for r in top.to_dict("records")
    ]
    tree = data.profile_trees.get("")
    legend = "width: time on the stack" + (
        "; blue: compiled code (py-spy)" if data.native else ""
    )
    return (
        f"<h4{_s('h4')}>Profile ({format_seconds(sampled)} sampled)</h4>"
        + (_chart(icicle(tree, legend=legend), limits) if tree else "")
        + _table(["function", "where", "self", "share", "with callees"], rows)
        + _prefix_profiles(data)
        + _native(data)
    )


def _native(data: ReportData) -> str:
    """Of a run recorded with ``native=True``: how much of each prefix's
    sampled task time was in compiled code, and in which libraries; and why
    a worker could not be profiled, if one could not."""
    if not data.native:
        return ""
    rate = data.native.get("rate")
    rows = [
        [
            escape(prefix) if prefix else "(all tasks)",
            format_seconds(sampled),
            f"{share:.0%}",
            escape(libraries) or "-",
            f"{waiting / sampled:.0%}" if sampled else "-",
        ]
        for prefix, sampled, _, share, waiting, libraries in native_rows(data.native)
    ]
    said = "".join(
        f"<p{_s('p')}>Native profile unavailable on {len(workers)} "
        f"worker{'s' if len(workers) != 1 else ''}: {escape(reason)}</p>"
        for reason, workers in (data.native.get("unavailable") or {}).items()
    )
    dropped = int(data.native.get("dropped") or 0)
    if dropped:  # past the stack changes a process answers (MAX_INTERVALS)
        said += (
            f"<p{_s('p')}>{dropped:,} later stack changes py-spy recorded were "
            "not kept: the table is of the run's earlier part.</p>"
        )
    if not rows:
        return said
    return (
        f"<p{_s('label')}>In compiled code (py-spy, {rate} samples a second)</p>"
        + _table(
            [
                "prefix",
                "task time sampled",
                "in compiled code",
                "libraries",
                "waiting (locks, GIL, sleep, I/O)",
            ],
            rows,
        )
        + said
    )


def _prefix_profiles(data: ReportData) -> str:
    """Per task prefix, the function it spent the most self time in."""
    table = data.profile[data.profile["prefix"] != ""]
    if table.empty:
        return ""
    rows = []
    for prefix, group in table.groupby("prefix", sort=False):
        sampled = float(group["self_s"].sum())
        hottest = group.sort_values("self_s").iloc[-1]
        rows.append(
            (sampled, [
                escape(str(prefix)),
                format_seconds(sampled),
                f"<code>{escape(str(hottest['function']))}</code>",
                f"{float(hottest['self_s']) / sampled:.0%}" if sampled else "",
            ])
        )  # fmt: skip
    rows.sort(key=lambda row: -row[0])
    return f"<p{_s('label')}>By task prefix</p>" + _table(
        ["prefix", "sampled", "hottest function", "its self share"],
        [row for _, row in rows],
    )


#: Bytes below which a transfer's time is latency (a peer's busy event loop,
#: a connection), not bandwidth: its "bytes per second" would say nothing.
BANDWIDTH_MIN_BYTES = 2**20


def _bandwidth(nbytes: float, per_second: float) -> str:
    return f"{format_bytes(per_second)}/s" if nbytes >= BANDWIDTH_MIN_BYTES else "-"


def _transfers(data: ReportData, limits: Limits) -> str:
    """Bytes the workers fetched from each other: the matrix of pairs, by type,
    and the busiest pairs."""
    pairs = data.transfer_pairs
    if pairs.empty:
        return ""
    total = int(pairs["bytes"].sum())
    count = int(pairs["count"].sum())
    seconds = float(pairs["seconds"].sum())
    types = [
        [
            escape(str(r["type"])),
            format_bytes(r["bytes"]),
            f"{int(r['count']):,}",
            format_seconds(r["seconds"]),
            _bandwidth(r["bytes"], r["bandwidth"]),
        ]
        for r in data.transfer_types.head(limits.prefixes).to_dict("records")
    ]
    busiest = [
        [
            escape(svg.short_address(str(r["peer"]))),
            escape(svg.short_address(str(r["worker"]))),
            format_bytes(r["bytes"]),
            f"{int(r['count']):,}",
            _bandwidth(r["bytes"], r["bandwidth"]),
        ]
        for r in pairs.head(limits.functions).to_dict("records")
    ]
    more = len(pairs) - limits.functions
    extra = f"<p>+{more} more pairs in the full report.</p>" if more > 0 else ""
    return (
        f"<h4{_s('h4')}>Transfers between workers ({format_bytes(total)} in "
        f"{count:,} transfers"
        + (
            f", {_bandwidth(total, total / max(seconds, 1e-3))})"
            if total >= BANDWIDTH_MIN_BYTES
            else ")"
        )
        + "</h4>"
        + _chart(transfer_matrix(pairs), limits)
        + _table(["type", "bytes", "transfers", "time", "bandwidth"], types)
        + _table(["from", "to", "bytes", "transfers", "bandwidth"], busiest)
        + extra
    )


def _prefixes(data: ReportData, limits: Limits) -> str:
    table = data.prefixes
    if table.empty:
        return ""
    rows = [
        [
            escape(str(r["prefix"])),
            f"{int(r['count']):,}",
            format_seconds(r["total_s"]),
            format_seconds(r["mean_s"]),
            format_bytes(r["nbytes"]),
            f"<span{_s('bad')}>{int(r['errors'])}</span>"
            if r["errors"]
            else str(int(r["errors"])),
        ]
        for r in table.head(limits.prefixes).to_dict("records")
    ]
    more = len(table) - limits.prefixes
    extra = f"<p>+{more} more prefixes in the full report.</p>" if more > 0 else ""
    return (
        f"<h4{_s('h4')}>Task prefixes</h4>"
        + _table(["prefix", "tasks", "total", "mean", "bytes", "errors"], rows)
        + extra
    )


def render(data: ReportData, *, full: bool = False) -> str:
    """The report of ``data`` as one HTML fragment (a full page with ``full``)."""
    limits = Limits(full)
    s = data.summary
    title = (
        f"dask-observe run {escape(str(s['id']))} {escape(repr(str(s['name'])))}: "
        f"{escape(status_line(s))}"
    )
    body = (
        f'<div class="dobs-report"{_s("report")} data-run-id="{escape(str(s["id"]))}">'
        f"<h3{_s('h3')}>{title}</h3>"
        + partial(data)
        + _summary(data)
        + _flags(data)
        + standing.render(data.stopped, _s)
        + _task_stream(data, limits)
        + _time_split(data, limits)
        + _memory(data, limits)
        + _profile(data, limits)
        + _transfers(data, limits)
        + _prefixes(data, limits)
        + failures(data)
        + alerts(data, limits)
        + footer(data, full)
        + "</div>"
    )
    return page(title, body) if full else body

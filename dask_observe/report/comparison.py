"""A comparison of two runs as HTML (``Comparison._repr_html_``): the
figures side by side with a bar each, what else changed, the code that
changed most. Escaped throughout: names, prefixes and code are the cluster's."""

from __future__ import annotations

import math
from dataclasses import fields
from html import escape
from typing import Any

from dask_observe.analysis import verdicts
from dask_observe.analysis.changes import code_diff
from dask_observe.analysis.compare import Comparison
from dask_observe.analysis.comparing import (
    CODE_ROWS,
    per_task_text,
    ratio_text,
    shown,
    where,
)
from dask_observe.analysis.profiles import path_change
from dask_observe.analysis.trees import CallPath
from dask_observe.report.icicle import icicle
from dask_observe.report.svg import image
from dask_observe.units import format_seconds

_COLORS = {
    "regression": "#d62728",
    "improvement": "#2ca02c",
    verdicts.BUSIER_HOST: "#b8860b",
    verdicts.QUIETER_HOST: "#b8860b",
    "": "#8c8c8c",
}


def _bar(ratio: float, verdict: str) -> str:
    """A bar from the 1.0 line: right for slower/bigger, left for faster."""
    width, middle = 160, 80
    if ratio != ratio:
        return ""
    # log2 scale: 2x fills one side, 0.5x the other.
    offset = max(-1.0, min(1.0, math.log2(max(ratio, 1e-9)))) * middle
    x, w = (middle, offset) if offset >= 0 else (middle + offset, -offset)
    # An image, not inline SVG: untrusted notebooks drop <svg> (see report.svg).
    return image(
        f'<svg width="{width}" height="12" viewBox="0 0 {width} 12" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-label="{ratio_text(ratio)}">'
        f'<rect x="{x:.1f}" y="2" width="{max(w, 1):.1f}" height="8" '
        f'fill="{_COLORS[verdict]}"/>'
        f'<line x1="{middle}" x2="{middle}" y1="0" y2="12" stroke="#999"/></svg>'
    )


def _change_cells(area: str, what: str, a: object, b: object) -> str:
    """The a and b cells of a change; a cell's code as its diff (escaped)."""
    if area == "code" and what == "cell":
        diff = escape("\n".join(code_diff(a, b)))
        return (
            '<td colspan="2"><pre style="margin:0;font-size:11px;'
            f'white-space:pre-wrap">{diff}</pre></td>'
        )
    return f"<td>{escape(str(a))}</td><td>{escape(str(b))}</td>"


def render_html(c: Comparison) -> str:
    head = (
        f"<b>Run {c.a['id']} {escape(repr(str(c.a['name'])))}</b> (a) vs "
        f"<b>run {c.b['id']} {escape(repr(str(c.b['name'])))}</b> (b): "
        f"{escape(c.marks_text())}"
    )
    if c.host_text():
        head = f"{head}<br>{escape(c.host_text())}"
    if c.work:
        head = f"<b>{escape(c.work_text())}</b><br>{head}"
    rows = "".join(
        f'<tr data-verdict="{escape(r["verdict"])}"><td>{escape(r["figure"])}</td>'
        f"<td>{shown(r['a'], r['unit'])}</td><td>{shown(r['b'], r['unit'])}</td>"
        f"<td>{ratio_text(r['ratio'])}</td><td>{_bar(r['ratio'], r['verdict'])}</td>"
        f'<td style="color:{_COLORS[r["verdict"]]}">{escape(r["verdict"])}</td></tr>'
        for r in c.table.to_dict("records")
    )
    changed = "".join(
        f'<tr data-changed="{escape(area)}"><td>{escape(area)}</td>'
        f"<td>{escape(what)}</td>{_change_cells(area, what, a, b)}</tr>"
        for area, what, a, b in c.changed
    )
    if changed:
        changed = (
            '<p><b>What else changed</b></p><table style="border-collapse:collapse">'
            f"<tr><th></th><th></th><th>a</th><th>b</th></tr>{changed}</table>"
        )
    return (
        '<div class="dobs-compare" style="font-size:13px">'
        f'<p>{head}</p><table style="border-collapse:collapse"><tr><th>figure</th>'
        f"<th>a</th><th>b</th><th>b/a</th><th></th><th></th></tr>{rows}</table>"
        f"{changed}{_code_html(c)}</div>"
    )


def _code_html(c: Comparison) -> str:
    """The functions whose time changed most, and b's profile coloured by
    its change against a (an image: see ``report.svg``)."""
    code = c.profile_changes().head(CODE_ROWS)
    if code.empty:
        return ""
    rows = "".join(
        f'<tr data-code-verdict="{escape(r["verdict"])}"><td><code>'
        f"{escape(str(r['function']))}</code></td><td>{escape(where(r))}</td>"
        f"<td>{format_seconds(r['a_s'])}</td><td>{format_seconds(r['b_s'])}</td>"
        f"<td>{ratio_text(r['ratio'])}</td>"
        f'<td style="color:{_COLORS[r["verdict"]]}">{escape(r["verdict"])}</td>'
        f"<td>{escape(per_task_text(r).lstrip('; '))}</td></tr>"
        for r in code.to_dict("records")
    )
    chart = differential_icicle(*c.profiles) if c.profiles else ""
    return (
        "<p><b>Code that changed most</b> (time in the function itself)</p>"
        '<table class="dobs-code-changes" style="border-collapse:collapse">'
        "<tr><th>function</th><th>where</th><th>a</th><th>b</th><th>b/a</th>"
        f"<th></th><th>per task</th></tr>{rows}</table>"
        + (f'<p data-figure="profile-diff">{image(chart)}</p>' if chart else "")
    )


# -- the differential icicle -------------------------------------------------------

_SLOWER = ("#fee0d2", "#fc9272", "#ef3b2c", "#a50f15")
_FASTER = ("#deebf7", "#9ecae1", "#4292c6", "#08519c")
_SAME = "#e0e0e0"


def differential_icicle(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Run b's profile as an icicle graph (a box per task prefix, its
    functions below), each box coloured by its change against the same call
    path in run a (``profiles.path_change``): reds slower, darker the larger
    the ratio, blues faster, grey within sampling noise."""
    change = path_change(a, b)

    def fill(node: dict[str, Any], path: CallPath) -> str:
        step = change(node, path)
        if step == 0:
            return _SAME
        return (_SLOWER if step > 0 else _FASTER)[abs(step) - 1]

    return icicle(
        b,
        fill=fill,
        legend="colour: time on that call path against run a "
        "(red slower, blue faster, grey within sampling noise)",
    )


class ShownComparison(Comparison):
    """A comparison that Jupyter shows as its HTML (``_repr_html_``)."""

    def _repr_html_(self) -> str:
        return render_html(self)


def displayable(comparison: Comparison) -> ShownComparison:
    """``comparison`` as one that Jupyter shows as HTML: what ``compare``
    gives users (the comparison itself is data, of the layer below)."""
    if isinstance(comparison, ShownComparison):
        return comparison
    return ShownComparison(
        **{f.name: getattr(comparison, f.name) for f in fields(comparison) if f.init}
    )

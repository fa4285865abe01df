"""SVG charts: the task stream, legends and bars (memory timelines: :mod:`.memory`).

No JavaScript and no stylesheet: every chart is a standalone SVG document (its
colours and fonts in attributes), so that :func:`image` can put it in an
``<img src="data:image/svg+xml;base64,...">``, which JupyterLab's sanitizer keeps
in an untrusted notebook (it drops inline ``<svg>`` and ``<style>``). Tasks are
binned into pixel columns, so a chart's size depends on its lanes and width, not
on how many tasks ran; runs small enough get a rectangle (with a tooltip, where
the chart is inline) per task instead.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from dask_observe.units import format_seconds

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

#: What XML 1.0 cannot hold even as a character reference: one of these in a
#: task key made the whole chart a broken image.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def escape(text: str) -> str:
    """Text for a chart (an SVG image, parsed as XML): escaped, and what XML
    cannot hold at all shown as U+FFFD."""
    return html.escape(_NOT_XML.sub("\ufffd", text))


#: Dask's task-stream colours for the phases around a task's compute.
PHASE_COLORS = {
    "transfer": "#ff0000",
    "disk-read": "#ffa500",
    "disk-write": "#ffa500",
    "deserialize": "#808080",
}
#: Colours for task prefixes: sixteen that stay apart from each other and from
#: the phase colours above (no red, orange or grey), in light and dark themes.
#: (Tableau's 10 and 20 without those, and darker tones of them.)
PALETTE = (
    "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
    "#393b79", "#637939", "#843c39", "#7b4173", "#aec7e8", "#98df8a", "#c5b0d5",
    "#f7b6d2", "#9edae5",
)  # fmt: skip

#: Text inside charts: readable on light and dark backgrounds alike (an image
#: cannot inherit the page's colours).
TEXT = 'font-family="sans-serif" font-size="10" fill="#808080"'
#: A plot's frame.
FRAME = 'fill="none" stroke="#808080" stroke-opacity="0.4"'
SVG_ROOT = 'xmlns="http://www.w3.org/2000/svg" role="img"'

WIDTH = 860
LABEL_WIDTH = 150
#: Runs with at most this many tasks get a rectangle and tooltip per task.
EXACT_LIMIT = 500
#: Lanes drawn at most; more are merged per worker.
MAX_LANES = 96


def _slot(name: str) -> int:
    digest = hashlib.md5(name.encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:4], "big") % len(PALETTE)


def prefix_colors(prefixes: Iterable[str]) -> dict[str, str]:
    """A colour per prefix: each its own while there are no more prefixes than
    colours, and the same for a prefix from run to run.

    Each prefix has a colour of its name (a hash, as Dask's dashboard does, so
    that ``sum`` is drawn alike in every report); where two names want the same
    colour, the one later in sorting takes the next free one. (Dask's own
    ``color_of`` let two of a run's prefixes share a colour.)"""
    colors: dict[str, str] = {}
    free = set(range(len(PALETTE)))
    for name in sorted(set(prefixes)):
        slot = _slot(name)
        if free:
            while slot not in free:
                slot = (slot + 1) % len(PALETTE)
            free.discard(slot)
        colors[name] = PALETTE[slot]
    return colors


def image(chart: str) -> str:
    """A chart as an ``<img>`` with a ``data:`` URI: what survives the HTML
    sanitizers of untrusted notebooks. Its ``aria-label`` becomes the ``alt``."""
    root = re.match(r"<svg\b[^>]*>", chart)
    if root is None:  # not a chart (a "nothing to show" note): as it is
        return chart
    attributes = dict(re.findall(r'(\w[\w-]*)="([^"]*)"', root[0]))
    data = base64.b64encode(chart.encode()).decode()
    return (
        f'<img src="data:image/svg+xml;base64,{data}" '
        f'width="{attributes.get("width", "")}" '
        f'height="{attributes.get("height", "")}" '
        f'alt="{attributes.get("aria-label", "chart")}" '
        'style="max-width:100%;height:auto">'
    )


def _segments(tasks: pd.DataFrame) -> pd.DataFrame:
    """Compute and phase segments: lane, category, start, stop (seconds).

    Only compute has recorded start/stop times; the phases that serve it are
    placed against it (transfer, disk read and deserialisation before, disk write
    after), as long as they lasted.
    """
    import pandas as pd

    done = tasks[tasks["start"].notna() & tasks["stop"].notna()]
    parts = [
        pd.DataFrame(
            {
                "lane": done["lane"],
                "category": done["prefix"],
                "start": done["start"],
                "stop": done["stop"],
            }
        )
    ]
    before = done["start"].copy()
    for column, phase in (
        ("deserialize_s", "deserialize"),
        ("disk_read_s", "disk-read"),
        ("transfer_s", "transfer"),
    ):
        length = done[column].fillna(0.0)
        has = length > 0
        parts.append(
            pd.DataFrame(
                {
                    "lane": done["lane"][has],
                    "category": phase,
                    "start": (before - length)[has],
                    "stop": before[has],
                }
            )
        )
        before = before - length
    write = done["disk_write_s"].fillna(0.0)
    has = write > 0
    parts.append(
        pd.DataFrame(
            {
                "lane": done["lane"][has],
                "category": "disk-write",
                "start": done["stop"][has],
                "stop": (done["stop"] + write)[has],
            }
        )
    )
    return pd.concat(parts, ignore_index=True)


def _lanes(tasks: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The tasks with lanes merged per worker when there are too many threads."""
    lanes = sorted(tasks["lane"].unique())
    if len(lanes) > MAX_LANES:
        tasks = tasks.assign(lane=tasks["worker"].fillna("?"))
        lanes = sorted(tasks["lane"].unique())
    return tasks, lanes


def task_stream(tasks: pd.DataFrame, duration: float, colors: dict[str, str]) -> str:
    """The task stream: a lane per worker thread, a colour per prefix, Dask's
    phase colours for transfer, disk and deserialisation."""
    if tasks.empty:
        return "<p>No task ran in this run.</p>"
    tasks, lanes = _lanes(tasks)
    segments = _segments(tasks)
    lane_h = max(3, min(16, 360 // len(lanes)))
    plot_w = WIDTH - LABEL_WIDTH
    height = lane_h * len(lanes) + 24
    scale = plot_w / max(duration, 1e-9)
    row_of = {lane: i for i, lane in enumerate(lanes)}
    parts = [
        f'<svg width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        f'{SVG_ROOT} aria-label="task stream">'
    ]
    if lane_h >= 10:
        for lane, i in row_of.items():
            parts.append(
                f'<text x="{LABEL_WIDTH - 4}" y="{i * lane_h + lane_h - 3}" '
                f'text-anchor="end" {TEXT}>{escape(short_address(lane))}</text>'
            )
    if len(tasks) <= EXACT_LIMIT:
        parts += _exact_rects(tasks, segments, row_of, lane_h, scale, colors)
    else:
        parts += _binned_rects(segments, row_of, lane_h, plot_w, duration, colors)
    parts.append(_time_axis(duration, lane_h * len(lanes), plot_w))
    parts.append("</svg>")
    return "".join(parts)


def short_address(lane: str) -> str:
    """A worker's address without its scheme, as lanes and tables show it."""
    return lane.removeprefix("tcp://").removeprefix("inproc://")


def _fill(category: str, colors: dict[str, str]) -> str:
    phase = PHASE_COLORS.get(category)
    return phase or colors.get(category) or PALETTE[_slot(category)]


def _exact_rects(
    tasks: pd.DataFrame,
    segments: pd.DataFrame,
    row_of: dict[str, int],
    lane_h: int,
    scale: float,
    colors: dict[str, str],
) -> list[str]:
    parts = []
    keys = iter(zip(tasks["key"], tasks["start"], tasks["stop"], strict=True))
    n_compute = int((tasks["start"].notna() & tasks["stop"].notna()).sum())
    for i, (lane, category, start, stop) in enumerate(segments.itertuples(index=False)):
        x = LABEL_WIDTH + start * scale
        w = max((stop - start) * scale, 0.5)
        y = row_of[lane] * lane_h
        title = category
        if i < n_compute:  # compute segments come first, in task order
            key, _, _ = next(keys)
            title = f"{key} ({format_seconds(stop - start)})"
        parts.append(
            f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{lane_h - 1}" '
            f'fill="{_fill(category, colors)}">'
            f"<title>{escape(str(title))}</title></rect>"
        )
    return parts


def _binned_rects(
    segments: pd.DataFrame,
    row_of: dict[str, int],
    lane_h: int,
    plot_w: int,
    duration: float,
    colors: dict[str, str],
) -> list[str]:
    """A rectangle per run of pixel columns with the same dominant category;
    its opacity says how busy the lane was there."""
    import numpy as np

    n_bins = plot_w // 3
    width = duration / n_bins
    categories = sorted(segments["category"].unique())
    cat_of = {c: i for i, c in enumerate(categories)}
    busy = np.zeros((len(row_of), len(categories), n_bins))
    lane = _indices(segments["lane"], row_of)
    cat = _indices(segments["category"], cat_of)
    start = np.clip(segments["start"].to_numpy(), 0, duration)
    stop = np.clip(segments["stop"].to_numpy(), 0, duration)
    first = np.minimum((start / width).astype(int), n_bins - 1)
    last = np.minimum((stop / width).astype(int), n_bins - 1)
    one = first == last
    np.add.at(busy, (lane[one], cat[one], first[one]), (stop - start)[one])
    for i in np.flatnonzero(~one):  # segments across columns: few, usually
        for b in range(first[i], last[i] + 1):
            lo, hi = max(start[i], b * width), min(stop[i], (b + 1) * width)
            busy[lane[i], cat[i], b] += max(hi - lo, 0.0)
    return _bin_rects(busy, categories, lane_h, width, plot_w / n_bins, colors)


def _indices(values: pd.Series, index_of: dict[str, int]) -> np.ndarray:
    """``values.map(index_of)`` as an array, a lookup per distinct value: a
    million tasks' lanes mapped one by one took 0.9 s of a report."""
    import numpy as np
    import pandas as pd

    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return np.array([index_of[u] for u in uniques], dtype=np.int64)[codes]


def _bin_rects(
    busy: np.ndarray,
    categories: list[str],
    lane_h: int,
    bin_s: float,
    bin_px: float,
    colors: dict[str, str],
) -> list[str]:
    """One path per colour and opacity, a ``M x y h w v h h -w z`` per run of
    columns: ~20 bytes a rectangle rather than ~100 for a ``<rect>``."""
    import numpy as np

    total = busy.sum(axis=1)  # lanes x bins
    dominant = busy.argmax(axis=1)
    # Opacity in quarters, so that neighbouring columns merge.
    level = np.ceil(np.clip(total / bin_s, 0, 1) * 4) / 4
    paths: dict[tuple[int, float], list[str]] = {}
    n = busy.shape[2]
    for row in range(busy.shape[0]):
        b = 0
        while b < n:
            if level[row, b] == 0:
                b += 1
                continue
            end = b + 1
            while (
                end < n
                and dominant[row, end] == dominant[row, b]
                and level[row, end] == level[row, b]
            ):
                end += 1
            x = LABEL_WIDTH + b * bin_px
            w = (end - b) * bin_px
            paths.setdefault((int(dominant[row, b]), float(level[row, b])), []).append(
                f"M{x:.0f} {row * lane_h}h{w:.0f}v{lane_h - 1}h-{w:.0f}z"
            )
            b = end
    return [
        f'<path fill="{_fill(categories[cat], colors)}"'
        + ("" if level_ >= 1 else f' fill-opacity="{level_:.2f}"')
        + f' d="{"".join(d)}"/>'
        for (cat, level_), d in paths.items()
    ]


def _time_axis(duration: float, y: int, plot_w: int) -> str:
    ticks = []
    for i in range(5):
        t = duration * i / 4
        x = LABEL_WIDTH + plot_w * i / 4
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        ticks.append(
            f'<text x="{x:.0f}" y="{y + 16}" text-anchor="{anchor}" '
            f"{TEXT}>{format_seconds(t)}</text>"
        )
    return (
        f'<line x1="{LABEL_WIDTH}" y1="{y + 2}" x2="{LABEL_WIDTH + plot_w}" '
        f'y2="{y + 2}" stroke="#999"/>' + "".join(ticks)
    )


def swatches(items: list[tuple[str, str]], dashed: bool = False) -> str:
    """A legend as a chart: a colour swatch and a name per item, in rows."""
    x = y = 0
    parts = []
    for name, color in items:
        width = 18 + 6 * len(name)
        if x and x + width > WIDTH:
            x, y = 0, y + 16
        parts.append(
            f'<rect x="{x}" y="{y + 3}" width="10" height="10" fill="{color}"/>'
            if color
            else ""
        )
        parts.append(f'<text x="{x + 14}" y="{y + 12}" {TEXT}>{escape(name)}</text>')
        x += width + 10
    height = y + 16
    label = "legend: " + ", ".join(name for name, _ in items)
    return (
        f'<svg width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        f'{SVG_ROOT} aria-label="{escape(label)}">{"".join(parts)}</svg>'
    )


def legend(prefixes: list[str], shown: int, colors: dict[str, str]) -> str:
    """Colour swatches for the first ``shown`` of a run's ``prefixes`` (in
    ``colors``, from :func:`prefix_colors` of them all) and for the phases."""
    more = max(len(prefixes) - shown, 0)
    items = [(p, colors[p]) for p in prefixes[:shown]] + [
        ("transfer", PHASE_COLORS["transfer"]),
        ("disk", PHASE_COLORS["disk-read"]),
        ("deserialize", PHASE_COLORS["deserialize"]),
    ]
    if more:
        items.append((f"+{more} more prefixes", ""))
    return swatches(items)


def share_bar(share: float, width: int = 160) -> str:
    """A horizontal bar filled to ``share`` (0 to 1) of ``width`` pixels."""
    filled = round(max(0.0, min(share, 1.0)) * width)
    return (
        f'<svg width="{width}" height="10" viewBox="0 0 {width} 10" {SVG_ROOT} '
        f'aria-label="{share:.0%}">'
        f'<rect x="0.5" y="0.5" width="{width - 1}" height="9" {FRAME}/>'
        f'<rect x="0" y="0" width="{filled}" height="10" fill="#2a7fb8"/></svg>'
    )

"""SVG charts: legends and bars (the task stream: :mod:`.taskstream`; memory
timelines: :mod:`.memorycharts`).

No JavaScript and no stylesheet: every chart is a standalone SVG document (its
colours and fonts in attributes), so that :func:`image` can put it in an
``<img src="data:image/svg+xml;base64,...">``, which JupyterLab's sanitizer keeps
in an untrusted notebook (it drops inline ``<svg>`` and ``<style>``).
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections.abc import Iterable

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


def palette_slot(name: str) -> int:
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
        slot = palette_slot(name)
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


def short_address(lane: str) -> str:
    """A worker's address without its scheme, as lanes and tables show it."""
    return lane.removeprefix("tcp://").removeprefix("inproc://")


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

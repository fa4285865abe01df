"""The run's profile as an icicle graph: callers above, callees below, each
function as wide as the share of samples it was on the stack for.

A standalone SVG like the other charts (see :mod:`svg`), so it survives as an
image where sanitizers drop inline SVG; each box also carries a ``<title>``
(function, file, line, seconds), a tooltip where the chart is inline.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from dask_observe.analysis.trees import CallPath
from dask_observe.plaintext import short_path
from dask_observe.report.svg import FRAME, SVG_ROOT, TEXT, WIDTH, escape
from dask_observe.units import format_seconds

ROW = 15
#: Levels drawn at most (deeper frames are cut off at the bottom).
MAX_DEPTH = 24
#: Boxes narrower than this (pixels) are not drawn; their share stays in the parent.
MIN_WIDTH = 1.0
#: Characters a label fits per pixel of box width (10 px sans-serif).
CHAR_PX = 6.2
#: Frames of dask and distributed themselves: grey, so that the user's own
#: functions (coloured) stand out.
_FRAMEWORK = ("/dask/", "/distributed/", "/threading.py", "/concurrent/futures/")
_WARM = ("#e6550d", "#fd8d3c", "#fdae6b", "#d94801", "#f16913", "#fdd0a2", "#a63603")


def _fill(filename: str) -> str:
    if any(part in filename for part in _FRAMEWORK):
        return "#c7c7c7"
    digest = hashlib.md5(filename.encode(), usedforsecurity=False).digest()
    return _WARM[digest[0] % len(_WARM)]


def _frame(node: dict[str, Any]) -> tuple[str, str, int]:
    return (str(node["name"]), str(node["filename"]), int(node["line"]))


def _skip_chain(root: dict[str, Any]) -> tuple[dict[str, Any], CallPath]:
    """The first node under ``root`` with several callees, and the frames
    above it that had one each: the thread pool's bootstrap frames, the same
    in every sample, would take most of the height and say nothing."""
    node, path = root, CallPath()
    # Only frames that were in every sample below: one whose own lines took
    # samples (a count above its callee's) is drawn.
    while len(node["children"]) == 1 and node["children"][0]["count"] >= node["count"]:
        node = node["children"][0]
        path = (*path, _frame(node))
    return node, path


#: Compiled code (a native profile's frames, grafted beneath Python's).
_NATIVE = "#6baed6"


def _by_file(node: dict[str, Any], path: CallPath) -> str:
    return _NATIVE if node.get("native") else _fill(str(node["filename"]))


def icicle(
    profile: dict[str, Any],
    *,
    width: int = WIDTH,
    fill: Callable[[dict[str, Any], CallPath], str] = _by_file,
    legend: str = "width: time on the stack",
) -> str:
    """``profile`` as ``Run.profile_trees()`` has it: ``interval`` and ``root``.
    ``fill`` colours a box from its node and call path (by default, the
    user's own files warm, dask's grey)."""
    interval = float(profile.get("interval") or 0.01)
    top, top_path = _skip_chain(profile["root"])
    skipped = len(top_path)
    total = max(int(top["count"]), 1)
    scale = width / total
    boxes: list[str] = []
    depth_drawn = 0
    stack: list[tuple[dict[str, Any], float, int, CallPath]] = [(top, 0.0, 0, top_path)]
    while stack:
        node, x, depth, path = stack.pop()
        w = node["count"] * scale
        if w < MIN_WIDTH or depth >= MAX_DEPTH:
            continue
        depth_drawn = max(depth_drawn, depth + 1)
        name = str(node["name"]) or "(all)"
        where = (
            f"{short_path(str(node['filename']))}:{node['line']}"
            if node["filename"]
            else ""
        )
        seconds = node["count"] * interval
        tip = f"{name} {where} {format_seconds(seconds)} ({node['count'] / total:.0%})"
        fits = int((w - 4) / CHAR_PX)
        label = name if len(name) <= fits else name[: max(fits - 1, 0)] + "…"
        y = depth * ROW
        boxes.append(
            f'<g><title>{escape(tip)}</title><rect x="{x:.1f}" y="{y}" '
            f'width="{max(w - 0.5, 0.5):.1f}" height="{ROW - 1}" '
            f'fill="{fill(node, path)}"/>'
            + (
                f'<text x="{x + 2:.1f}" y="{y + 11}" font-family="sans-serif" '
                f'font-size="10" fill="#222">{escape(label)}</text>'
                if fits >= 3
                else ""
            )
            + "</g>"
        )
        child_x = x
        for child in node["children"]:
            stack.append((child, child_x, depth + 1, (*path, _frame(child))))
            child_x += child["count"] * scale
    height = depth_drawn * ROW + 16
    note = (
        f"{skipped} frame{'s' if skipped > 1 else ''} above in every sample; "
        if skipped
        else ""
    ) + f"{format_seconds(total * interval)} sampled; {legend}"
    return (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'{SVG_ROOT} aria-label="profile icicle graph">'
        f'<rect width="{width}" height="{height - 16}" {FRAME}/>'
        + "".join(boxes)
        + f'<text x="0" y="{height - 4}" {TEXT}>{escape(note)}</text></svg>'
    )

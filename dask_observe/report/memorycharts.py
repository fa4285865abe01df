"""Memory timelines as SVG: a worker's (or the cluster's) managed,
unmanaged and spilled memory stacked over time, its process memory as a line
over the stack, the memory limit on the scale; their captions and legend.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from dask_observe.report.svg import (
    FRAME,
    SVG_ROOT,
    escape,
    swatches,
)
from dask_observe.units import format_bytes

if TYPE_CHECKING:
    import pandas as pd


MEMORY_COLORS = {"managed": "#2a7fb8", "unmanaged": "#9ecae1", "spilled": "#8c8c8c"}
MEMORY_POINTS = 240
#: The worker's own fast samples of its process memory: a line over the stack.
PROCESS_COLOR = "#e6550d"
LIMIT_COLOR = "#d62728"


@functools.cache
def no_heartbeat() -> pd.DataFrame:
    """The memory series of a worker no heartbeat measured (killed before its
    first): its chart shows what its own samples and its nanny saw, if
    anything. One frame, so that a caption can tell it (``is``)."""
    import pandas as pd

    return pd.DataFrame(
        {"time": [0.0], "managed": [0.0], "unmanaged": [0.0], "spilled": [0.0],
         "limit": [0.0]}
    )  # fmt: skip


def _downsample(series: pd.DataFrame) -> pd.DataFrame:
    """At most MEMORY_POINTS samples, keeping each bucket's peak."""
    if len(series) <= MEMORY_POINTS:
        return series
    bucket = (series.index.to_numpy() * MEMORY_POINTS) // len(series)
    return series.groupby(bucket).max()


def process_peak(series: pd.DataFrame, process: pd.DataFrame | None) -> float:
    """The most memory the process held: heartbeats (managed + unmanaged) or
    its own faster samples. Spilled data is on disk: not in this figure."""
    held = series["managed"].to_numpy(dtype=float) + series["unmanaged"].to_numpy(
        dtype=float
    )
    peak = _top(held)
    if process is not None and not process.empty:
        peak = max(peak, _top(process["rss"].to_numpy(dtype=float)))
    return peak


def _top(values: np.ndarray) -> float:
    """The highest of ``values``, NaN left out (NaN for none), as pandas'
    ``max``: on arrays, as a chart and its caption ask several times for a
    few rows each (pandas' fixed cost, ~0.4 ms a call, was 4 ms a report)."""
    kept = values[~np.isnan(values)]
    return float(kept.max()) if len(kept) else float("nan")


def memory_chart(
    series: pd.DataFrame,
    duration: float,
    *,
    title: str,
    process: pd.DataFrame | None = None,
    width: int = 420,
    height: int = 90,
) -> str:
    """Process memory (managed and unmanaged, stacked) against the limit
    (dashed, always on the scale: a chart whose scale followed a small peak
    looked full); the process memory the worker sampled itself (a line: the
    climb between two heartbeats that got it killed shows there); and data
    spilled to disk apart (dotted), never stacked on what is in memory."""
    series = _downsample(series.reset_index(drop=True))
    peak = process_peak(series, process)
    spilled = _top(series["spilled"].to_numpy(dtype=float))
    limit = _top(series["limit"].to_numpy(dtype=float))
    top = max(peak, limit, spilled, 1.0) * 1.05
    sx = width / max(duration, 1e-9)
    sy = height / top
    x = [f"{t * sx:.1f}" for t in series["time"]]
    lower = [0.0] * len(series)
    layers = []
    for name in ("managed", "unmanaged"):
        upper = [lo + float(v) for lo, v in zip(lower, series[name], strict=True)]
        if max(upper) > max(lower, default=0):
            points = [
                f"{xi},{height - u * sy:.1f}" for xi, u in zip(x, upper, strict=True)
            ]
            points += [
                f"{xi},{height - lo * sy:.1f}"
                for xi, lo in zip(reversed(x), reversed(lower), strict=True)
            ]
            layers.append(
                f'<polygon points="{" ".join(points)}" fill="{MEMORY_COLORS[name]}"/>'
            )
        lower = upper
    lines = []
    if limit:
        lines.append(
            f'<line x1="0" x2="{width}" y1="{height - limit * sy:.1f}" '
            f'y2="{height - limit * sy:.1f}" stroke="{LIMIT_COLOR}" '
            'stroke-dasharray="4 3" data-line="limit"/>'
        )
    if spilled > 0:
        trace = " ".join(
            f"{xi},{height - float(v) * sy:.1f}"
            for xi, v in zip(x, series["spilled"], strict=True)
        )
        lines.append(
            f'<polyline points="{trace}" fill="none" '
            f'stroke="{MEMORY_COLORS["spilled"]}" stroke-width="1.5" '
            'stroke-dasharray="1 2" data-line="spilled"/>'
        )
    if process is not None and not process.empty:
        trace = " ".join(
            f"{t * sx:.1f},{height - v * sy:.1f}"
            for t, v in zip(process["time"], process["rss"], strict=True)
        )
        lines.append(
            f'<polyline points="{trace}" fill="none" stroke="{PROCESS_COLOR}" '
            'stroke-width="1.5" data-line="process"/>'
        )
    return (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'{SVG_ROOT} aria-label="memory of {escape(title)}">'
        f'<rect width="{width}" height="{height}" {FRAME}/>'
        f"{''.join(layers)}{''.join(lines)}</svg>"
    )


def memory_caption(
    series: pd.DataFrame,
    title: str,
    note: str = "",
    process: pd.DataFrame | None = None,
) -> str:
    """A chart's caption: "worker: peak 1.2 GiB of 2 GiB limit, 300 MiB
    spilled to disk": the peak is of process memory, which the limit is about;
    what was spilled is named apart."""
    peak = process_peak(series, process)
    limit = _top(series["limit"].to_numpy(dtype=float))
    spilled = _top(series["spilled"].to_numpy(dtype=float))
    if series is no_heartbeat() and (process is None or process.empty):
        return f"{escape(title)}: no memory reading" + (f" {escape(note)}" * bool(note))
    return (
        f"{escape(title)}: peak {format_bytes(peak)}"
        + (f" of {format_bytes(limit)} limit" if limit else "")
        + (f", {format_bytes(spilled)} spilled to disk" if spilled > 0 else "")
        + (f" {escape(note)}" if note else "")
    )


def memory_legend() -> str:
    return swatches(
        [
            ("managed", MEMORY_COLORS["managed"]),
            ("unmanaged", MEMORY_COLORS["unmanaged"]),
            ("spilled to disk (dotted, not in memory)", MEMORY_COLORS["spilled"]),
            ("process memory, sampled by the worker (line)", PROCESS_COLOR),
            ("memory limit (dashed)", LIMIT_COLOR),
        ]
    )

"""Bytes moved between workers as a matrix: a row a sending worker, a column a
receiving one, darker the more bytes (performance_report's "bandwidth by
worker", as a standalone SVG like the other charts, see :mod:`svg`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dask_observe.report.svg import FRAME, SVG_ROOT, TEXT, escape, short_address
from dask_observe.units import format_bytes

if TYPE_CHECKING:
    import pandas as pd

#: Workers a matrix shows at most (those that moved the most bytes).
MAX_WORKERS = 40
LABEL = 150
TOP = 80


def _shade(share: float) -> str:
    """White to dark blue, by share of the largest cell on a log scale (a
    cluster's transfers span orders of magnitude)."""
    level = 0.15 + 0.85 * share
    r, g, b = (int(255 - (255 - c) * level) for c in (8, 81, 156))
    return f"#{r:02x}{g:02x}{b:02x}"


def transfer_matrix(pairs: pd.DataFrame) -> str:
    """``pairs``: a row a (peer, worker) pair with its bytes, seconds and
    bandwidth (``figures.transfer_pairs``)."""
    sent = pairs.groupby("peer")["bytes"].sum()
    received = pairs.groupby("worker")["bytes"].sum()
    moved = sent.add(received, fill_value=0).sort_values(ascending=False)
    workers = sorted(moved.index[:MAX_WORKERS])
    index = {w: i for i, w in enumerate(workers)}
    cell = max(6, min(24, 640 // max(len(workers), 1)))
    biggest = math.log1p(float(pairs["bytes"].max()))
    rects = []
    for peer, worker, moved_bytes, bandwidth in zip(
        pairs["peer"], pairs["worker"], pairs["bytes"], pairs["bandwidth"], strict=True
    ):
        if peer not in index or worker not in index:
            continue
        share = math.log1p(float(moved_bytes)) / biggest if biggest else 0.0
        tip = (
            f"{peer} -> {worker}: {format_bytes(float(moved_bytes))} "
            f"at {format_bytes(float(bandwidth))}/s"
        )
        rects.append(
            f'<rect x="{LABEL + index[worker] * cell}" '
            f'y="{TOP + index[peer] * cell}" width="{cell - 1}" '
            f'height="{cell - 1}" fill="{_shade(share)}"><title>{escape(tip)}</title>'
            "</rect>"
        )
    size = len(workers) * cell
    labels = []
    for w, i in index.items():
        name = escape(short_address(w))
        if cell >= 10:
            labels.append(
                f'<text x="{LABEL - 4}" y="{TOP + i * cell + cell / 2 + 3:.0f}" '
                f'text-anchor="end" {TEXT}>{name}</text>'
            )
            cx, cy = LABEL + i * cell + cell / 2 + 3, TOP - 4
            labels.append(
                f'<text x="{cx:.0f}" y="{cy}" transform="rotate(-45 {cx:.0f} {cy})" '
                f"{TEXT}>{name}</text>"
            )
    width = max(LABEL + size + TOP, 400)  # room for the caption
    height = TOP + size + 18
    return (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'{SVG_ROOT} aria-label="bytes moved between workers">'
        f'<rect x="{LABEL - 0.5}" y="{TOP - 0.5}" width="{size}" height="{size}" '
        f"{FRAME}/>"
        + "".join(rects)
        + "".join(labels)
        + f'<text x="{LABEL}" y="{height - 4}" {TEXT}>rows send, columns receive; '
        "darker: more bytes</text></svg>"
    )

"""The task stream: a lane per worker thread, a colour per prefix, Dask's phase
colours for transfer, disk and deserialisation.

Runs of at most :data:`EXACT_LIMIT` tasks are drawn from their rows, a
rectangle (with a tooltip, where the chart is inline) per task. Larger ones are
first reduced to :class:`StreamBins`, the seconds each lane spent on each
colour in each 3-pixel column: what is drawn then depends on the lanes and
the width, not on how many tasks ran, and is small enough to be stored with the
run (:mod:`.tasks`) so that a report never reads a million rows again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dask_observe.report.svg import (
    LABEL_WIDTH,
    PALETTE,
    PHASE_COLORS,
    SVG_ROOT,
    TEXT,
    WIDTH,
    escape,
    palette_slot,
    short_address,
)
from dask_observe.units import format_seconds

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

#: Runs with at most this many tasks get a rectangle and tooltip per task.
EXACT_LIMIT = 500
#: Lanes drawn at most; more are merged per worker.
MAX_LANES = 96
#: Columns of the binned stream: one each 3 pixels of the plot.
COLUMNS = (WIDTH - LABEL_WIDTH) // 3


@dataclass
class StreamBins:
    """A task stream reduced to pixel columns: ``busy[lane, category, column]``
    is the seconds ``lanes[lane]`` spent on ``categories[category]`` (a prefix
    or a phase) in the column, each :data:`COLUMNS`-th of the run."""

    lanes: list[str]
    categories: list[str]
    busy: np.ndarray

    def to_json(self) -> dict[str, Any]:
        """The bins as JSON: the non-zero cells as (lane, category, column,
        seconds); a million tasks' stream is some thousands of them."""
        import numpy as np

        cells = np.argwhere(self.busy > 0)
        return {
            "lanes": self.lanes,
            "categories": self.categories,
            "cells": [
                [int(l), int(c), int(b), float(self.busy[l, c, b])]
                for l, c, b in cells  # noqa: E741 (l: a lane)
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StreamBins:
        import numpy as np

        lanes, categories = list(data["lanes"]), list(data["categories"])
        busy = np.zeros((len(lanes), len(categories), COLUMNS))
        for lane, category, column, seconds in data["cells"]:
            busy[lane, category, column] = seconds
        return cls(lanes, categories, busy)


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


def bins(tasks: pd.DataFrame, duration: float) -> StreamBins:
    """The stream of ``tasks`` (``figures.task_table``'s rows: times in seconds
    since the run's start) over ``duration`` seconds, in pixel columns."""
    import numpy as np

    tasks, lanes = _lanes(tasks)
    segments = _segments(tasks)
    row_of = {lane: i for i, lane in enumerate(lanes)}
    width = duration / COLUMNS
    categories = sorted(segments["category"].unique())
    cat_of = {c: i for i, c in enumerate(categories)}
    busy = np.zeros((len(row_of), len(categories), COLUMNS))
    lane = _indices(segments["lane"], row_of)
    cat = _indices(segments["category"], cat_of)
    start = np.clip(segments["start"].to_numpy(), 0, duration)
    stop = np.clip(segments["stop"].to_numpy(), 0, duration)
    first = np.minimum((start / width).astype(int), COLUMNS - 1)
    last = np.minimum((stop / width).astype(int), COLUMNS - 1)
    one = first == last
    np.add.at(busy, (lane[one], cat[one], first[one]), (stop - start)[one])
    for i in np.flatnonzero(~one):  # segments across columns: few, usually
        for b in range(first[i], last[i] + 1):
            lo, hi = max(start[i], b * width), min(stop[i], (b + 1) * width)
            busy[lane[i], cat[i], b] += max(hi - lo, 0.0)
    return StreamBins([str(lane) for lane in lanes], categories, busy)


def task_stream(
    stream: pd.DataFrame | StreamBins, duration: float, colors: dict[str, str]
) -> str:
    """The chart of a run's tasks: ``stream`` their rows (at most
    :data:`EXACT_LIMIT`, a rectangle each) or their :class:`StreamBins`."""
    if isinstance(stream, StreamBins):
        lanes = stream.lanes
        tasks = None
    else:
        tasks, lanes = _lanes(stream)
    if not lanes:
        return "<p>No task ran in this run.</p>"
    lane_h = max(3, min(16, 360 // len(lanes)))
    plot_w = WIDTH - LABEL_WIDTH
    height = lane_h * len(lanes) + 24
    parts = [
        f'<svg width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        f'{SVG_ROOT} aria-label="task stream">'
    ]
    if lane_h >= 10:
        for i, lane in enumerate(lanes):
            parts.append(
                f'<text x="{LABEL_WIDTH - 4}" y="{i * lane_h + lane_h - 3}" '
                f'text-anchor="end" {TEXT}>{escape(short_address(lane))}</text>'
            )
    if tasks is not None:
        scale = plot_w / max(duration, 1e-9)
        parts += _exact_rects(tasks, lanes, lane_h, scale, colors)
    else:
        assert isinstance(stream, StreamBins)
        parts += _bin_rects(stream, lane_h, duration / COLUMNS, colors)
    parts.append(_time_axis(duration, lane_h * len(lanes), plot_w))
    parts.append("</svg>")
    return "".join(parts)


def _few_segments(tasks: pd.DataFrame) -> list[tuple[Any, Any, float, float]]:
    """:func:`_segments` of at most :data:`EXACT_LIMIT` tasks, in plain
    Python: the same segments in the same order, where five small frames and
    their concatenation were ~5 ms of a one-task run's report."""

    def known(value: Any) -> bool:  # not NaN, not None
        return value is not None and value == value

    def seconds(value: Any) -> float:
        return float(value) if known(value) else 0.0

    columns = (
        "lane", "prefix", "start", "stop",
        "deserialize_s", "disk_read_s", "transfer_s", "disk_write_s",
    )  # fmt: skip
    rows = zip(*(tasks[column] for column in columns), strict=True)
    done = [row for row in rows if known(row[2]) and known(row[3])]
    found: list[tuple[Any, Any, float, float]] = [
        (lane, prefix, float(start), float(stop))
        for lane, prefix, start, stop, *_ in done
    ]
    before = [float(row[2]) for row in done]
    for column, phase in ((4, "deserialize"), (5, "disk-read"), (6, "transfer")):
        for i, row in enumerate(done):
            length = seconds(row[column])
            if length > 0:
                found.append((row[0], phase, before[i] - length, before[i]))
            before[i] -= length
    for row in done:
        write = seconds(row[7])
        if write > 0:
            found.append((row[0], "disk-write", float(row[3]), float(row[3]) + write))
    return found


def _fill(category: str, colors: dict[str, str]) -> str:
    phase = PHASE_COLORS.get(category)
    return phase or colors.get(category) or PALETTE[palette_slot(category)]


def _exact_rects(
    tasks: pd.DataFrame,
    lanes: list[str],
    lane_h: int,
    scale: float,
    colors: dict[str, str],
) -> list[str]:
    row_of = {lane: i for i, lane in enumerate(lanes)}
    parts = []
    # Compute segments come first, in the order of the tasks that have both
    # times: their keys are those tasks' (a task with no times, one that
    # erred before it ran, is drawn nowhere and names nothing: counted in,
    # it shifted every later rectangle's name to its neighbour's).
    timed = tasks["start"].notna() & tasks["stop"].notna()
    keys = iter(tasks["key"][timed])
    n_compute = int(timed.sum())
    segments = _few_segments(tasks)
    for i, (lane, category, start, stop) in enumerate(segments):
        x = LABEL_WIDTH + start * scale
        w = max((stop - start) * scale, 0.5)
        y = row_of[lane] * lane_h
        title = category
        if i < n_compute:
            title = f"{next(keys)} ({format_seconds(stop - start)})"
        parts.append(
            f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{lane_h - 1}" '
            f'fill="{_fill(category, colors)}">'
            f"<title>{escape(str(title))}</title></rect>"
        )
    return parts


def _indices(values: pd.Series, index_of: dict[str, int]) -> np.ndarray:
    """``values.map(index_of)`` as an array, a lookup per distinct value: a
    million tasks' lanes mapped one by one took 0.9 s of a report."""
    import numpy as np
    import pandas as pd

    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return np.array([index_of[u] for u in uniques], dtype=np.int64)[codes]


def _bin_rects(
    stream: StreamBins, lane_h: int, bin_s: float, colors: dict[str, str]
) -> list[str]:
    """A rectangle per run of pixel columns with the same dominant category,
    its opacity how busy the lane was there: one path per colour and opacity,
    a ``M x y h w v h h -w z`` per run of columns (~20 bytes a rectangle
    rather than ~100 for a ``<rect>``)."""
    import numpy as np

    busy, categories = stream.busy, stream.categories
    if not categories:  # tasks that never ran (died with their workers)
        return []
    column_px = (WIDTH - LABEL_WIDTH) / COLUMNS
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
            x = LABEL_WIDTH + b * column_px
            w = (end - b) * column_px
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

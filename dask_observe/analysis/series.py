"""Samples taken when something changed, read as values that hold.

The capture samples a worker when it has news (``capture.metrics.WorkerSamples``;
a worker's memory when it moved, or a heartbeat's interval after the last): on
a large cluster a worker has no row in most seconds. A figure that compares or
sums workers at one time holds each worker's last value until its next sample,
or until the worker left, when it had none.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

#: Marks a worker's removal: no sampled value here is negative.
_GONE = -1.0


def held(samples: pd.DataFrame, removals: Iterable[tuple[float, str]]) -> pd.DataFrame:
    """``samples`` (time, worker, value) as a table of their times by workers,
    each worker's value held until its next sample or its removal (time,
    worker): NaN where a worker had none, or had left."""
    import pandas as pd

    gone = list(removals)
    if not gone:  # most runs: no worker left (seven steps fewer, ~2 ms)
        table = last_by(samples, ["time"], "worker").ffill()
        return table[sorted(set(samples["worker"]))]
    marks = pd.DataFrame(
        {
            "time": [float(t) for t, _ in gone],
            "worker": [w for _, w in gone],
            "value": _GONE,
        }
    )
    marked = stacked([samples[["time", "worker", "value"]], marks])
    # "last": a removal at a sample's very time wins, as it came after it.
    table = last_by(marked, ["time"], "worker").ffill()
    table = table.loc[table.index.isin(samples["time"])]
    table = table.where(table != _GONE)
    return table[sorted(set(samples["worker"]))]


def last_by(frame: pd.DataFrame, index: list[str], columns: str) -> pd.DataFrame:
    """``frame``'s last ``value`` for each ``index`` and ``columns`` pair, as a
    table of ``index`` (sorted) by ``columns`` (sorted): what
    ``pivot_table(aggfunc="last")`` makes of values that are never NaN, in a
    third of its time (~4 ms a call of fixed cost, twice in a one-task run's
    report; ``benchmarks/README.md``, "What a recorded cell costs")."""
    return frame.groupby([*index, columns], sort=True)["value"].last().unstack(columns)


def stacked(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The rows of ``frames`` (with the same columns) one after the other,
    numbered anew, the frames without a row left out. pandas 2.2 leaves such
    frames out of the result's column types itself, and warns that a later
    version will count them: left out here, the answer is the same in every
    pandas we support (the lowest, 2.2.2, warned in process memory)."""
    import pandas as pd

    full = [frame for frame in frames if len(frame)]
    if not full:
        return frames[0].iloc[:0].reset_index(drop=True)
    return pd.concat(full, ignore_index=True)

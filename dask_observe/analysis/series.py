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
    marks = pd.DataFrame(
        {
            "time": [float(t) for t, _ in gone],
            "worker": [w for _, w in gone],
            "value": _GONE,
        }
    )
    marked = pd.concat([samples[["time", "worker", "value"]], marks], ignore_index=True)
    # "last": a removal at a sample's very time wins, as it came after it.
    table = marked.pivot_table(
        index="time", columns="worker", values="value", aggfunc="last", sort=True
    ).ffill()
    table = table.loc[table.index.isin(samples["time"])]
    table = table.where(table != _GONE)
    return table[sorted(set(samples["worker"]))]

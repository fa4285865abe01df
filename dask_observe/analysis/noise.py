"""Is a difference between two runs more than noise?

Two samples of task durations are compared with the Mann-Whitney U test (a rank
test: no assumption about the shape of durations, which are skewed), in its
normal approximation with the tie correction; a whole-run figure is compared
against the spread of earlier runs of the same job.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: Fewer tasks than this on either side: too few to tell noise from a change.
MIN_SAMPLES = 5
#: A shift is taken as real below this two-sided p-value.
SIGNIFICANCE = 0.001
#: Earlier runs needed to know a figure's spread (three or four say little of
#: it), and how many interquartile ranges beyond their quartiles a value must
#: lie: Tukey's "far out" fences. A band of the mean and three standard
#: deviations let one outlier hide any change: five runs of a job, the
#: first 3.49 s (a fresh cluster) and the rest 0.55-1.21 s, held a run of
#: 3.89 s (nine times the work), and, simulated with one outlier among five
#: or ten runs (log-normal jitter of 10% and 30%), it held a 3x slower run
#: every time, where these fences mark it 66-100% of the time; a run of the
#: same job is marked about as often by either (1.7-8.8% against 2.2-7.0%),
#: and two kinds of runs (cache hit, miss) do not narrow it as a median's
#: absolute deviation does (40% marked).
MIN_HISTORY = 5
FENCE_IQRS = 3.0


def shift(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    min_ratio: float = 1.0,
) -> int | None:
    """+1 when ``b``'s values are significantly larger than ``a``'s, -1 when
    smaller, 0 when the difference is noise; None with too few of either.

    ``min_ratio``: the medians must also differ by this factor. Tasks of one
    run are not independent samples: a whole run's tasks can be 20-30% faster
    than another's (warm caches, a quieter machine), which a rank test on
    hundreds of tasks calls significant."""
    import numpy as np

    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    x, y = x[~np.isnan(x)], y[~np.isnan(y)]
    n, m = len(x), len(y)
    if n < MIN_SAMPLES or m < MIN_SAMPLES:
        return None
    both = np.concatenate([x, y])
    order = both.argsort(kind="mergesort")
    ranks = np.empty(n + m)
    ranks[order] = np.arange(1, n + m + 1, dtype=float)
    # Tied values share their mean rank.
    values, inverse, counts = np.unique(both, return_inverse=True, return_counts=True)
    if len(values) < n + m:
        sums = np.bincount(inverse, weights=ranks)
        ranks = (sums / counts)[inverse]
    u = ranks[n:].sum() - m * (m + 1) / 2  # b's U: large when b is larger
    mean = n * m / 2
    ties = float(((counts**3) - counts).sum())
    variance = n * m / 12 * ((n + m + 1) - ties / ((n + m) * (n + m - 1)))
    if variance <= 0:
        return 0
    z = (u - mean) / math.sqrt(variance)
    p = math.erfc(abs(z) / math.sqrt(2))
    if p >= SIGNIFICANCE:
        return 0
    ma, mb = float(np.median(x)), float(np.median(y))
    if ma <= 0 or max(mb / ma, ma / mb if mb > 0 else float("inf")) < min_ratio:
        return 0
    return 1 if z > 0 else -1


def outside(history: Sequence[float], value: float, floor: float = 0.0) -> int | None:
    """+1 when ``value`` lies above the spread of ``history`` (earlier runs),
    -1 below, 0 within; None with too little history to know its spread. The
    spread reaches ``FENCE_IQRS`` interquartile ranges beyond the quartiles,
    and at least ``floor`` (a fraction of their median) either side of the
    median: one outlier moves neither."""
    # Plain Python: a band is ten numbers, judged for every run of a history
    # (numpy's percentile took 103 us a call, this 5 us: 2026-12-03).
    earlier = [float(h) for h in history if h == h]
    if len(earlier) < MIN_HISTORY:
        return None
    # (numpy's default, linear between the closest ranks)
    q1, median, q3 = statistics.quantiles(earlier, n=4, method="inclusive")
    reach = FENCE_IQRS * (q3 - q1)
    margin = floor * abs(median)
    if value > max(q3 + reach, median + margin):
        return 1
    if value < min(q1 - reach, median - margin):
        return -1
    return 0

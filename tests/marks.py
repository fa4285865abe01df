"""What every comparison must hold, whatever its runs: checked by the
comparison tests on real and written runs."""

from __future__ import annotations

from dask_observe.analysis.compare import Comparison


def marks_agree(comparison: Comparison) -> None:
    """No printed mark disagrees in direction with the ratio printed beside
    it: slower marks sit beside ratios above 1, faster ones below."""
    slower = {"regression", "slower on a busier host"}
    faster = {"improvement", "faster on a quieter host"}
    pairs = list(
        zip(comparison.table["verdict"], comparison.table["ratio"], strict=True)
    )
    code = comparison.profile_changes()
    pairs += list(zip(code["verdict"], code["ratio"], strict=True))
    pairs += list(zip(code["per_task_verdict"], code["per_task_ratio"], strict=True))
    for mark, ratio in pairs:
        assert mark in slower | faster | {""}, mark
        if mark in slower:
            assert ratio > 1, (mark, ratio)
        if mark in faster:
            assert ratio < 1, (mark, ratio)

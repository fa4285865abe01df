"""What a run measured besides its telemetry: distributed's fine performance
metrics (the span's, and the cluster's meanwhile) and its statistical profile."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dask_observe.analysis.trees import merge_profiles, prune_profile, subtract_profile

if TYPE_CHECKING:
    from distributed import Client

logger = logging.getLogger(__name__)

#: (context, prefix, activity, unit) -> value.
FineTotals = dict[tuple[str, str, str, str], float]
#: (context, prefix, activity, unit, value).
FineRow = tuple[str, str, str, str, float]

#: Compute seconds a run needs for its profile to be read (10 ms samples).
PROFILE_S = 0.5
#: Task prefixes (those with the most compute) whose own profiles are read.
PROFILE_PREFIXES = 10


def fine_map(rows: Any) -> dict[tuple[str, str, str, str], float]:
    """(context, prefix, activity, unit) -> value, from the scheduler plugin's
    fine metrics rows."""
    return {(str(c), str(p), str(a), str(u)): float(v) for c, p, a, u, v in rows}


def fine_rows(
    totals: FineTotals,
    of_span: FineTotals,
    before: FineTotals,
    *,
    span_id: str | None,
    adopted: bool,
) -> list[FineRow]:
    """The run's fine metrics: its span's (``of_span``), and the cluster's
    meanwhile (``totals`` less ``before``, the totals as it started) in the
    contexts that no span holds (all of them without a span). A run whose
    tasks went (some of them) to an older span (``adopted``) has no span of
    its own to read: it takes the cluster's, as a whole-cluster run."""
    if any(totals.get(k, 0.0) < v for k, v in before.items()):
        before = {}  # a new scheduler counts from zero
    rows = [
        (c, p, a, u, value - before.get((c, p, a, u), 0.0))
        for (c, p, a, u), value in totals.items()
    ]
    if span_id is not None and not adopted:
        spanned = ("execute", "p2p")  # distributed.spans.CONTEXTS_WITH_SPAN_ID
        rows = [r for r in rows if r[0] not in spanned]
        rows += [(*k, v) for k, v in of_span.items()]
    return [r for r in rows if r[-1]]


class FineMeter:
    """A run's fine performance metrics, read through ``call`` (a handler of
    the scheduler's plugin, by name): the cluster's totals as the run starts
    (``before``), and at its end its own (:meth:`rows`)."""

    def __init__(self, call: Callable[..., Any], span_id: str | None) -> None:
        self.call = call
        self.span_id = span_id
        self.before: FineTotals = {}

    def totals(self, span_id: str | None) -> FineTotals:
        """A span's fine performance metrics, or (span_id None) the whole
        cluster's."""
        return fine_map(self.call("dask_observe_fine_metrics", span_id=span_id))

    def baseline(self, flush: Callable[[], Any]) -> None:
        """The cluster's totals as a whole-cluster run starts, after the
        workers sent (``flush``) what they measured before it, which would
        otherwise count as its own. (A run with a span only needs the totals
        for what its span cannot hold: its start's reply has them.)"""
        try:
            flush()
            self.before = self.totals(None)
        except Exception as e:  # they are extra: the run records without them
            logger.warning("dask-observe: cannot read the fine metrics: %s", e)
            self.before = {}

    def rows(self, ended: dict[str, Any] | None) -> list[FineRow]:
        """The run's fine metrics (:func:`fine_rows`). ``ended``: the
        scheduler's reply to ``dask_observe_end``, which holds both the
        cluster's totals and the span's (else they are asked for)."""
        if ended is not None:
            totals, of_span = fine_map(ended["fine"]), fine_map(ended["span_fine"])
        else:
            totals = self.totals(None)
            of_span = {} if self.span_id is None else self.totals(self.span_id)
        return fine_rows(
            totals,
            of_span,
            self.before,
            span_id=self.span_id,
            adopted=ended is not None and bool(ended.get("adopted", False)),
        )


def profiles(client: Client, started: float, fine: list[FineRow]) -> dict[str, Any]:
    """distributed's statistical profile of a run's time window (it began at
    ``started``, and measured ``fine``): the whole
    cluster's (prefix "") and each task prefix's (the PROFILE_PREFIXES with
    the most compute). A run with less compute than PROFILE_S has too few
    samples to say anything, and pays nothing for it.

    The window starts at the first profile cycle (1 s) that ended after the
    run's start: up to a second before it (idle threads are not sampled,
    so that adds only what else ran just before).
    """
    import dask.config
    from dask.utils import parse_timedelta

    from dask_observe.recording import plugins

    compute: dict[str, float] = {}
    for context, prefix, activity, unit, value in fine:
        busy = activity != "idle or other spans"
        if context == "execute" and unit == "seconds" and prefix and busy:
            compute[prefix] = compute.get(prefix, 0.0) + value
    if sum(compute.values()) < PROFILE_S:
        return {}
    prefixes = sorted(compute, key=lambda p: -compute[p])[:PROFILE_PREFIXES]
    trees = plugins.profiles(client, started, prefixes)
    interval = float(
        parse_timedelta(
            dask.config.get("distributed.worker.profile.interval"), default="ms"
        )
    )
    whole = trees.pop("")
    counted = {p: tree for p, tree in trees.items() if tree.get("count")}
    by_prefix = {p: prune_profile(tree, interval) for p, tree in counted.items()}
    # A prefix's tree tells which function its task threads were in even
    # at the innermost frame, which the whole tree cannot where one caller
    # (dask's ``__call__``) runs several task functions. So the whole run
    # is the sum of its prefixes' trees and of what is left of the whole
    # without them (other prefixes; work beside the run on a shared
    # cluster, or just before it in the window's first second).
    rest = subtract_profile(whole, list(counted.values()))
    parts = list(by_prefix.values())
    if rest.get("count") or not parts:
        parts.append(prune_profile(rest, interval, of=whole.get("count", 0)))
    return {"": merge_profiles(parts, interval), **by_prefix}

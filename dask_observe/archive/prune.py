"""Retention on an archive (``dask-observe prune --archive URL``): the runs a
policy lets go, manifest first (from then on no reader lists the run), then
the run's folder; and the folders of publishers that died before their
manifest, once a day old."""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dask_observe.archive.location import RUNS

if TYPE_CHECKING:
    from dask_observe.archive.listing import Listing
    from dask_observe.store.retention import Policy

#: A run folder without a manifest is a publisher's that died once its run
#: began this long ago (its uid says when; a run's end publishes it).
ORPHAN_AFTER_S = 86_400.0


@dataclass(frozen=True)
class PrunedArchive:
    """What a prune of an archive removed (with ``dry_run``, would remove)."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    nbytes: int = 0
    dry_run: bool = False


def prune(listing: Listing, policy: Policy, *, dry_run: bool = False) -> PrunedArchive:
    """Remove the published runs ``policy`` lets go: beyond the newest
    ``keep_last``, ended before ``max_age_s``, and the oldest while the
    archive is larger than ``max_bytes`` (the sizes its manifests give)."""
    records = listing.manifests()  # newest first
    now = time.time()
    doomed: dict[str, dict[str, Any]] = {}
    if policy.keep_last is not None:
        doomed.update((r["uid"], r) for r in records[policy.keep_last :])
    if policy.max_age_s is not None:
        cutoff = now - policy.max_age_s
        doomed.update(
            (r["uid"], r) for r in records if (r["ended"] or r["started"]) < cutoff
        )
    if policy.max_bytes is not None:
        left = sum(_size(r) for r in records if r["uid"] not in doomed)
        for r in reversed(records):
            if left <= policy.max_bytes:
                break
            if r["uid"] not in doomed:
                doomed[r["uid"]] = r
                left -= _size(r)
    location = listing.location
    listed = {r["uid"] for r in records}
    orphans = [
        uid
        for uid in location.names(RUNS, "")
        if uid not in listed
        and _age(uid, now) > ORPHAN_AFTER_S
        and not location.fs.exists(location.manifest_path(uid))
    ]
    if not dry_run:
        for uid in doomed:
            location.remove(location.manifest_path(uid))  # unlisted from now on
            location.remove(location.run_path(uid), recursive=True)
        for uid in orphans:
            location.remove(location.run_path(uid), recursive=True)
    return PrunedArchive(
        runs=sorted(doomed.values(), key=lambda r: r["started"], reverse=True),
        orphans=orphans,
        nbytes=sum(_size(r) for r in doomed.values()),
        dry_run=dry_run,
    )


def _size(record: dict[str, Any]) -> int:
    return int(sum((record.get("files") or {}).values()))


def _age(uid: str, now: float) -> float:
    """Seconds since the run of ``uid`` began (its name says); 0 when the name
    is not one of ours (left alone)."""
    try:
        began = calendar.timegm(time.strptime(uid.split("-", 1)[0], "%Y%m%dT%H%M%SZ"))
    except ValueError:
        return 0.0
    return now - began

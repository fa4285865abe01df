"""The archive's runs, listed from their manifests without a lock.

The manifests are the truth: a run is in the archive while its manifest is.
Listing thousands of them one read each is slow on object storage, so a
reader that found many not yet compacted writes them, with what the listing
parts held, into one new part, then removes the parts it read. Parts are only
a cache of manifests: two readers compacting at once write two parts that
say the same, a pruned run's row in a part is ignored (its manifest is gone),
and a part removed under a reader makes it list again. Nothing a crash or a
race leaves can hide a published run or show one that is not there.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from dask_observe.archive.location import (
    FORMAT,
    LISTING,
    MANIFESTS,
    ArchiveError,
    Location,
)

if TYPE_CHECKING:
    import pandas as pd

#: Manifests outside every part that make a reader compact them.
COMPACT_AT = 50
#: Tries at listing while parts are replaced under it.
_TRIES = 5


class Listing:
    """The manifests of the archive at ``location``, read anew on each call."""

    def __init__(self, location: Location) -> None:
        self.location = location

    def manifests(self) -> list[dict[str, Any]]:
        """Every published run's manifest, newest first."""
        for _ in range(_TRIES):
            try:
                return self._manifests()
            except FileNotFoundError:  # a part compacted away meanwhile
                continue
        raise ArchiveError(
            f"the archive {self.location.url} changed under {_TRIES} listings "
            "in a row; try again"
        )

    def _manifests(self) -> list[dict[str, Any]]:
        location = self.location
        visible = {n.removesuffix(".json") for n in location.names(MANIFESTS, ".json")}
        parts = location.names(LISTING, ".parquet")
        known: dict[str, dict[str, Any]] = {}
        for part in parts:
            known.update(_read_part(location.read(location.path(LISTING, part))))
        missing = sorted(visible - known.keys())
        fetched = _fetch(location, missing)
        known.update(fetched)
        if len(fetched) >= COMPACT_AT:
            self._compact({u: m for u, m in known.items() if u in visible}, parts)
        found = [m for u, m in known.items() if u in visible]
        found.sort(key=lambda m: (m.get("started") or 0.0, m["uid"]), reverse=True)
        return found

    def _compact(self, manifests: dict[str, dict[str, Any]], parts: list[str]) -> None:
        """One part for all of ``manifests``; then the parts it replaces go.
        A reader that may not write leaves things as they are."""
        location = self.location
        name = f"part-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}.parquet"
        try:
            location.write(location.path(LISTING, name), _part(manifests))
            for part in parts:
                location.remove(location.path(LISTING, part))
        except (OSError, ArchiveError):  # read-only: compaction is an optimisation
            return


def _fetch(location: Location, uids: list[str]) -> dict[str, dict[str, Any]]:
    """The manifests of ``uids``, read at once (fsspec reads many paths
    concurrently on object stores); one that is unreadable or of a newer
    format is left out."""
    if not uids:
        return {}
    paths = {location.manifest_path(u): u for u in uids}
    read = location.fs.cat(list(paths), on_error="omit")
    found = {}
    for path, data in read.items():
        manifest = _parse(data)
        uid = paths.get(path) or paths.get(_strip_protocol(location, path))
        if manifest is not None and uid is not None and manifest.get("uid") == uid:
            found[uid] = manifest
    return found


def _strip_protocol(location: Location, path: str) -> str:
    stripped: str = location.fs._strip_protocol(path)
    return stripped


def _parse(data: bytes) -> dict[str, Any] | None:
    try:
        manifest = json.loads(data)
    except ValueError:
        return None
    if not isinstance(manifest, dict) or manifest.get("format", 0) > FORMAT:
        return None
    return manifest


def _part(manifests: dict[str, dict[str, Any]]) -> bytes:
    """A listing part: a row a run, its manifest as JSON; the environment in
    a column of its own, where a run's repeats the one before it (Parquet's
    dictionary holds each distinct one once)."""
    import pandas as pd

    rows = []
    for uid, manifest in manifests.items():
        rest = {k: v for k, v in manifest.items() if k != "environment"}
        environment = json.dumps(manifest.get("environment"), sort_keys=True)
        rows.append((uid, json.dumps(rest, default=str), environment))
    frame = pd.DataFrame(rows, columns=["uid", "manifest", "environment"])
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def _read_part(data: bytes) -> dict[str, dict[str, Any]]:
    import pandas as pd

    frame: pd.DataFrame = pd.read_parquet(io.BytesIO(data))
    found = {}
    environments: dict[str, Any] = {}  # each distinct one parsed once, shared
    for uid, text, environment in zip(
        frame["uid"], frame["manifest"], frame["environment"], strict=True
    ):
        manifest = _parse(text.encode())
        if manifest is not None:
            if environment not in environments:
                environments[environment] = json.loads(environment)
            manifest["environment"] = environments[environment]
            found[str(uid)] = manifest
    return found

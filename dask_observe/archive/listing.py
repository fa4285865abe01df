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

import contextlib
import io
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from dask_observe.archive.location import (
    LISTING,
    MANIFEST_BYTES,
    MANIFESTS,
    PART_BYTES,
    ArchiveError,
    Files,
    Location,
    Stamp,
)
from dask_observe.archive.manifest import parse

if TYPE_CHECKING:
    pass

#: Manifests outside every part that make a reader compact them.
COMPACT_AT = 50
#: Tries at listing while parts are replaced under it.
_TRIES = 5


#: The most rows a listing part may hold, and the most text its rows may
#: decode to (a 14 KB part of 6,000 copies of one 25 KB manifest took a
#: reader's process to 7.5 GB): a part beyond either is skipped.
PART_ROWS = 200_000
PART_TEXT = 64 * 2**20


class Listing:
    """The manifests of the archive at ``location``, read anew on each call."""

    def __init__(self, location: Location) -> None:
        self.location = location
        #: Entries the last listing skipped: manifests and parts that were
        #: not what they must be (not regular files, too large, not valid).
        self.skipped = 0
        #: What this reader read of each part and manifest, with the stamp
        #: it had: read again only once the listing says it changed (a
        #: server lists the archive each time the panel asks, and reading
        #: every manifest anew grew with the archive). None: a part that was
        #: not valid. Replaced, never emptied, by each listing: listings in
        #: two threads at once read each other's at worst.
        self._parts: dict[str, tuple[Stamp, dict[str, dict[str, Any]] | None]] = {}
        self._read: dict[str, tuple[Stamp, dict[str, Any]]] = {}

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
        names, skipped = location.files(MANIFESTS, ".json", MANIFEST_BYTES)
        stamps = {n.removesuffix(".json"): stamp for n, stamp in names.items()}
        visible = set(stamps)
        parts, skipped_parts = location.files(LISTING, ".parquet", PART_BYTES)
        skipped += skipped_parts
        known: dict[str, dict[str, Any]] = {}
        for part, stamp in parts.items():
            read = self._part(part, stamp, visible)
            if read is None:
                skipped += 1
                continue
            known.update((u, m) for u, m in read.items() if u in visible)
        # Manifests no part holds: as read before where unchanged, else read.
        missing = sorted(visible - known.keys())
        before = self._read
        kept = {
            u: before[u][1]
            for u in missing
            if u in before and before[u][0] == stamps[u]
        }
        fetched = _fetch(location, [u for u in missing if u not in kept])
        skipped += len(missing) - len(kept) - len(fetched)
        self._read = {u: (stamps[u], m) for u, m in {**kept, **fetched}.items()}
        known.update(kept)
        known.update(fetched)
        if len(fetched) >= COMPACT_AT:
            self._compact({u: m for u, m in known.items() if u in visible}, parts)
        read_parts = self._parts
        self._parts = {p: read_parts[p] for p in parts if p in read_parts}
        found = [m for u, m in known.items() if u in visible]
        found.sort(key=lambda m: (m["started"], m["uid"]), reverse=True)
        self.skipped = skipped
        return found

    def _part(
        self, part: str, stamp: Stamp, visible: set[str]
    ) -> dict[str, dict[str, Any]] | None:
        """The manifests a listing part holds, of runs in ``visible`` (see
        ``_read_part``); as read before while its stamp is the same. A part
        read before is never read again for runs published since: it was
        written before them (``_compact`` names each part anew)."""
        known = self._parts.get(part)
        if known is not None and known[0] == stamp:
            return known[1]
        location = self.location
        try:
            read = _read_part(
                location.read(location.path(LISTING, part), PART_BYTES), visible
            )
        except ArchiveError:
            read = None
        self._parts[part] = (stamp, read)
        return read

    def _compact(self, manifests: dict[str, dict[str, Any]], parts: Files) -> None:
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
    """The valid manifests of ``uids`` (each a regular file of at most
    MANIFEST_BYTES); one that is not, or is another run's, is left out.
    Object stores are read concurrently (fsspec), their sizes known from the
    listing; local files one by one, each opened as ``Location.read`` does."""
    if not uids:
        return {}
    paths = {location.manifest_path(u): u for u in uids}
    if location.local:
        read: dict[str, bytes] = {}
        for path in paths:
            with contextlib.suppress(OSError, ArchiveError):
                read[path] = location.read(path, MANIFEST_BYTES)
    else:
        read = location.fs.cat(list(paths), on_error="omit")
    found = {}
    for path, data in read.items():
        uid = paths.get(path) or paths.get(_strip_protocol(location, path))
        manifest = parse(data) if len(data) <= MANIFEST_BYTES else None
        if manifest is not None and uid is not None and manifest["uid"] == uid:
            found[uid] = manifest
    return found


def _strip_protocol(location: Location, path: str) -> str:
    stripped: str = location.fs._strip_protocol(path)
    return stripped


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


def _read_part(data: bytes, visible: set[str]) -> dict[str, dict[str, Any]] | None:
    """The valid manifests of a listing part, of the runs in ``visible`` (whose
    manifests are there), each once, read a batch at a time; None for a part
    that is not one, or holds more than PART_ROWS rows or PART_TEXT of text
    (it is skipped whole, and its runs' manifests read one by one instead)."""
    import pyarrow.parquet as pq

    try:
        part = pq.ParquetFile(io.BytesIO(data))
        if part.metadata.num_rows > PART_ROWS:
            return None
        found: dict[str, dict[str, Any]] = {}
        environments: dict[str, Any] = {}  # each distinct one parsed once, shared
        seen: set[str] = set()  # a run's row decoded once, valid or not
        text = 0
        for batch in part.iter_batches(
            batch_size=1000, columns=["uid", "manifest", "environment"]
        ):
            uids = batch.column(0).to_pylist()
            wanted = []
            for i, u in enumerate(uids):
                if u in visible and u not in seen:
                    seen.add(u)
                    wanted.append(i)
            if not wanted:  # rows of runs without a manifest are never decoded
                continue
            rows = batch.take(wanted)
            texts, envs = rows.column(1).to_pylist(), rows.column(2).to_pylist()
            for i, manifest_text, environment in zip(wanted, texts, envs, strict=True):
                if not isinstance(manifest_text, str) or not isinstance(
                    environment, str
                ):
                    continue
                text += len(manifest_text)
                if environment not in environments:
                    text += len(environment)
                    if text > PART_TEXT:
                        return None
                    environments[environment] = json.loads(environment)
                if text > PART_TEXT:
                    return None
                manifest = parse(manifest_text, environment=environments[environment])
                if manifest is not None and manifest["uid"] == uids[i]:
                    found[manifest["uid"]] = manifest
        return found
    except (OSError, ValueError, KeyError, RecursionError):  # not a part of ours
        return None

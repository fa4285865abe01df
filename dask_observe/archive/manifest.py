"""A manifest as read from the archive: checked field by field, since anyone
who can write the archive (a teammate, a CI job, an attacker with its
credentials) wrote it. An entry that fails is left out and counted, never
failing the listing (one manifest with ``"started": "2030-01-03"`` broke it
for everyone)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from dask_observe.archive.location import FORMAT

#: A run id of the archive (``location.new_uid``'s shape).
UID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{12}")
STATUSES = frozenset({"running", "finished", "failed", "interrupted"})
#: The longest text field kept (names, hosts, cluster addresses, messages).
MAX_TEXT = 4096


def _text(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_TEXT


def _number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


def _texts(value: Any) -> bool:
    return isinstance(value, list) and all(
        type(v) is str and len(v) <= MAX_TEXT for v in value
    )


def _paces(value: Any) -> bool:
    # Exact types, not isinstance: thousands of manifests a listing.
    return isinstance(value, dict) and all(
        type(k) is str and len(k) <= MAX_TEXT and type(v) in (int, float)
        and math.isfinite(v)
        for k, v in value.items()
    )  # fmt: skip


def _sizes(value: Any) -> bool:
    return isinstance(value, dict) and all(
        type(k) is str and len(k) <= MAX_TEXT and type(v) is int and v >= 0
        for k, v in value.items()
    )


#: Each field a reader uses, and what it must be. ``uid``, ``name``,
#: ``status`` and ``started`` must be there; the others may be missing.
FIELDS: dict[str, Callable[[Any], bool]] = {
    "format": _count,
    "uid": lambda v: isinstance(v, str) and UID.fullmatch(v) is not None,
    "name": _text,
    "status": lambda v: v in STATUSES,
    "started": _number,
    "ended": _optional(_number),
    "duration_s": _optional(_number),
    "n_tasks": _optional(_count),
    "n_failed": _optional(_count),
    "n_flags": _optional(_count),
    "n_lost": _optional(_count),
    "n_running": _optional(_count),
    "cluster": _optional(_text),
    "span_id": _optional(_text),
    "partial": _optional(_text),
    "host": _optional(_text),
    "pid": _optional(_count),
    "user": _optional(_text),
    "published": _optional(_number),
    "version": _optional(_text),
    "flags": _texts,
    "pace": _paces,
    "peak_memory": _optional(_number),
    "environment": _optional(lambda v: isinstance(v, dict)),
    "files": _sizes,
}
REQUIRED = ("uid", "name", "status", "started")


def valid(manifest: Any) -> dict[str, Any] | None:
    """``manifest`` with only the fields a reader uses, if each is what it
    must be and its format is one this version reads; None otherwise."""
    if not isinstance(manifest, dict):
        return None
    if any(key not in manifest for key in REQUIRED):
        return None
    version = manifest.get("format", 0)
    if not _count(version) or version > FORMAT:  # a newer writer's: not ours
        return None
    kept = {}
    for key, check in FIELDS.items():
        if key in manifest:
            if not check(manifest[key]):
                return None
            kept[key] = manifest[key]
    return kept


def parse(data: bytes | str, **fields: Any) -> dict[str, Any] | None:
    """A manifest from its JSON (with ``fields`` set: a listing part keeps the
    environment apart), checked (:func:`valid`); None if it is not one."""
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if fields and isinstance(manifest, dict):
        manifest.update(fields)
    return valid(manifest)

"""A team's history: runs published to shared storage (an fsspec URL), read
from any machine with no server to run.

``observe.archive`` makes each run publish itself when it ends (in the
background: a slow bucket never slows the cell); ``dask-observe publish``
and ``Run.publish`` publish runs recorded before; ``open_archive`` reads.
See :mod:`.publish` for what a published run is, :mod:`.listing` for how
thousands are listed without a lock, :mod:`.reader` for how they are read.
"""

from __future__ import annotations

from dask_observe.archive.location import ArchiveError, Location
from dask_observe.archive.publish import Published, configured_location, publish
from dask_observe.archive.reader import Archive

__all__ = [
    "Archive",
    "ArchiveError",
    "Location",
    "Published",
    "configured_location",
    "open_archive",
    "publish",
]


def open_archive(
    url: str | None = None, *, storage_options: dict[str, object] | None = None
) -> Archive:
    """The archive at ``url`` (default ``observe.archive``), with fsspec's
    ``storage_options`` (default ``observe.archive-options``)."""
    from dask_observe import config

    url = url or config.get("archive")
    if not url:
        raise ArchiveError(
            "no archive: give its URL, or set observe.archive "
            "(DASK_OBSERVE__ARCHIVE=s3://bucket/runs)"
        )
    if storage_options is None:
        storage_options = dict(config.get("archive-options") or {})
    return Archive(str(url), storage_options)

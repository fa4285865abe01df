"""A team's history: runs published to shared storage (an fsspec URL), read
from any machine with no server to run.

``observe.archive`` makes each run publish itself when it ends (in the
background: a slow bucket never slows the cell); ``dask-observe publish``
and ``Run.publish`` publish runs recorded before; ``open_archive`` reads.
See :mod:`.publish` for what a published run is, :mod:`.listing` for how
thousands are listed without a lock, :mod:`.reader` for how they are read.
"""

from __future__ import annotations

from dask_observe.archive.location import NO_ARCHIVE, ArchiveError, Location, configured
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
    url, options = configured(url, storage_options)
    if url is None:
        raise ArchiveError(NO_ARCHIVE)
    return Archive(url, options)

"""A team's history: runs published to shared storage (an fsspec URL), read
from any machine with no server to run.

``observe.archive`` makes each run publish itself when it ends (in the
background: a slow bucket never slows the cell); ``dask-observe publish``
and ``Run.publish`` publish runs recorded before. See :mod:`.publish` for
what a published run is, :mod:`.listing` for how thousands are listed
without a lock. Reading is the public API's (``dask_observe.open_archive``,
:mod:`dask_observe.api.archive`): an archive's runs are ``Run`` s.
"""

from __future__ import annotations

from dask_observe.archive.location import ArchiveError, Location
from dask_observe.archive.publish import Published, configured_location, publish

__all__ = [
    "ArchiveError",
    "Location",
    "Published",
    "configured_location",
    "publish",
]

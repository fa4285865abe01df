"""An archive (:mod:`dask_observe.archive`) read from any machine with the
read API of a store: its runs are :class:`~dask_observe.api.Run` s.

A run is read from the archive when asked for, into a store of the reader's
own (a temporary SQLite file): each run's rows get a slice of that store
(:mod:`dask_observe.store.slices`), and then every read of a store works on
it unchanged: logs, tasks, flags, reports, comparisons of runs from
different machines. Listings and histories read only the manifests.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dask_observe.analysis.history import frame_of, judge_records
from dask_observe.api import Store
from dask_observe.archive import location as location_module
from dask_observe.archive.listing import Listing
from dask_observe.archive.location import (
    NO_ARCHIVE,
    RUN_JSON_BYTES,
    RUN_TABLE_BYTES,
    ArchiveError,
    Location,
    configured,
)
from dask_observe.archive.prune import prune
from dask_observe.store import RunNotFound, slices
from dask_observe.store.slices import BY_RUN, TELEMETRY

if TYPE_CHECKING:
    from types import TracebackType

    import pandas as pd

    from dask_observe.api import Run
    from dask_observe.archive.prune import PrunedArchive
    from dask_observe.store import RunData
    from dask_observe.store.retention import Policy

#: The columns of ``archive.runs()``: a store's, then where and by whom.
ARCHIVE_COLUMNS = (
    "id", "name", "status", "started", "ended", "duration_s", "n_tasks",
    "n_failed", "n_flags", "cluster", "partial", "host", "user",
)  # fmt: skip


def open_archive(
    url: str | None = None, *, storage_options: dict[str, object] | None = None
) -> Archive:
    """The archive at ``url`` (default ``observe.archive``), with fsspec's
    ``storage_options`` (default ``observe.archive-options``)."""
    url, options = configured(url, storage_options)
    if url is None:
        raise ArchiveError(NO_ARCHIVE)
    return Archive(url, options)


class _Budget:
    """What a run's tables may still decode to (``RUN_DECODED_BYTES``),
    spent as each is decoded, a batch at a time: a table that says (in its
    metadata) or turns out (as it decodes) to be larger stops the import
    before it takes the memory."""

    def __init__(self, uid: str) -> None:
        self.uid = uid
        self.left = location_module.RUN_DECODED_BYTES

    def table(self, name: str, data: bytes) -> pd.DataFrame:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            part = pq.ParquetFile(io.BytesIO(data))
            meta = part.metadata
            groups = range(meta.num_row_groups)
            said = sum(meta.row_group(i).total_byte_size for i in groups)
            self._spend(name, said)
            self.left += said  # spent for real below, batch by batch
            batches = []
            for batch in part.iter_batches(batch_size=8192):
                self._spend(name, batch.nbytes)
                batches.append(batch)
            table = pa.Table.from_batches(batches, schema=part.schema_arrow)
            frame: pd.DataFrame = table.to_pandas()
            return frame
        except (pa.ArrowException, OSError, ValueError) as e:
            raise ArchiveError(f"run {self.uid}'s {name}.parquet: {e}") from None

    def _spend(self, name: str, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise ArchiveError(
                f"run {self.uid}'s tables decode to more than "
                f"{location_module.RUN_DECODED_BYTES / 2**30:g} GiB (at "
                f"{name}.parquet): not read; a run this large is read from "
                "the store that recorded it"
            )


class Archive:
    """The runs published to the archive at ``url`` (see
    ``dask_observe.open_archive``). Run ids here are the archive's: text,
    unique across machines (a unique beginning of one is enough)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None):
        self.location = Location(url, storage_options)
        self.url = self.location.url
        self.listing = Listing(self.location)
        self._lock = threading.Lock()
        self._imported: dict[str, int] = {}
        self._cache: Store | None = None
        self._folder: str | None = None
        self._closer: weakref.finalize[Any, Any] | None = None

    @property
    def path(self) -> str:
        """Where the archive is (as a store's path says where it is)."""
        return self.url

    # -- listing -----------------------------------------------------------------
    @property
    def skipped(self) -> int:
        """Entries the last listing left out: files that are not regular or
        too large, manifests and parts that are not valid (anyone who can
        write the archive may have put them there)."""
        return self.listing.skipped

    def run_records(
        self, limit: int | None = None, *, brief: bool = False
    ) -> list[dict[str, Any]]:
        """The published runs, newest first, as dicts with the columns of
        :meth:`runs` (and the rest of each manifest, ``brief`` or not: it is
        read whole)."""
        records = []
        for manifest in self.listing.manifests()[:limit]:
            records.append({**manifest, "id": manifest["uid"]})
        return records

    def runs(self) -> pd.DataFrame:
        """The published runs, newest first: a store's columns (``id`` the
        archive's) and ``host`` and ``user`` that recorded each."""
        import pandas as pd

        frame = pd.DataFrame(self.run_records(), columns=list(ARCHIVE_COLUMNS))
        for column in ("started", "ended"):
            frame[column] = pd.to_datetime(frame[column], unit="s", utc=True)
        frame["duration_s"] = frame["duration_s"].astype("float64")
        return frame

    def history(self, name: str, last: int | None = None) -> pd.DataFrame:
        """The runs of that name from every machine, oldest first, judged as
        a store's are (``Store.history``), from their manifests."""
        return frame_of(self.history_records(name, last=last))

    def history_records(
        self, name: str, last: int | None = None
    ) -> list[dict[str, Any]]:
        """:meth:`history` as dicts, as ``Store.history_records``."""
        records = [r for r in reversed(self.run_records()) if r["name"] == name]
        return judge_records([ArchivedEntry(self, r) for r in records], last=last)

    # -- runs ----------------------------------------------------------------------
    def uid(self, run: int | str = "last") -> str:
        """The archive id of ``run``: ``"last"``, an id, or its unique beginning."""
        text = str(run)
        location = self.location
        # Only a name of ours is a path (nothing like "../" reaches the store).
        if not re.fullmatch(r"[0-9A-Za-z][0-9A-Za-z-]*", text):
            if run != "last":
                raise RunNotFound(f"{text!r} is not a run id of {self.url}")
        elif location.fs.exists(location.manifest_path(text)):
            return text  # a whole id: no listing needed
        records = self.run_records()
        if not records:
            raise RunNotFound(f"the archive {self.url} holds no runs yet")
        if run == "last":
            return str(records[0]["uid"])
        matches = [r["uid"] for r in records if str(r["uid"]).startswith(text)]
        if text and len(matches) == 1:
            return str(matches[0])
        latest = ", ".join(f"{r['uid']} ({r['name']})" for r in records[:3])
        what = "more than one run" if matches else "no run"
        raise RunNotFound(
            f"{what} of {self.url} is {text!r}; the latest runs are {latest}"
        )

    def run(self, run: int | str = "last") -> Run:
        """A published run, read from the archive (once per archive object)
        into a store of this reader's: the read API of any run."""
        uid = self.uid(run)
        with self._lock:
            cache = self._store()
            if uid not in self._imported:
                self._imported[uid] = self._import(cache, uid)
            found = cache.run(self._imported[uid])
        found.archive_uid, found.archive_url = uid, self.url
        return found

    def _store(self) -> Store:
        if self._cache is None:
            self._folder = tempfile.mkdtemp(prefix="dask-observe-archive-")
            self._cache = Store(Path(self._folder) / "runs.sqlite")
            # Tied to the store, not to this object: runs read from it keep
            # their store (and its file) while they live.
            self._closer = weakref.finalize(
                self._cache, shutil.rmtree, self._folder, ignore_errors=True
            )
        return self._cache

    def _import(self, cache: Store, uid: str) -> int:
        import pandas as pd

        location = self.location

        def read(name: str) -> bytes:
            limit = RUN_TABLE_BYTES if name.endswith(".parquet") else RUN_JSON_BYTES
            try:
                return location.read(location.run_path(uid, name), limit)
            except FileNotFoundError:
                raise ArchiveError(
                    f"run {uid} of {self.url} is missing {name} (pruned meanwhile?)"
                ) from None

        record = json.loads(read("run.json"))
        record["environment"] = json.loads(read("environment.json"))
        verdict = json.loads(read("verdict.json"))
        budget = _Budget(uid)
        tables = {
            name: budget.table(name, read(f"{name}.parquet"))
            for name in (*TELEMETRY, *BY_RUN)
        }
        try:
            start, end = int(record["seq_start"] or 0), int(record["seq_end"])
        except (KeyError, TypeError, ValueError):
            raise ArchiveError(f"run {uid} of {self.url}: no valid run.json") from None
        for name in TELEMETRY:  # within its own block: never another run's rows
            seq = tables[name]["seq"] if "seq" in tables[name] else pd.Series([])
            if len(seq) and not (seq.min() > start and seq.max() <= end):
                raise ArchiveError(
                    f"run {uid} of {self.url} has {name} rows outside its own"
                )
        tables["verdict"] = pd.DataFrame(
            [{"version": verdict["version"], "flags": json.dumps(verdict["flags"])}]
        )
        return slices.put(cache, record, tables)

    def prune(self, policy: Policy, *, dry_run: bool = False) -> PrunedArchive:
        """Remove the published runs ``policy`` lets go (see
        :mod:`dask_observe.archive.prune`); ``dry_run`` changes nothing."""
        return prune(self.listing, policy, dry_run=dry_run)

    # -- the end -------------------------------------------------------------------
    def close(self) -> None:
        """Let go of the runs read so far (their temporary store)."""
        if self._cache is not None:
            self._cache.close()
        if self._closer is not None:
            self._closer()
        self._cache = None
        self._imported.clear()

    def __enter__(self) -> Archive:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<dask_observe.Archive {self.url}>"


class ArchivedEntry:
    """A run of an archive as its history reads it: from its manifest, and
    from the archive only for a comparison with the run before."""

    def __init__(self, archive: Archive, record: dict[str, Any]) -> None:
        self.archive = archive
        self.record = record

    def pace(self) -> dict[str, float]:
        return dict(self.record.get("pace") or {})

    def environment(self) -> dict[str, Any]:
        return dict(self.record.get("environment") or {})

    def peak(self) -> float | None:
        peak = self.record.get("peak_memory")
        return None if peak is None else float(peak)

    def data(self) -> RunData:
        return self.archive.run(self.record["uid"])

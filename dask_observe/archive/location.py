"""Where an archive lives: an fsspec URL (a shared directory, ``s3://``,
``gs://``, ``abfs://``), its layout, and the few operations the archive needs
of it, each safe without locks:

    <url>/runs/<uid>/...          a run's files (tables, run.json, ...)
    <url>/manifests/<uid>.json    written last: the run is in the archive
    <url>/listing/part-*.parquet  manifests compacted (a cache of them)

An object store writes each object whole; a local or network directory gets a
temporary name and a rename. Credentials are fsspec's business (its config,
the environment, ``observe.archive-options``); none is written anywhere.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from dask_observe import config
from dask_observe.store import StoreError

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

#: What a listing says of a file: its size, and what changes when it is
#: written again (its time and inode here; an object store's time or tag).
#: A reader keeps what it read of a file while its stamp is the same.
Stamp = tuple[int, str]
Files = dict[str, Stamp]

#: A local file changed more recently than this is read again whatever its
#: stamp: its time has the file system's granularity (a kernel tick, ~4 ms),
#: and two writes of one size within a tick look alike.
_RACY_NS = 2_000_000_000

#: The keys of an object store's listing entry that change when the object
#: is written again, first found first used.
_CHANGED = (
    "mtime", "LastModified", "last_modified", "updated", "ETag", "etag", "created",
)  # fmt: skip

RUNS = "runs"
MANIFESTS = "manifests"
LISTING = "listing"
#: The archive's own format: a reader refuses what a newer writer made.
FORMAT = 1

#: The most bytes read of each kind of file the archive holds: whoever can
#: write it chose them. A manifest is a few KiB (its environment most of it).
MANIFEST_BYTES = 2**20
#: A listing part (compressed): thousands of manifests.
PART_BYTES = 64 * 2**20
#: A run's JSON files, and its tables (a million-task run's are ~100 MiB).
RUN_JSON_BYTES = 16 * 2**20
RUN_TABLE_BYTES = 2**30
#: What a run's tables may decode to, all together: a few KiB of Parquet can
#: say gigabytes (a column of one repeated long text), so the bytes read
#: bound nothing of the memory it takes. A million-task run decodes to
#: well under it.
RUN_DECODED_BYTES = 4 * 2**30


class ArchiveError(StoreError):
    """The archive cannot be reached, written or read."""


#: What every reader and publisher says when no archive is given or set.
NO_ARCHIVE = (
    "no archive: give its URL, or set observe.archive "
    "(DASK_OBSERVE__ARCHIVE=s3://bucket/runs)"
)


def configured(
    url: str | None = None, options: dict[str, Any] | None = None
) -> tuple[str | None, dict[str, Any]]:
    """The archive's URL and fsspec options: those given, else
    ``observe.archive`` and ``observe.archive-options`` (read when called: a
    block's ``dask.config.set`` may end right after)."""
    url = url or config.get("archive")
    if options is None:
        options = dict(config.get("archive-options") or {})
    return (str(url) if url else None), options


def display(url: str) -> str:
    """``url`` without any user or password in it: how it is named in the
    store (which runs went where) and in messages."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url.rstrip("/")
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=host)).rstrip("/")


def new_uid(started: float) -> str:
    """A run id no other machine picks: when it started (so that names sort
    in time) and 48 random bits."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    return f"{stamp}-{uuid.uuid4().hex[:12]}"


class Location:
    """The archive at ``url`` (``storage_options`` for fsspec)."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None):
        try:
            from fsspec.core import url_to_fs
        except ImportError:
            raise ArchiveError("an archive needs fsspec: pip install fsspec") from None
        self.url = display(url)
        try:
            self.fs, root = url_to_fs(url, **(storage_options or {}))
        except (ImportError, ValueError) as e:  # no driver for the protocol
            raise ArchiveError(f"cannot open the archive {self.url}: {e}") from e
        self.root = root.rstrip("/")
        protocols = self.fs.protocol
        protocols = (protocols,) if isinstance(protocols, str) else protocols
        self.local = "file" in protocols or "local" in protocols

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def run_path(self, uid: str, name: str = "") -> str:
        return self.path(RUNS, uid, name) if name else self.path(RUNS, uid)

    def manifest_path(self, uid: str) -> str:
        return self.path(MANIFESTS, f"{uid}.json")

    # -- operations ------------------------------------------------------------
    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` at ``path`` whole: readers see all of it or nothing."""
        fs: AbstractFileSystem = self.fs
        parent = path.rsplit("/", 1)[0]
        if self.local:
            fs.makedirs(parent, exist_ok=True)
            temporary = f"{path}.{uuid.uuid4().hex[:8]}.partial"
            with fs.open(temporary, "wb") as f:
                f.write(data)
            os.replace(temporary, path)
        else:
            fs.pipe_file(path, data)

    def read(self, path: str, limit: int) -> bytes:
        """The bytes of the regular file at ``path``, if it holds at most
        ``limit``: anyone who can write the archive chose what is there (a
        named pipe would block a reader for good, a link reach outside it,
        a huge file fill memory). ArchiveError otherwise."""
        if self.local:
            data = _read_local(path, limit)
        else:
            data = self.fs.cat_file(path, start=0, end=limit + 1)
        if len(data) > limit:
            raise ArchiveError(f"{path} is larger than {limit:,} bytes: not read")
        return data

    def files(self, folder: str, suffix: str, limit: int) -> tuple[Files, int]:
        """The regular files in ``folder`` ending with ``suffix`` that hold at
        most ``limit`` bytes, by name in order, each with its ``Stamp``; and
        how many others were there (links, pipes, folders, larger files):
        skipped."""
        if self.local:
            return _local_files(self.path(folder), suffix, limit)
        try:
            found = self.fs.ls(self.path(folder), detail=True, refresh=True)
        except FileNotFoundError:
            return {}, 0
        names: list[tuple[str, Stamp]] = []
        skipped = 0
        for entry in found:
            name = str(entry["name"]).rstrip("/").rsplit("/", 1)[-1]
            if not name.endswith(suffix):
                continue
            size = entry.get("size")
            if (
                entry.get("type") != "file"
                or entry.get("islink")
                or not isinstance(size, int)
                or size > limit
            ):
                skipped += 1
                continue
            # What an object store says changes when an object is written
            # again: its time, or its tag. One that says neither is read
            # again at every listing, as before a reader kept anything.
            changed = next(
                (str(entry[k]) for k in _CHANGED if entry.get(k) is not None),
                f"unknown {uuid.uuid4().hex}",
            )
            names.append((name, (size, changed)))
        return dict(sorted(names)), skipped

    def names(self, folder: str, suffix: str) -> list[str]:
        """The names in ``folder`` (one of this layout's) ending with ``suffix``;
        none where there is no folder yet."""
        try:
            found = self.fs.ls(self.path(folder), detail=False, refresh=True)
        except FileNotFoundError:
            return []
        names = (str(p).rstrip("/").rsplit("/", 1)[-1] for p in found)
        return sorted(n for n in names if n.endswith(suffix))

    def remove(self, path: str, recursive: bool = False) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(path, recursive=recursive)


def _read_local(path: str, limit: int) -> bytes:
    """A local file's bytes (up to ``limit`` + 1), opened without following a
    link and without waiting on a pipe, read only if it is a regular file."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise FileNotFoundError(path) from None
        raise ArchiveError(f"{path} cannot be read: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ArchiveError(f"{path} is not a regular file: not read")
        return f.read(limit + 1)


def _local_files(folder: str, suffix: str, limit: int) -> tuple[Files, int]:
    """``Location.files`` of a local folder: its directory entries' own types
    (a link is a link, not what it points at), sizes and times."""
    names: list[tuple[str, Stamp]] = []
    skipped = 0
    now = time.time_ns()
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return {}, 0
    for entry in entries:
        if not entry.name.endswith(suffix):
            continue
        try:
            regular = entry.is_file(follow_symlinks=False)
            found = entry.stat(follow_symlinks=False)
        except OSError:  # gone meanwhile
            continue
        if regular and found.st_size <= limit:
            changed = f"{found.st_mtime_ns} {found.st_ino}"
            if now - found.st_mtime_ns < _RACY_NS:
                # Written again within the file system's clock tick would
                # keep its time: a stamp no later listing repeats (as git
                # treats files as new as its index).
                changed = f"racy {uuid.uuid4().hex}"
            names.append((entry.name, (found.st_size, changed)))
        else:
            skipped += 1
    return dict(sorted(names)), skipped

"""What a file must be before SQLite may open it as a store.

A store holds whatever the cluster logged, and SQLite trusts its files: a
``-wal`` beside the store is read as part of it. So, before any connection:
the store is a regular file of ours that nobody else may write, in a directory
nobody else may write (else they could plant a ``-wal`` or ``-shm`` between a
check and the open), and its sidecars, where they exist, are the same; and its
header says it is a store (read by SQLite itself: see ``schema.check_header``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from dask_observe.store.schema import SchemaError, check_header

#: The files SQLite keeps beside a store in WAL mode.
SIDECARS = ("-wal", "-shm")


class Refused(Exception):
    """The file may not be opened as a store; the message says why."""


def _ours_alone(path: Path, st: os.stat_result, what: str) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise Refused(
            f"{what} is a symbolic link; set observe.store to the file itself"
        )
    if stat.S_ISDIR(st.st_mode):
        raise Refused(f"{what} is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"{what} is not a regular file")
    if st.st_uid != os.getuid():
        raise Refused(f"{what} belongs to another user")
    if st.st_mode & 0o022:
        raise Refused(
            f"others may write to {what} (it holds your cluster's logs); "
            f"make it yours alone: chmod 600 {path}"
        )


def on_read_only_disk(path: Path) -> bool:
    """Whether ``path`` is on a file system mounted read-only."""
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)


def check_directory(path: Path) -> None:
    """The store's directory, where it exists, is one nobody else may write."""
    directory = path.parent
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        return  # made owner-only when the store is created
    # Its owner may write to it: that must be you (or root, trusted anyway).
    if st.st_mode & 0o022 or st.st_uid not in (os.getuid(), 0):
        raise Refused(
            f"others may write to its directory {directory}, and so plant files "
            "that SQLite would read as part of the store; keep it in a "
            f"directory of yours alone (chmod 700 {directory}, or set "
            "observe.store elsewhere)"
        )


def check_existing(path: Path) -> bool:
    """Whether the file at ``path`` may be opened as a store, checked before
    SQLite touches it (a pragma would change another application's file):
    True for a store, False for an empty file (one being created).

    Raises
    ------
    FileNotFoundError
        When there is no file at ``path``.
    Refused
        For anything else that is not a store of ours alone.
    """
    st = os.lstat(path)
    check_directory(path)
    _ours_alone(path, st, "it")
    for suffix in SIDECARS:
        sidecar = Path(f"{path}{suffix}")
        try:
            _ours_alone(sidecar, os.lstat(sidecar), f"its {sidecar.name}")
        except FileNotFoundError:
            continue
    if not os.access(path, os.R_OK):
        raise Refused("permission denied (it must be readable)")
    try:
        return check_header(path)
    except SchemaError as e:
        raise Refused(f"not a dask-observe store: {e}") from e


#: Errors of a file system without hard links (some network and FUSE ones).
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK}


def create_whole(path: Path, initialise: Callable[[Path], None]) -> None:
    """Create the file at ``path`` whole: made beside it under a temporary
    name (owner-only from birth, never through a link), ``initialise``d
    there, then linked into place. A reader finds no file, or a complete one:
    one that probed a store mid-way through its first commit (a reader opening
    the panel as a kernel made the store) took it for no SQLite file at all.

    Another process that linked its own first wins (its file is kept, this
    one dropped). On a file system without hard links an empty file is made
    in place instead, which readers wait for (``check_header``).

    Raises whatever making the file raises (OSError)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW
    os.close(os.open(temporary, flags, 0o600))
    try:
        initialise(temporary)
        try:
            os.link(temporary, path, follow_symlinks=False)
        except FileExistsError:
            pass  # another process's store is there first: that one is used
        except OSError as e:
            if e.errno not in _NO_LINKS:
                raise
            with contextlib.suppress(FileExistsError):
                os.close(os.open(path, flags, 0o600))
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{temporary}{suffix}").unlink(missing_ok=True)

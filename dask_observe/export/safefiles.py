"""Writing an export or a report file: never through a symbolic link, and over
an existing file only when asked.

A link planted where an export goes (``logs.parquet -> ~/.bashrc``) made the
export write through it; and a second export silently replaced the first.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import IO, Any


def open_to_write(path: Path, *, overwrite: bool, binary: bool = False) -> IO[Any]:
    """``path`` opened for writing: created, or (with ``overwrite``) truncated;
    never followed if it is a link.

    Raises
    ------
    FileExistsError
        When it exists and ``overwrite`` is False (the message says so).
    OSError
        When it is a symbolic link (not followed) or cannot be written.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    flags |= os.O_TRUNC if overwrite else os.O_EXCL
    try:
        fd = os.open(path, flags, 0o666)
    except FileExistsError:
        if path.is_symlink():
            raise OSError(f"{path} is a symbolic link: not followed") from None
        raise FileExistsError(
            f"{path} exists: remove it, or pass --force to overwrite it"
        ) from None
    except OSError as e:
        if e.errno == errno.ELOOP:  # O_NOFOLLOW on a link
            raise OSError(f"{path} is a symbolic link: not followed") from None
        raise
    if binary:
        return os.fdopen(fd, "wb")
    return os.fdopen(fd, "w", encoding="utf-8")


def directory_to_write(path: Path) -> Path:
    """``path`` as a directory to write files into, made if need be; not a
    link (its files would land wherever it points)."""
    if path.is_symlink():
        raise OSError(f"{path} is a symbolic link: not followed")
    path.mkdir(parents=True, exist_ok=True)
    return path

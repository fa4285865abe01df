"""Helpers for tests that run dask-observe in other processes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: The command-line entry point installed beside this interpreter.
DASK_OBSERVE = str(Path(sys.executable).with_name("dask-observe"))


def subprocess_env(store_path: Path) -> dict[str, str]:
    """The environment of a separate process that uses the same store."""
    return {**os.environ, "DASK_OBSERVE__STORE": str(store_path)}

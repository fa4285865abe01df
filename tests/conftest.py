"""Helpers for tests that run dask-observe in other processes, and the Jupyter
server that the server tests share."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

#: The command-line entry point installed beside this interpreter.
DASK_OBSERVE = str(Path(sys.executable).with_name("dask-observe"))


def subprocess_env(store_path: Path) -> dict[str, str]:
    """The environment of a separate process that uses the same store."""
    return {**os.environ, "DASK_OBSERVE__STORE": str(store_path)}


@pytest.fixture
def jp_server_config(store_path: Path) -> dict[str, Any]:
    """A Jupyter server (pytest-jupyter) with the extension, reading the test's
    store (asking for ``store_path`` first points the server at it)."""
    return {"ServerApp": {"jpserver_extensions": {"dask_observe": True}}}

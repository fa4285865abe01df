"""Helpers for tests that run dask-observe in other processes, waiting on a
condition, and the Jupyter server that the server tests share."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

#: The command-line entry point installed beside this interpreter.
DASK_OBSERVE = str(Path(sys.executable).with_name("dask-observe"))


def subprocess_env(store_path: Path) -> dict[str, str]:
    """The environment of a separate process that uses the same store."""
    return {**os.environ, "DASK_OBSERVE__STORE": str(store_path)}


def wait_until(condition: Callable[[], object], what: str, timeout: float = 30) -> None:
    """Return once ``condition()`` is true; fail, saying ``what``, after
    ``timeout`` seconds. For what arrives in its own time (a flush, a sample, a
    process ending), in place of a guessed sleep."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def stored_lines(store_path: Path, run: int, contains: str) -> int:
    """How many log lines of that run containing that text the store holds
    now (as another process reads it while a recorder writes)."""
    import dask_observe

    with dask_observe.open_store(store_path) as store:
        return len(store.run(run).logs(contains=contains))


@pytest.fixture
def jp_server_config(store_path: Path) -> dict[str, Any]:
    """A Jupyter server (pytest-jupyter) with the extension, reading the test's
    store (asking for ``store_path`` first points the server at it)."""
    return {"ServerApp": {"jpserver_extensions": {"dask_observe": True}}}

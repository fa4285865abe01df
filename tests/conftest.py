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


#: For the Python processes a test starts itself (a recording script, a
#: "machine" of the team's archive): distributed's GIL monitor off. It runs
#: gilknocker's native thread per server, stopped as the server closes; one
#: left running when the process exits aborts it ("FATAL: exception not
#: rethrown", exit 134: 10 of 20 runs of a script that starts a knocker and
#: exits without stopping it). A server's close does not always finish (bokeh
#: refused a scheduler's stop on 3.12), and such processes aborted after their
#: work was done, once in a CI run and once here under load. The suite's own
#: clusters keep it: the gil-contention flag and the event-loop-blocked
#: evidence are tested with it.
NO_GIL_MONITOR = {"DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__GIL__ENABLED": "False"}


def subprocess_env(store_path: Path) -> dict[str, str]:
    """The environment of a separate process that uses the same store."""
    return {**os.environ, **NO_GIL_MONITOR, "DASK_OBSERVE__STORE": str(store_path)}


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

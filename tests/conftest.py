"""Fixtures shared by the test suite: a real LocalCluster, a store per test."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import dask.config
import pytest
from distributed import Client, LocalCluster

pytest_plugins = ["pytest_jupyter.jupyter_server"]

#: The command-line entry point installed beside this interpreter.
DASK_OBSERVE = str(Path(sys.executable).with_name("dask-observe"))


@pytest.fixture
def store_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh store location, made the configured default (as a user would).

    dask reads environment variables once, at import: this process is configured with
    ``dask.config.set``, the processes it starts with ``DASK_OBSERVE__STORE``.
    """
    path = tmp_path / "observe-store" / "observe.sqlite"
    monkeypatch.setenv("DASK_OBSERVE__STORE", str(path))
    with dask.config.set({"observe.store": str(path)}):
        yield path


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    """Two single-threaded worker processes with nannies, shared by the session."""
    with LocalCluster(
        n_workers=2, threads_per_worker=1, dashboard_address=":0", processes=True
    ) as cluster:
        yield cluster


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    with Client(cluster, set_as_default=True) as client:
        yield client


def subprocess_env(store_path: Path) -> dict[str, str]:
    """The environment of a separate process that uses the same store."""
    return {**os.environ, "DASK_OBSERVE__STORE": str(store_path)}

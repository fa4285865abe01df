"""A path for every route of the server extension, for the tests that walk
them all (authentication, security headers)."""

from __future__ import annotations

from pathlib import Path

from dask_observe.server import route_table
from dask_observe.server.archive_routes import UID
from dask_observe.server.manager import StoreManager
from dask_observe.server.proxy import Capabilities


def sample_paths() -> list[str]:
    """A path for every route of the extension, from its route table (a route
    added later is walked too): each pattern's groups filled with a match."""
    manager = StoreManager(Path("unused.sqlite"))
    fills = {
        r"(last|\d{1,18})": "1",
        r"([0-9a-f]{12})": "0123456789ab",
        # A forged capability: a sandboxed dashboard page's only credential.
        f"({Capabilities.PATTERN})": "~7fffffff." + "A" * 32,
        "(.*)": "status",
        UID: "20261126T000000Z-0123456789ab",
    }
    paths = []
    for pattern, _, _ in route_table("/", manager):
        for group, value in fills.items():
            pattern = pattern.replace(group, value)
        assert "(" not in pattern, f"no sample for the route {pattern}"
        paths.append(pattern.removeprefix("/"))
    manager.close()
    return paths


#: Every route of the extension, for the authentication walks.
ROUTES = sample_paths()

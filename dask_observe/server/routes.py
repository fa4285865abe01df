"""REST routes under ``<base_url>dask-observe/api/``; all authenticated."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from dask_observe.store import Store, StoreError

#: The resource name for jupyter_server's authorizer.
AUTH_RESOURCE = "dask-observe"


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The runs in the store at ``path``; none while no store exists yet."""
    if not path.exists():
        return []
    with Store(path, create=False) as store:
        return store.run_records()


class StoreHandler(APIHandler):
    """Base of the handlers that read the store; it is handed in, not global."""

    auth_resource = AUTH_RESOURCE

    def initialize(self, store_path: Path) -> None:
        self.store_path = store_path

    async def read(self, reader: Any, *args: Any) -> Any:
        """Run a blocking store read off the event loop."""
        try:
            return await asyncio.to_thread(reader, self.store_path, *args)
        except StoreError as e:
            raise web.HTTPError(500, str(e)) from e


class RunsHandler(StoreHandler):
    """``GET dask-observe/api/runs``: every recorded run, newest first."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        runs = await self.read(read_runs)
        self.finish(json.dumps({"runs": runs}))


def route_table(base_url: str, store_path: Path) -> list[tuple[str, Any, Any]]:
    """The handlers of the extension, rooted at ``base_url``."""
    kwargs = {"store_path": store_path}
    api = url_path_join(base_url, "dask-observe", "api")
    return [
        (url_path_join(api, "runs"), RunsHandler, kwargs),
    ]

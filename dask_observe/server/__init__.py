"""The Jupyter server extension: REST routes over the store.

It reads the store only, so the server's environment never needs ``dask``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dask_observe.config import default_store_path
from dask_observe.server.routes import route_table

if TYPE_CHECKING:
    from jupyter_server.serverapp import ServerApp


def _load_jupyter_server_extension(serverapp: ServerApp) -> None:
    store_path = default_store_path()
    web_app = serverapp.web_app
    base_url = web_app.settings["base_url"]
    web_app.add_handlers(".*$", route_table(base_url, store_path))
    serverapp.log.info("dask-observe: serving the store %s", store_path)

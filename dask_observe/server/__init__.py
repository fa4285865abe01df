"""The Jupyter server extension: REST routes over the store.

It reads the store only (read-only: it never creates, migrates or writes one),
so the server's environment never needs ``dask``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dask_observe.config import default_store_path
from dask_observe.server.manager import StoreManager
from dask_observe.server.routes import route_table

if TYPE_CHECKING:
    from jupyter_server.serverapp import ServerApp


#: Where the extension keeps its StoreManager in the web app's settings.
MANAGER_SETTING = "dask_observe_manager"


def _load_jupyter_server_extension(serverapp: ServerApp) -> None:
    store_path = default_store_path()
    web_app = serverapp.web_app
    manager = StoreManager(store_path)
    web_app.settings[MANAGER_SETTING] = manager
    base_url = web_app.settings["base_url"]
    web_app.add_handlers(".*$", route_table(base_url, manager))
    serverapp.log.info("dask-observe: serving the store %s (read-only)", store_path)


def _unload_jupyter_server_extension(serverapp: ServerApp) -> None:
    manager = serverapp.web_app.settings.pop(MANAGER_SETTING, None)
    if manager is not None:
        manager.close()

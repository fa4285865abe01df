"""The Jupyter server extension: REST routes over the store.

It reads the store only (read-only: it never creates, migrates or writes one),
so the server's environment never needs ``dask``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jupyter_server.utils import url_path_join

from dask_observe.config import default_store_path
from dask_observe.server.archive_routes import archive_routes
from dask_observe.server.manager import StoreManager
from dask_observe.server.proxy import (
    Capabilities,
    DashboardCapabilityHandler,
    DashboardProxyHandler,
)
from dask_observe.server.routes import (
    ClustersHandler,
    RunComparisonHandler,
    RunHandler,
    RunHistoryHandler,
    RunLogsHandler,
    RunReportHandler,
    RunsHandler,
    StreamRowsHandler,
)
from dask_observe.server.stream import StreamHandler

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


def route_table(base_url: str, manager: StoreManager) -> list[tuple[str, Any, Any]]:
    """The handlers of the extension, rooted at ``base_url``."""
    kwargs = {"manager": manager}
    api = url_path_join(base_url, "dask-observe", "api")
    # Ids SQLite can hold; a longer one is no route (404), never a 500.
    run = url_path_join(api, "runs", r"(last|\d{1,18})")
    dashboard = url_path_join(base_url, "dask-observe", "dashboard", r"([0-9a-f]{12})")
    proxy = {**kwargs, "capabilities": Capabilities()}
    return [
        *archive_routes(api, kwargs),
        (url_path_join(api, "runs"), RunsHandler, kwargs),
        (run, RunHandler, kwargs),
        (url_path_join(run, "logs"), RunLogsHandler, kwargs),
        (url_path_join(run, "report"), RunReportHandler, kwargs),
        (url_path_join(run, "history"), RunHistoryHandler, kwargs),
        (
            url_path_join(run, "compare", r"(last|\d{1,18})"),
            RunComparisonHandler,
            kwargs,
        ),
        (url_path_join(api, "clusters"), ClustersHandler, kwargs),
        (url_path_join(api, "stream"), StreamHandler, kwargs),
        (url_path_join(api, "stream", "rows"), StreamRowsHandler, kwargs),
        # The capability's route first: the other one matches its paths too.
        (
            url_path_join(dashboard, f"({Capabilities.PATTERN})", "(.*)"),
            DashboardCapabilityHandler,
            proxy,
        ),
        (url_path_join(dashboard, "(.*)"), DashboardProxyHandler, proxy),
    ]

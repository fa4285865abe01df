"""Every route of the extension asks Jupyter's authorizer: one that denies
gets a 403 on each, websockets included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jupyter_server.auth.authorizer import Authorizer

from dask_observe.store import BaseStore

from .routes import ROUTES


class DenyAll(Authorizer):
    """An authorizer that lets the user in (authenticated) but allows nothing."""

    def is_authorized(
        self, handler: Any, user: Any, action: str, resource: str
    ) -> bool:
        return False


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    """The suite's server, with an authorizer that denies everything."""
    server = jp_server_config["ServerApp"]
    return {"ServerApp": {**server, "authorizer_class": DenyAll}}


@pytest.mark.parametrize("route", ROUTES)
async def test_every_route_asks_the_authorizer(
    route: str, http_server_client: Any, jp_base_url: str, jp_auth_header: Any,
    store_path: Path,
) -> None:  # fmt: skip
    with BaseStore(store_path) as store:
        store.create_run("secret-run-name", cluster="tcp://10.0.0.1:8786")
        store.telemetry.register_cluster("tcp://10.0.0.1:8786", "http://127.0.0.1:9")
    response = await http_server_client.fetch(
        jp_base_url + route, headers=jp_auth_header, raise_error=False
    )
    assert response.code == 403
    assert b"secret-run-name" not in response.body

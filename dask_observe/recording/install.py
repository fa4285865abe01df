"""Putting the capture on a cluster (its plugins, shipped as source, so that
a cluster needs nothing of ours installed), and finding its dashboard."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from dask_observe.capture.wire import VERSION as WIRE_VERSION
from dask_observe.recording import link
from dask_observe.recording.link import answer_timeout

if TYPE_CHECKING:
    from distributed import Client


class CaptureUnavailable(Exception):
    """dask-observe's plugins cannot run on this cluster; the message says why."""


class SchedulerSilent(CaptureUnavailable):
    """The scheduler did not answer in ``answer-timeout``: not a refusal. Each
    further question would wait as long, so the run asks it no more until
    its end."""


class CaptureUnavailableWarning(UserWarning):
    """A run is recorded partially: the capture plugins do not run on the cluster."""


def install_capture(client: Client) -> dict[str, Any]:
    """Make sure the capture plugins run on the client's cluster, shipping them
    if need be; return what the scheduler plugin says of itself (its ``hello``).

    Raises
    ------
    CaptureUnavailable
        When the plugins cannot be installed (a scheduler that refuses plugins,
        a worker whose setup failed, ...) or the cluster runs a capture of
        another wire version, which this recorder will not misread.
    """
    from dask_observe.recording import plugins

    try:
        hello = None if _surely_bare(client) else plugins.hello(client)
        if hello is None:
            plugins.register(client, plugins.capture_settings(since=time.time()))
            hello = plugins.hello(client)
    except TimeoutError as e:
        raise SchedulerSilent(
            f"the scheduler did not answer in {answer_timeout():g} s, so"
            " dask-observe's capture plugins could not be set up"
        ) from e
    except Exception as e:
        raise CaptureUnavailable(
            f"the cluster did not take dask-observe's capture plugins ({e})"
        ) from e
    if hello is None:
        raise CaptureUnavailable(
            "the cluster did not take dask-observe's capture plugins (they were "
            "registered, but the scheduler does not run them)"
        )
    if hello.get("wire") != WIRE_VERSION:
        raise CaptureUnavailable(
            f"the cluster runs the capture of another dask-observe (wire version "
            f"{hello.get('wire')}; this one reads version {WIRE_VERSION}), registered "
            "by another client; restart the scheduler to record it fully"
        )
    return hello


def _surely_bare(client: Client) -> bool:
    """The scheduler runs in this process (a LocalCluster's) and has no capture
    plugin: no need to ask it (a round trip, with this package's functions
    pickled by value) before shipping the plugins."""
    scheduler = client.scheduler
    local = link.local_scheduler(client, str(getattr(scheduler, "address", "")))
    return local is not None and link.SCHEDULER_PLUGIN not in local.plugins


def dashboard_address(client: Client, hello: dict[str, Any] | None) -> str | None:
    """``http(s)://host:port`` of the scheduler's dashboard, or None without one.

    The capture plugin says where the dashboard's HTTP server listens; when that
    is every interface (or the plugin is not there to say) the host is the one
    this client reaches the scheduler at, and for a scheduler in this very
    process (``inproc://``) the loopback address. A scheduler behind a
    dask-gateway (``gateway://``) is reached through the gateway alone: its
    dashboard is the gateway's route to it (``http(s)://gateway/clusters/
    <name>``), which the client's cluster knows.
    """
    if client.scheduler is not None and str(client.scheduler.address).startswith(
        "gateway://"
    ):
        return gateway_dashboard(client)

    shown = (hello or {}).get("dashboard") or {}
    port = shown.get("port")
    if port is None and hello is None:
        try:  # bounded: ``client.scheduler_info()`` waits on a frozen one for good
            said = client.sync(
                client.scheduler.identity,  # type: ignore[union-attr]
                n_workers=0,
                callback_timeout=answer_timeout(),
            )
            port = said.get("services", {}).get("dashboard")
        except Exception:  # a scheduler that cannot say: no dashboard to offer
            return None
    scheduler = client.scheduler
    if not port or scheduler is None:
        return None
    address = urlsplit(str(scheduler.address))
    host = shown.get("host") or (
        "127.0.0.1" if address.scheme == "inproc" else address.hostname
    )
    if not host:
        return None
    if ":" in host:  # an IPv6 address goes in brackets
        host = f"[{host}]"
    scheme = "https" if shown.get("tls") else "http"
    return f"{scheme}://{host}:{int(port)}"


def gateway_dashboard(client: Client) -> str | None:
    """The gateway's route to the dashboard of the client's dask-gateway
    cluster (its ``dashboard_link`` without the page), or None where the
    client was made without its cluster (the link would name the
    scheduler's own port, which nobody outside the gateway reaches)."""
    link = getattr(getattr(client, "cluster", None), "dashboard_link", None)
    if not isinstance(link, str):
        return None
    parts = urlsplit(link)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    path = parts.path.rstrip("/")
    if path.endswith("/status"):
        path = path[: -len("/status")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))

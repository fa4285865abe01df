"""A run's identity on the cluster: the span its tasks carry, and the client
it records through."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING

from dask.base import annotate, get_annotations

from dask_observe.capture.wire import RUN_ANNOTATION

if TYPE_CHECKING:
    from distributed import Client


def hide_span_annotation_warning() -> None:
    """dask-expr warns that annotations are ignored when a DataFrame is made
    inside a span; the run's annotations still reach the scheduler (the client
    adds them when it submits), so the warning would only mislead. Hidden when
    the run's own are the only annotations; any other still warns. Set at each
    start: code that resets warning filters (pytest does) drops it."""
    warnings.filterwarnings(
        "ignore",
        message=r"Dask annotations \{'span': \{[^{}]*\}"
        rf"(, '{RUN_ANNOTATION}': \([^(){{}}]*\))?\}} detected",
        category=UserWarning,
    )


@contextlib.contextmanager
def run_span(name: str) -> Iterator[str]:
    """A span for the run, and the run's own annotation naming it (with the
    runs it is nested in). distributed puts a task whose group already has a
    span into that span: after a block that kept futures of ``inc``, the next
    run's ``inc`` tasks joined the old run's span and the run recorded none.
    The annotation is the client's, so it stays with every task submitted in
    the block."""
    from distributed import span

    with span(name) as span_id:
        runs = tuple(get_annotations().get(RUN_ANNOTATION, ()))
        with annotate(**{RUN_ANNOTATION: (*runs, span_id)}):
            yield span_id


NO_CLIENT_HELP = (
    "No Dask client found. Create one first, e.g. "
    "`from distributed import Client; client = Client()` for a local cluster, "
    "or `Client('tcp://scheduler-address:8786')` for a running one."
)


class NoClientError(ValueError):
    """Recording needs a Dask client, and none was given or found."""


def resolve_client(client: Client | None) -> Client:
    """The given client, else the current default one."""
    if client is not None:
        return client
    from distributed import default_client

    try:
        found: Client = default_client()
    except ValueError:
        raise NoClientError(NO_CLIENT_HELP) from None
    return found

"""The scheduler side of capture."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import SchedulerPlugin

if TYPE_CHECKING:
    from distributed import Client, Scheduler

PLUGIN_NAME = "dask-observe"

#: Task states that end a task's run on a worker, the ones a run counts.
_COUNTED_STATES = frozenset({"memory", "erred"})


class ObserveSchedulerPlugin(SchedulerPlugin):
    """Counts the tasks that finish in each span a recorder watches.

    A run is a ``distributed.span``; the recorder asks the plugin to watch the run's
    span id, and the counts include the tasks of any sub-span the user opens inside.
    """

    name = PLUGIN_NAME
    # Registering again must not replace (and so reset) a plugin that another
    # recorder, in this kernel or another one, is using.
    idempotent = True

    def __init__(self) -> None:
        self._scheduler: Scheduler | None = None
        self._watched: dict[str, Counter[str]] = {}

    async def start(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def watch(self, span_id: str) -> None:
        self._watched.setdefault(span_id, Counter())

    def unwatch(self, span_id: str) -> dict[str, int]:
        return dict(self._watched.pop(span_id, Counter()))

    def counts(self, span_id: str) -> dict[str, int]:
        return dict(self._watched.get(span_id, Counter()))

    def transition(
        self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any
    ) -> None:
        # The scheduler's hottest path: leave at once unless there is work.
        if not self._watched or finish not in _COUNTED_STATES:
            return
        assert self._scheduler is not None
        ts = self._scheduler.tasks.get(key)
        if ts is None or ts.group.span_id is None:
            return
        spans = self._scheduler.extensions["spans"].spans
        span = spans.get(ts.group.span_id)
        while span is not None:
            counter = self._watched.get(span.id)
            if counter is not None:
                counter[finish] += 1
            span = span.parent


def _plugin(dask_scheduler: Scheduler) -> ObserveSchedulerPlugin | None:
    plugin = dask_scheduler.plugins.get(PLUGIN_NAME)
    return plugin if isinstance(plugin, ObserveSchedulerPlugin) else None


def _watch(dask_scheduler: Scheduler, span_id: str) -> None:
    plugin = _plugin(dask_scheduler)
    assert plugin is not None, "register ObserveSchedulerPlugin first"
    plugin.watch(span_id)


def _unwatch(dask_scheduler: Scheduler, span_id: str) -> dict[str, int]:
    plugin = _plugin(dask_scheduler)
    return plugin.unwatch(span_id) if plugin is not None else {}


def watch_span(client: Client, span_id: str) -> None:
    """Start counting the tasks of ``span_id`` on the client's scheduler."""
    client.register_plugin(ObserveSchedulerPlugin())
    client.run_on_scheduler(_watch, span_id=span_id)


def unwatch_span(client: Client, span_id: str) -> dict[str, int]:
    """Stop counting ``span_id`` and return its counts by final task state."""
    counts: dict[str, int] = client.run_on_scheduler(_unwatch, span_id=span_id)
    return counts

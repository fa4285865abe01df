"""Tasks a run's client let go of while they ran (scheduler side).

A client that stops waiting (a ``result(timeout=...)`` on a future nobody else
holds, a ``cancel``) releases the task: the scheduler forgets it at once, but
its worker cannot stop a running thread, so the task runs on (its worker's
state ``cancelled``). A run that ends right after, stopped by that timeout,
must still say that the task ran and where it stood, though the scheduler
already forgot it.

The scheduler notes each task of a watched span that leaves ``processing`` for
``released``; at the run's end its workers say which of those they still run
(a stopped run's ``dask_observe_stacks`` reply, which also samples where they
are; a finished run's ``dask_observe_running``, a block that caught its own
timeout).
"""

from __future__ import annotations

from typing import Any

#: Let-go tasks kept per span (the newest): only a worker's threads' worth can
#: still run, and a client that cancels a whole graph must not grow this.
MAX_LET_GO = 10_000


class LetGo:
    """Per watched span: the tasks let go of while processing, by their key
    as text: (their prefix, their key)."""

    def __init__(self) -> None:
        self._spans: dict[str, dict[str, tuple[str, Any]]] = {}

    def watch(self, span_id: str) -> None:
        self._spans.setdefault(span_id, {})

    def unwatch(self, span_id: str) -> dict[str, tuple[str, Any]]:
        return self._spans.pop(span_id, {})

    def released(self, span_ids: Any, key: Any, prefix: str) -> None:
        """From the transition hook (processing -> released): a dict write."""
        name = str(key)
        for span_id in span_ids:
            keys = self._spans.get(span_id)
            if keys is None:
                continue
            keys.pop(name, None)  # re-inserted: the newest last
            keys[name] = (prefix, key)
            if len(keys) > MAX_LET_GO:
                del keys[next(iter(keys))]

    def any(self, span_id: str) -> bool:
        return bool(self._spans.get(span_id))

    def keys(self, span_id: str) -> set[str]:
        """The keys (as text) let go of so far in the span."""
        return set(self._spans.get(span_id, ()))


def still_running(
    scheduler: Any, let_go: dict[str, tuple[str, Any]], replies: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """Of the tasks ``let_go`` (see ``LetGo``), those a worker says it still
    runs (``replies``: worker -> the keys it runs and for how long, or the
    keys alone), by worker, timed by it. A key the scheduler has processing
    again (resubmitted, or rescheduled elsewhere) is counted there, not
    twice."""
    found: dict[str, list[dict[str, Any]]] = {}
    for worker, keys in replies.items():
        ran = keys if isinstance(keys, dict) else {}
        for name in keys if isinstance(keys, (dict, list)) else ():
            known = let_go.get(name)
            if known is None:
                continue
            prefix, key = known
            ts = scheduler.tasks.get(key)
            if ts is not None and ts.state == "processing":
                continue
            elapsed = ran.get(name)
            found.setdefault(worker, []).append(
                {"key": str(name), "prefix": prefix, "typical": None, "let_go": True,
                 "elapsed": float(elapsed) if elapsed is not None else None}
            )  # fmt: skip
    return found

"""distributed's warning that a task graph sent to the scheduler was large,
heard in the client's process while runs record.

The client pickles the graph and warns ("Sending large graph of size 200.01
MiB") before it sends it: a large object embedded in a task (an array
captured by a function, a DataFrame passed as an argument). The warning is
the client's, so no cluster process logs it; a recorded run keeps it as a
``large-graph`` event, which the rule of that name reads. The warning still
shows as it did.
"""

from __future__ import annotations

import re
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

#: distributed's words (``Client._graph_to_futures``).
LARGE_GRAPH = re.compile(r"Sending large graph of size ([\d.]+ ?[kMGTP]?i?B)")


class Listener:
    """What one run heard: ``(time, size text, first line)`` of each warning."""

    def __init__(self) -> None:
        self.said: list[tuple[float, str, str]] = []

    def close(self) -> list[tuple[float, str, str]]:
        _Hook.leave(self)
        return self.said


class _Hook:
    """The process's wrapper of ``warnings.showwarning``, there while a run
    listens."""

    _lock = threading.Lock()
    _listeners: ClassVar[list[Listener]] = []
    _original: ClassVar[Callable[..., Any] | None] = None

    @classmethod
    def join(cls, listener: Listener) -> None:
        with cls._lock:
            if not cls._listeners:
                cls._original = warnings.showwarning
                warnings.showwarning = _showwarning
            cls._listeners = [*cls._listeners, listener]

    @classmethod
    def leave(cls, listener: Listener) -> None:
        with cls._lock:
            cls._listeners = [x for x in cls._listeners if x is not listener]
            if not cls._listeners and cls._original is not None:
                if warnings.showwarning is _showwarning:  # else another's on top
                    warnings.showwarning = cls._original
                cls._original = None


def _showwarning(*args: Any, **kwargs: Any) -> None:
    message = args[0] if args else kwargs.get("message")
    found = LARGE_GRAPH.search(str(message))
    if found:
        heard = (time.time(), found[1], str(message).splitlines()[0])
        for listener in _Hook._listeners:
            listener.said.append(heard)
    original = _Hook._original or warnings._showwarning_orig  # type: ignore[attr-defined]
    original(*args, **kwargs)


def size_bytes(size: str) -> int | None:
    """``"200.01 MiB"`` in bytes (None where it does not read)."""
    from dask.utils import parse_bytes

    try:
        return int(parse_bytes(size.replace(" ", "")))
    except (ValueError, TypeError):
        return None


def listen() -> Listener:
    """Hear distributed's large-graph warnings until ``close()``."""
    listener = Listener()
    _Hook.join(listener)
    return listener

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
import time
import warnings
from collections.abc import Callable
from typing import Any

#: distributed's words (``Client._graph_to_futures``).
LARGE_GRAPH = re.compile(r"Sending large graph of size ([\d.]+ ?[kMGTP]?i?B)")


class Listener:
    """What one run heard: ``(time, size text, first line)`` of each warning.

    Each listener wraps ``warnings.showwarning`` as it found it, and calls
    that one on: a wrapper of its own, so that wrappers put on by others
    meanwhile (the output capture of a worker in this process, a test's
    ``catch_warnings``) never make a loop.
    """

    def __init__(self) -> None:
        self.said: list[tuple[float, str, str]] = []
        self._original: Callable[..., Any] | None = None
        self._hearing = False

    def listen(self) -> None:
        self._original = original = warnings.showwarning
        self._hearing = True

        def showwarning(*args: Any, **kwargs: Any) -> None:
            if self._hearing:
                message = args[0] if args else kwargs.get("message")
                found = LARGE_GRAPH.search(str(message))
                if found:
                    line = str(message).splitlines()[0]
                    self.said.append((time.time(), found[1], line))
            original(*args, **kwargs)

        self._wrapper = showwarning
        warnings.showwarning = showwarning

    def close(self) -> list[tuple[float, str, str]]:
        """Stop hearing; take the wrapper off where it is still on top (else
        it stays, passing warnings on)."""
        self._hearing = False
        if self._original is not None and warnings.showwarning is self._wrapper:
            warnings.showwarning = self._original
        self._original = None
        return self.said


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
    listener.listen()
    return listener

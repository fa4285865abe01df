"""What a run's end is judged under and kept with: the environment it
started in (assembled by a thread of its own), this process's, the settings."""

from __future__ import annotations

import collections
import copy
import functools
import json
import threading
from typing import Any


class StartedIn:
    """The environment a run started in, as its start's thread assembles it."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.workers: dict[str, dict[str, Any]] = {}
        self.code: dict[str, Any] | None = None
        self.thread: threading.Thread | None = None
        #: Set when the run ended: its end assembles all of it then.
        self.ended = threading.Event()


@functools.cache
def client_environment() -> dict[str, Any]:
    """This process's Python, OS and packages (``plugins.process_environment``),
    read once."""
    from dask_observe.recording import plugins

    return plugins.process_environment()


def run_settings(thresholds: dict[str, dict[str, float | bool]]) -> dict[str, Any]:
    """The settings a run is judged under (``Run.settings``): the memory
    thresholds its workers reported (``thresholds``, by worker; the most common
    as ``memory``, all of them where they differ), else this process's dask
    config; and this process's ``observe.flags``."""
    from dask_observe import config
    from dask_observe.recording import plugins

    # A copy: dask.config.set restores the config's own dicts in place when
    # its block ends, and the run's end is written after that.
    settings: dict[str, Any] = {"flags": copy.deepcopy(config.get("flags") or {})}
    if not thresholds:
        return {**settings, "memory": plugins.memory_thresholds(), "source": "client"}
    kinds = collections.Counter(
        json.dumps(t, sort_keys=True) for t in thresholds.values()
    )
    settings["memory"] = json.loads(kinds.most_common(1)[0][0])
    if len(kinds) > 1:
        settings["memory_by_worker"] = thresholds
    return {**settings, "source": "workers"}

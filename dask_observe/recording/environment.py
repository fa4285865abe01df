"""The environment a run ran in (what changed between two of them:
:mod:`dask_observe.analysis.changes`).

Kept with each run as it starts, completed when it ends (``Run.environment()``):
package versions of the client, the scheduler and the workers, Python and OS,
the cluster's shape, the dask config values that differ from dask's defaults,
and the code (the cell's source, or the script and its git commit). The pieces
are gathered by the recording (at the start by a thread of its own while the
block runs; at the end from the answers of the flush that ends a run); this
module assembles them.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from dask_observe.redact import NOT_RECORDED

#: Config values a run keeps at most (the rest are counted).
MAX_CONFIG = 200


def assemble(
    client: dict[str, Any],
    scheduler: dict[str, Any] | None,
    workers: dict[str, dict[str, Any]],
    config: dict[str, Any],
    code: dict[str, Any],
    *,
    shape: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A run's environment from each process's own (``process_environment``:
    python, os, packages), the workers' answers (their environment, threads,
    memory limit, resources), the client's changed config, and its code. The
    cluster's shape is that of ``shape``'s workers (default: ``workers``)."""
    envs = {"client": client}
    if scheduler:
        envs["scheduler"] = scheduler
    own = {w: a["environment"] for w, a in workers.items() if "environment" in a}
    kinds = {json.dumps(e, sort_keys=True) for e in own.values()}
    if len(kinds) == 1:  # the usual case: one image for every worker
        envs["workers"] = next(iter(own.values()))
    else:
        envs.update(own)
    packages = {
        who: {"python": e.get("python"), **e.get("packages", {})}
        for who, e in envs.items()
    }
    shaped = workers if shape is None else shape
    shapes = [a.get("worker", {}) for a in shaped.values()]
    limits = sorted({s.get("memory_limit") or 0 for s in shapes})
    resources: dict[str, float] = {}
    for shape in shapes:
        for name, amount in (shape.get("resources") or {}).items():
            resources[name] = resources.get(name, 0) + amount
    return {
        "packages": packages,
        "os": {who: e.get("os") for who, e in envs.items()},
        "cluster": {
            "workers": len(shaped),
            "threads": sum(int(s.get("nthreads") or 0) for s in shapes),
            "memory_limit": limits[0] if len(limits) == 1 else limits,
            "resources": resources,
        },
        "config": config,
        "code": code,
    }


def config_changes() -> dict[str, Any]:
    """This process's dask config values that differ from dask's defaults
    (set in code, YAML files or ``DASK_*`` variables), as dotted keys; storage
    options are left out whole (``redact.NOT_RECORDED``)."""
    import dask.config

    defaults = _merged_defaults(len(dask.config.defaults))
    changed = {
        key: _plain(value)
        for key, value in _differences(dask.config.config, defaults).items()
        if NOT_RECORDED.search(key) is None
    }
    keys = sorted(changed)
    kept = {key: changed[key] for key in keys[:MAX_CONFIG]}
    if len(keys) > MAX_CONFIG:
        kept["..."] = f"{len(keys) - MAX_CONFIG} more"
    return kept


@functools.lru_cache(maxsize=4)
def _merged_defaults(count: int) -> dict[str, Any]:
    """dask's defaults, merged; read again when a library adds its own
    (``count`` of them): every run's start and end compare the config with
    them."""
    import dask.config

    return dask.config.merge(*dask.config.defaults[:count])


def _differences(tree: Any, defaults: Any, prefix: str = "") -> dict[str, Any]:
    """The leaves of ``tree`` (dotted keys) that ``defaults`` lacks or holds
    another value for. A section equal to its default is compared whole, in
    C, and not walked: flattening all ~650 keys took 0.45 ms, twice a run
    (6 us now, with a few keys set)."""
    if tree == defaults:
        return {}
    if not isinstance(tree, dict) or not tree or not isinstance(defaults, dict):
        return _flat(tree, prefix)
    found: dict[str, Any] = {}
    for key, value in tree.items():
        where = f"{prefix}.{key}" if prefix else str(key)
        if key in defaults:
            found.update(_differences(value, defaults[key], where))
        else:
            found.update(_flat(value, where))
    return found


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict) or not tree:
        return {prefix: tree} if prefix else {}
    found: dict[str, Any] = {}
    for key, value in tree.items():
        found.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return found


def _plain(value: Any) -> Any:
    """A JSON value: a copy where it is one (the config's own lists change
    when a ``dask.config.set`` block ends), else its text."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return repr(value)


@functools.cache
def script_code() -> dict[str, Any]:
    """Where a run outside a notebook came from: the script (``sys.argv[0]``)
    and, in a git repository, its commit and whether the tree had changes.
    Read once a process: the code that runs is what was there when it began
    (and each read costs two git processes)."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is None or not script.is_file() or "ipykernel" in script.name:
        return {}
    code: dict[str, Any] = {"script": str(script.resolve())}
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=script.resolve().parent,
            capture_output=True, text=True, timeout=5,
        )  # fmt: skip
        if commit.returncode == 0:
            code["git_commit"] = commit.stdout.strip()
            status = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=script.resolve().parent, capture_output=True, text=True,
                timeout=5,
            )  # fmt: skip
            code["git_dirty"] = bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return code


#: How long a run's end waits for its start's environment to be assembled
#: (asking the workers): after that the end's own view is stored alone.
START_WAIT_S = 30.0


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


def cluster_environment(hello: dict[str, Any] | None) -> dict[str, Any] | None:
    """The scheduler's process's environment, as its capture said hello; for
    a scheduler in this process (``in_process``: its hello leaves it out),
    this process's."""
    if hello is not None and hello.get("in_process"):
        return client_environment()
    return (hello or {}).get("environment")

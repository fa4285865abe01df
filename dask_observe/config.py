"""Configuration under dask's ``observe.`` namespace.

Settings live in dask config so that YAML files, ``dask.config.set`` and environment
variables (``DASK_OBSERVE__STORE=...``) all work. The Jupyter server must not need
``dask`` importable (kernels often live in another environment), so the lookups here
fall back to reading the environment variables and the shipped defaults directly.
"""

from __future__ import annotations

import ast
import copy
import functools
import os
from pathlib import Path
from typing import Any

DEFAULTS_FILE = Path(__file__).with_name("observe.yaml")
ENV_PREFIX = "DASK_OBSERVE__"


@functools.cache
def _shipped_defaults() -> dict[str, Any]:
    """The shipped defaults file, read once (not to be changed). libyaml's
    loader where PyYAML has it: the file is mostly comments, and the Python
    loader took 6 ms of every import (and, in a server without dask, of
    every setting read)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with DEFAULTS_FILE.open() as f:
        found: dict[str, Any] = yaml.load(f, Loader=loader)
    return found


def _register_defaults() -> None:
    """Merge the shipped defaults into dask's config.

    Done at import, as distributed does: defaults merged later, inside a
    ``dask.config.set`` block, would vanish when the block restores the config.
    """
    try:
        import dask.config
    except ImportError:  # a Jupyter server environment without dask
        return
    # A copy: dask keeps the defaults it is given.
    dask.config.update_defaults(copy.deepcopy(_shipped_defaults()))


_register_defaults()


def _from_environment(name: str) -> Any:
    """Read ``observe.<name>`` from the environment as dask would."""
    variable = name.upper().replace(".", "__").replace("-", "_")
    raw = os.environ.get(ENV_PREFIX + variable)
    if raw is None:
        return None
    try:
        return ast.literal_eval(raw)
    except (SyntaxError, ValueError):
        return raw


def _shipped_default(name: str) -> Any:
    value: Any = _shipped_defaults()["observe"]
    for part in name.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def get(name: str) -> Any:
    """Return the setting ``observe.<name>``, or None when it is unset.

    Without dask (a Jupyter server's environment) the environment variable is
    read as dask would, else the shipped default.
    """
    try:
        import dask.config
    except ImportError:
        found = _from_environment(name)
        return _shipped_default(name) if found is None else found
    return dask.config.get(f"observe.{name}", default=None)


def default_store_path() -> Path:
    """The store path from ``observe.store``, else the per-user data directory."""
    configured = get("store")
    if configured and not isinstance(configured, str | os.PathLike):
        # e.g. DASK_OBSERVE__STORE__PATH, which dask reads as {"path": ...}: the
        # text of that dict would otherwise become a directory tree.
        raise ValueError(
            f"observe.store must be the path of a store file, not {configured!r}: "
            "set DASK_OBSERVE__STORE=/path/to/observe.sqlite or "
            "dask.config.set({'observe.store': '/path/to/observe.sqlite'})"
        )
    if configured:
        return Path(os.path.expandvars(str(configured))).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data_home) / "dask-observe" / "observe.sqlite"


def version() -> str:
    """This dask-observe's version: the judge of what a run's end stored
    (its verdict, its task figures), which another version judges again."""
    try:
        from dask_observe._version import __version__
    except ImportError:  # a source tree never installed
        return "0+unknown"
    return str(__version__)

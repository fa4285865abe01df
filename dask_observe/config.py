"""Configuration under dask's ``observe.`` namespace.

Settings live in dask config so that YAML files, ``dask.config.set`` and environment
variables (``DASK_OBSERVE__STORE=...``) all work. Importing dask costs ~180 ms,
more than a whole ``dask-observe runs`` may take, and the Jupyter server must not
need dask at all (kernels often live in another environment). So a process that
has not imported dask reads the ``observe`` settings from where dask would: its
YAML and JSON files (:func:`dask_paths`), ``DASK_INTERNAL_INHERIT_CONFIG`` and
the ``DASK_OBSERVE__*`` variables, over the shipped defaults. Once dask is
imported, dask's own config answers (``dask.config.set`` included), with the
shipped defaults registered in it.
"""

from __future__ import annotations

import ast
import base64
import copy
import functools
import json
import os
import site
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULTS_FILE = Path(__file__).with_name("observe.yaml")
ENV_PREFIX = "DASK_OBSERVE__"
#: What dask passes its config to the processes it starts in (a nanny's worker).
INHERITED = "DASK_INTERNAL_INHERIT_CONFIG"

_MISSING = object()


def _yaml_loader() -> Any:
    """libyaml's safe loader where PyYAML has it: the shipped file is mostly
    comments, and the Python loader took 6 ms of every first read."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_load(stream: Any) -> Any:
    import yaml

    return yaml.load(stream, Loader=_yaml_loader())


@functools.cache
def _shipped_defaults() -> dict[str, Any]:
    """The shipped defaults file, read once (not to be changed)."""
    with DEFAULTS_FILE.open() as f:
        found: dict[str, Any] = yaml_load(f)
    return found


_registered = False


def register_defaults() -> None:
    """Merge the shipped defaults into dask's config, once, where dask is
    imported: a user's ``dask.config.get("observe....")`` then sees them, and
    a run's record of changed settings leaves them out.

    Done at import where dask is already loaded (and by the recorder, which
    loads it), as distributed does: defaults merged later inside a
    ``dask.config.set`` block vanish when the block restores the config, so
    :func:`get` does not depend on them."""
    global _registered
    dask_config = sys.modules.get("dask.config")
    if _registered or dask_config is None:
        return
    _registered = True
    # A copy: dask keeps the defaults it is given.
    dask_config.update_defaults(copy.deepcopy(_shipped_defaults()))


register_defaults()


def dask_paths() -> list[str]:
    """Where dask looks for config files, in its order (later ones win): as
    ``dask.config.paths`` is made (a test compares the two)."""
    paths = [
        os.getenv("DASK_ROOT_CONFIG", "/etc/dask"),
        os.path.join(sys.prefix, "etc", "dask"),
        *[os.path.join(prefix, "etc", "dask") for prefix in site.PREFIXES],
        os.path.join(os.path.expanduser("~"), ".config", "dask"),
    ]
    if "DASK_CONFIG" in os.environ:
        paths.append(os.environ["DASK_CONFIG"])
    # Each once, at its last place.
    return list(reversed(list(dict.fromkeys(reversed(paths)))))


def _config_files(paths: list[str]) -> list[str]:
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            try:
                names = os.listdir(path)
            except OSError:  # unreadable: dask skips it too
                continue
            files.extend(
                sorted(
                    os.path.join(path, name)
                    for name in names
                    if os.path.splitext(name)[1].lower() in (".json", ".yaml", ".yml")
                )
            )
        elif os.path.exists(path):
            files.append(path)
    return files


@functools.cache
def _from_files() -> tuple[dict[str, Any], ...]:
    """The ``observe`` part of each of dask's config files, read once per
    process as dask reads them once. A malformed file is dask's error to
    report, where dask is used; here it is skipped."""
    found = []
    for path in _config_files(dask_paths()):
        try:
            with open(path) as f:
                loaded = yaml_load(f)
        except Exception:  # unreadable or malformed: see above
            continue
        part = _part(loaded, "observe")
        if isinstance(part, dict):
            found.append(part)
    return tuple(found)


def _part(mapping: Any, key: str) -> Any:
    """``mapping[key]``, a key spelt with ``-`` or ``_`` alike, as dask does."""
    if not isinstance(mapping, Mapping):
        return _MISSING
    for spelling in (key, key.replace("_", "-"), key.replace("-", "_")):
        if spelling in mapping:
            return mapping[spelling]
    return _MISSING


def _interpret(raw: str) -> Any:
    """An environment variable's value as dask reads it."""
    try:
        return ast.literal_eval(raw)
    except (SyntaxError, ValueError):
        words = {"none": None, "null": None, "false": False, "true": True}
        return words.get(raw.lower(), raw)


def _from_environment() -> list[dict[str, Any]]:
    """The ``observe`` settings dask would take from this process's
    environment: the inherited config first, then each variable."""
    layers: list[dict[str, Any]] = []
    inherited = os.environ.get(INHERITED)
    if inherited:
        try:
            part = _part(json.loads(base64.urlsafe_b64decode(inherited)), "observe")
        except ValueError:
            part = _MISSING
        if isinstance(part, dict):
            layers.append(part)
    for variable, raw in os.environ.items():
        if variable.startswith(ENV_PREFIX):
            path = variable[len(ENV_PREFIX) :].lower().split("__")
            layer: dict[str, Any] = {}
            inner = layer
            for key in path[:-1]:
                inner = inner.setdefault(key, {})
            inner[path[-1]] = _interpret(raw)
            layers.append(layer)
    return layers


def _merged(base: Any, over: Any) -> Any:
    """``over`` on top of ``base``, mappings merged key by key (``-`` and
    ``_`` spellings as one key)."""
    if not (isinstance(base, Mapping) and isinstance(over, Mapping)):
        return copy.deepcopy(over)
    merged = dict(base)
    for key, value in over.items():
        known = next(
            (k for k in merged if k.replace("_", "-") == key.replace("_", "-")), key
        )
        merged[known] = _merged(merged.get(known, _MISSING), value)
    return merged


def _lookup(settings: Any, name: str) -> Any:
    for part in name.split("."):
        settings = _part(settings, part)
        if settings is _MISSING:
            break
    return settings


def get(name: str) -> Any:
    """Return the setting ``observe.<name>``, or None when it is unset.

    dask's config where this process imported dask; else the same sources
    read as dask reads them (see the module's text)."""
    default = _lookup(_shipped_defaults()["observe"], name)
    dask_config = sys.modules.get("dask.config")
    if dask_config is not None:
        register_defaults()
        found = dask_config.get(f"observe.{name}", default=_MISSING)
    else:
        found = _MISSING
        for layer in (*_from_files(), *_from_environment()):
            value = _lookup(layer, name)
            if value is not _MISSING:
                found = _merged(found, value)
    if found is _MISSING:
        return None if default is _MISSING else default
    if isinstance(found, Mapping) and isinstance(default, Mapping):
        return _merged(default, found)
    return found


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
    (its flags, its task figures), which another version judges again."""
    try:
        from dask_observe._version import __version__
    except ImportError:  # a source tree never installed
        return "0+unknown"
    return str(__version__)

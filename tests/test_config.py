"""Settings read as dask reads them, by a process that never imports dask
(the command line, the Jupyter server): the same values from the same YAML
and JSON files and variables, checked against dask's own reading of them."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: Settings of every kind: a path, a number, a mapping merged with its
#: defaults, a nested one, one a variable spells with ``_`` for ``-``.
KEYS = (
    "store",
    "archive",
    "compare.threshold",
    "capture.log-levels",
    "capture.output",
    "flags.hung-task",
    "recorder.pull-interval",
    "server.stream-max-pending",
    "discover",
)

READ = """
import json, sys
if sys.argv[1] == "dask":
    import dask.config
from dask_observe import config
values = {key: config.get(key) for key in sys.argv[2:]}
print(json.dumps({"values": values, "dask": "dask" in sys.modules,
                  "paths": config.dask_paths()}))
"""


def _read(env: dict[str, str], *, dask: bool) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", READ, "dask" if dask else "plain", *KEYS],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return found


@pytest.fixture
def configured(tmp_path: Path) -> dict[str, str]:
    """An environment whose dask config sets observe.* in files of each kind,
    in variables and in the config a nanny hands its worker."""
    user = tmp_path / "dask-config"
    user.mkdir()
    (user / "a-observe.yaml").write_text(
        "observe:\n"
        "  store: ~/stores/from-yaml.sqlite\n"
        "  compare:\n    threshold: 0.2\n"
        "  capture:\n    log-levels:\n      etl: debug\n"
        "  flags:\n    hung-task:\n      after: 7s\n"
    )
    # Later files win, as dask reads them in name order.
    (user / "b-observe.json").write_text(
        json.dumps({"observe": {"compare": {"threshold": 0.3}}})
    )
    (user / "ignored.txt").write_text("observe: {store: /nowhere}\n")
    root = tmp_path / "root-config"
    root.mkdir()
    (root / "site.yml").write_text("observe:\n  archive: file:///site/archive\n")
    inherited = {"observe": {"recorder": {"pull_interval": "50ms"}}}
    return {
        **os.environ,
        "DASK_CONFIG": str(user),
        "DASK_ROOT_CONFIG": str(root),
        "DASK_INTERNAL_INHERIT_CONFIG": base64.urlsafe_b64encode(
            json.dumps(inherited).encode()
        ).decode(),
        "DASK_OBSERVE__CAPTURE__OUTPUT": "False",
        "DASK_OBSERVE__SERVER__STREAM_MAX_PENDING": "1MiB",
        "DASK_OBSERVE__DISCOVER": "false",
    }


def test_settings_without_dask_are_dask_s_own(configured: dict[str, str]) -> None:
    without = _read(configured, dask=False)
    with_dask = _read(configured, dask=True)
    assert without["dask"] is False and with_dask["dask"] is True
    assert without["values"] == with_dask["values"]
    assert without["paths"] == with_dask["paths"]
    values = without["values"]
    assert isinstance(values, dict)
    assert values["store"] == "~/stores/from-yaml.sqlite"
    assert values["archive"] == "file:///site/archive"
    assert values["compare.threshold"] == 0.3
    # A mapping set in part keeps the rest of its defaults.
    assert values["capture.log-levels"]["etl"] == "debug"
    assert values["capture.log-levels"]["distributed"]
    assert values["flags.hung-task"]["after"] == "7s"
    assert len(values["flags.hung-task"]) > 1
    assert values["recorder.pull-interval"] == "50ms"
    assert values["capture.output"] is False
    assert values["server.stream-max-pending"] == "1MiB"
    assert values["discover"] is False


def test_dask_s_paths_are_the_ones_read() -> None:
    import dask.config

    from dask_observe.config import dask_paths

    assert dask_paths() == dask.config.paths


def test_unset_settings_are_the_shipped_defaults(tmp_path: Path) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DASK_")},
        "DASK_CONFIG": str(tmp_path),
        "DASK_ROOT_CONFIG": str(tmp_path),
    }
    without = _read(env, dask=False)
    assert without["values"] == _read(env, dask=True)["values"]
    values = without["values"]
    assert isinstance(values, dict)
    assert values["store"] is None and values["compare.threshold"] == 0.1

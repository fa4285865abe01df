"""What ``tasks.speak_every_way`` leaves in a run: shared by the tests of
output capture on LocalClusters and on clusters without dask-observe."""

from __future__ import annotations

import json
from typing import Any

import dask_observe


def said_by(run: dask_observe.Run, tag: str) -> dict[str, dict[str, Any]]:
    """The run's lines holding ``tag``, by logger."""
    lines = run.logs(contains=tag)
    return {
        str(row["logger"]): {str(k): v for k, v in row.items()}
        for row in lines.to_dict("records")
    }


def assert_spoke(run: dask_observe.Run, tag: str, key: str) -> None:
    """Each way ``speak_every_way(tag)`` spoke is a line of task ``key``."""
    said = said_by(run, tag)
    assert set(said) == {"stdout", "stderr", "py.warnings", "user.structured"}, said
    assert said["stdout"]["message"] == f"processing {tag}"
    assert said["stdout"]["level"] == "INFO"
    assert said["stderr"]["message"] == f"retrying {tag}"
    assert said["stderr"]["level"] == "WARNING"
    warned = str(said["py.warnings"]["message"])
    assert f"UserWarning: a deprecated call in {tag}" in warned
    assert said["user.structured"]["message"] == f"loaded {tag}"
    assert json.loads(str(said["user.structured"]["fields"])) == {
        "partition": tag,
        "rows": 3,
    }
    assert {line["task"] for line in said.values()} == {key}
    assert {line["source"] for line in said.values()} == {"worker"}
    # The warning's text on stderr is the warning itself, not a second line.
    assert len(run.logs(contains=f"a deprecated call in {tag}")) == 1

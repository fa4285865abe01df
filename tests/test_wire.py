"""The records between the cluster's plugins and the recorder: named on both
ends, plain arrays on the wire."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest
from distributed import Client

import dask_observe
from dask_observe.capture import wire
from dask_observe.store import BaseStore


def test_a_record_travels_as_an_array_and_is_read_back_by_name() -> None:
    task = wire.TaskRecord(
        "task", 1.5, "inc-1", "inc", "span", "tcp://w:1", 7, 1.0, 1.4, "memory",
        28, 0.4, 0.0, 0.0, 0.0, 0.0, None, None,
    )  # fmt: skip
    # msgpack (distributed's RPC) sends the tuple as an array, read as a list.
    received = msgpack.unpackb(msgpack.packb(task))
    assert received == list(task)
    read = wire.typed(received)
    assert isinstance(read, wire.TaskRecord) and read == task
    assert read.prefix == "inc" and read.compute_s == 0.4
    assert wire.typed(task) is task  # nothing rebuilt in the same process


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (["span", 1.0], "not a wire record"),
        ([], "not a wire record"),
        (["log", 1.0, 30], "a log record of 3 fields"),
    ],
)
def test_a_record_this_version_cannot_read_is_refused(
    raw: list[object], says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        wire.typed(raw)


def test_the_stores_columns_are_the_records_fields(
    client: Client, store_path: Path
) -> None:
    # The store writes a log or task record's fields, in order, as its columns:
    # a field added to one end only would land in the wrong column.
    with dask_observe.record("named", client=client) as run:
        client.submit(abs, -1).result()
    with BaseStore(str(store_path)) as store:
        columns = {
            table: [r["name"] for r in store.rows(f"PRAGMA table_info({table})", [])]
            for table in ("logs", "tasks")
        }
    assert columns["tasks"][2:] == list(wire.TaskRecord._fields[1:])
    assert columns["logs"][2:] == list(wire.LogRecord._fields[1:])
    assert run.tasks()["prefix"].tolist() == ["abs"]


def test_a_batch_with_a_record_this_version_cannot_read_stores_none_of_it(
    tmp_path: Path,
) -> None:
    # Records are read by name one at a time as they are stored: one that
    # cannot be read, after others that were, leaves the store as it was.
    with BaseStore(tmp_path / "observe.sqlite") as store:
        store.telemetry.append(
            "tcp://x:1", [("log", 1.0, 30, "worker", "w", "u", "kept")]
        )
        good = ("log", 2.0, 30, "worker", "w", "u", "not kept")
        with pytest.raises(ValueError, match="a log record of 3 fields"):
            store.telemetry.append("tcp://x:1", [good, ("log", 1.0, 30)])
        messages = [r["message"] for r in store.rows("SELECT message FROM logs", [])]
        assert messages == ["kept"]
        (last,) = store.rows("SELECT value FROM sequence", [])
        assert last["value"] == 1

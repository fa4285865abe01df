"""Secrets never leave the process: redacted before the store, so reports,
exports and the command line cannot show them. Rules on text first, then a real
cluster, a real notebook shell, a real OTLP receiver and the store's own bytes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dask.config
import pytest
from distributed import Client
from IPython.core.interactiveshell import InteractiveShell

import dask_observe
from dask_observe.redact import MARKER, Redactor, configured
from dask_observe.store import BaseStore

from .conftest import dask_observe_cli, wait_until
from .corpus import NEGATIVES, POSITIVES
from .otlp import Collector
from .planted import ARCHIVE_OPTIONS, CLEAN, SECRETS, found_in


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "connecting with password=hunter2 to db",
            "connecting with password=[redacted] to db",
        ),
        (
            "Authorization: Bearer abc.def-ghi_123456",
            "Authorization: Bearer [redacted]",
        ),
        (
            "{'Authorization': 'Basic dXNlcjpwYXNz'}",
            "{'Authorization': 'Basic [redacted]'}",
        ),
        (
            "postgresql://scott:tiger@db:5432/prod",
            "postgresql://scott:[redacted]@db:5432/prod",
        ),
        ("key id AKIAIOSFODNN7EXAMPLE used", "key id [redacted] used"),
        ("ghp_0123456789abcdefghijABCDEFGHIJ012345 leaked", "[redacted] leaked"),
        (
            "glpat-abcdefghij0123456789 and xoxb-1234567890-abcdefghij",
            "[redacted] and [redacted]",
        ),
        ("DB_PASSWORD = 'hunter2 hunter3'", "DB_PASSWORD = [redacted]"),
        (
            '{"api_key": "sk-123456", "name": "x"}',
            '{"api_key": [redacted], "name": "x"}',
        ),
        (
            "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG",
            "aws_secret_access_key=[redacted]",
        ),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY----- ok",
            "[redacted] ok",
        ),
        ("jwt eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4", "jwt [redacted]"),
    ],
)
def test_each_kind_of_secret_is_replaced_and_nothing_else(
    line: str, expected: str
) -> None:
    assert Redactor().text(line) == expected


@pytest.mark.parametrize(("line", "secret"), POSITIVES)
def test_every_shape_of_the_corpus_loses_its_secret(line: str, secret: str) -> None:
    redacted = Redactor().text(line)
    assert secret not in redacted and MARKER in redacted


@pytest.mark.parametrize("line", NEGATIVES)
def test_the_corpus_lines_without_a_secret_are_kept_byte_for_byte(line: str) -> None:
    assert Redactor().text(line) == line


def test_storage_options_are_never_recorded_and_older_ones_lose_their_values() -> None:
    from dask_observe.recording.environment import config_changes

    with dask.config.set(
        {
            "observe.archive-options": ARCHIVE_OPTIONS,
            "my-lib.storage_options": {"client_kwargs": {"region": "eu"}},
            "my-lib.threads": 4,
        }
    ):
        changed = config_changes()
    assert changed["my-lib.threads"] == 4
    assert not [k for k in changed if "archive-options" in k or "storage_options" in k]
    # A run recorded before kept them: redaction (``dask-observe redact``)
    # takes every value under them, whatever the key is called.
    older = {"observe.archive-options.account_name": "teamruns",
             "s3.storage_options": {"anon": False, "endpoint": "x"}}  # fmt: skip
    assert Redactor().data(older) == {
        "observe.archive-options.account_name": MARKER,
        "s3.storage_options": {"anon": False, "endpoint": MARKER},
    }


def test_config_keys_that_name_secrets_lose_their_values_only() -> None:
    config = {
        "coiled.token": "abc",
        "gateway.auth.kwargs.password": "pw",
        "gateway.auth.type": "basic",
        "tokenize.ensure-deterministic": True,
        "distributed.worker.memory.target": 0.6,
        "my-service": {"api-key": "k", "url": "https://u:p@host/x"},
    }
    assert Redactor().data(config) == {
        "coiled.token": MARKER,
        "gateway.auth.kwargs.password": MARKER,
        "gateway.auth.type": "basic",
        "tokenize.ensure-deterministic": True,
        "distributed.worker.memory.target": 0.6,
        "my-service": {"api-key": MARKER, "url": "https://u:[redacted]@host/x"},
    }


def test_observe_redact_adds_keys_and_patterns_and_can_be_turned_off() -> None:
    extra = {
        "observe.redact.keys": ["session-id"],
        "observe.redact.patterns": [r"c-\d+"],
    }
    with dask.config.set(extra):
        redactor = configured()
        assert redactor.text("session-id=77 for c-1234") == (
            "session-id=[redacted] for [redacted]"
        )
        assert redactor.data({"app.session-id": "x"}) == {"app.session-id": MARKER}
    with dask.config.set({"observe.redact.enabled": False}):
        assert configured().text("password=hunter2") == "password=hunter2"
    with (
        dask.config.set({"observe.redact.patterns": ["cust-(\\d+"]}),
        pytest.raises(ValueError, match=r"observe\.redact\.patterns: 'cust-"),
    ):
        configured()


# -- on a real cluster, from a notebook cell -----------------------------------


def store_bytes(path: Path) -> list[str]:
    """The secrets in the store's file and write-ahead log, read by another
    process: this one holds connections to them, and reading a file with
    open()/close() here would drop their locks."""
    code = (
        "import sys, pathlib; p = sys.argv[1]; print(b''.join("
        "pathlib.Path(p + s).read_bytes() for s in ('', '-wal') "
        "if pathlib.Path(p + s).exists()).hex())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, check=True
    )
    return found_in(bytes.fromhex(done.stdout.decode().strip()))


def readable(path: Path) -> bytes | str:
    """A file's content as a reader sees it: Parquet decoded (its pages are
    compressed, so its bytes would hide a secret), anything else as bytes."""
    if path.suffix == ".parquet":
        import pandas as pd

        return pd.read_parquet(path).to_csv()
    return path.read_bytes()


@pytest.fixture
def secret_run(
    ip: InteractiveShell,
    client: Client,
    store_path: Path,
    collector: Collector,
) -> Iterator[dask_observe.Run]:
    """A cell recorded with the secrets where users keep them: two in dask
    config and the archive's storage options, one assigned in the cell, four
    in a task's log line and the corpus's shapes in more; exported live to a
    real OTLP receiver."""
    ip.user_ns["client"] = client
    cell = (
        f"%%dask_record secrets --no-widget\n"
        f"DB_PASSWORD = '{SECRETS['DB_PASSWORD']}'\n"
        "from tests.planted import leak\n"
        "client.submit(leak, pure=False).result()\n"
    )
    with dask.config.set(
        {
            "coiled.token": SECRETS["coiled.token"],
            "gateway.auth.kwargs.password": SECRETS["gateway.auth.kwargs.password"],
            "observe.archive-options": ARCHIVE_OPTIONS,
            "observe.export.otlp.endpoint": collector.url,
        }
    ):
        result = ip.run_cell(cell)
        result.raise_error()
    run = dask_observe.open_store().run("last")
    assert run.name == "secrets"
    yield run


def test_no_secret_reaches_the_store_and_the_lines_stay_readable(
    secret_run: dask_observe.Run, store_path: Path
) -> None:
    run = secret_run
    messages = list(run.logs()["message"])
    (line,) = [m for m in messages if m.startswith("connecting with")]
    assert line == (
        "connecting with password=[redacted], Authorization: Bearer [redacted], "
        "key [redacted], token [redacted]"
    )
    assert CLEAN in messages  # byte for byte
    assert set(NEGATIVES) <= set(messages)
    environment = run.environment()
    assert environment["config"]["coiled.token"] == MARKER
    assert not [k for k in environment["config"] if "archive-options" in k]
    assert "DB_PASSWORD = [redacted]" in environment["code"]["cell"]
    assert store_bytes(store_path) == []


def test_a_flood_of_lines_is_redacted_whole_and_in_order(
    client: Client, store_path: Path
) -> None:
    # A pull of thousands is redacted a few hundred at a time (the garbage
    # collector's reasons, recording/copying.py): every slice, its edges
    # included, and the order kept.
    from .tasks import leak_many

    with dask_observe.record("leaky", client=client) as run:
        assert client.submit(leak_many, 2_000, pure=False).result() == 2_000
    messages = list(run.logs(contains="line ")["message"])
    assert messages == [
        f"line {i:05d}" + (" password=[redacted]" if i % 3 == 0 else "")
        for i in range(2_000)
    ]
    assert store_bytes(store_path) == []


def test_no_secret_leaves_by_report_export_cli_or_otlp(
    secret_run: dask_observe.Run,
    store_path: Path,
    tmp_path: Path,
    collector: Collector,
) -> None:
    run = secret_run
    assert found_in(run.report().html) == []
    saved = tmp_path / "r.html"
    report = dask_observe_cli(store_path, "report", str(run.id), "-o", str(saved))
    assert report.returncode == 0, report.stderr
    assert found_in(saved.read_bytes()) == []
    for path in run.to_parquet(tmp_path / "parquet").values():
        assert found_in(readable(path)) == [], path.name
    assert found_in(run.to_chrome_trace(tmp_path / "trace.json").read_bytes()) == []
    assert found_in(dask_observe.compare(run, run)._repr_html_()) == []
    run.publish((tmp_path / "archive").as_uri())
    published = [p for p in (tmp_path / "archive").rglob("*") if p.is_file()]
    assert published
    for path in published:
        assert found_in(readable(path)) == [], path.name
    for command in (["logs", str(run.id)], ["flags", str(run.id)], ["runs"],
                    ["compare", str(run.id), str(run.id)]):  # fmt: skip
        done = dask_observe_cli(store_path, *command)
        assert done.returncode == 0 and found_in(done.stdout) == [], command
    # The live export sent the line as it was stored, redacted.
    wait_until(
        lambda: any(
            r.body.string_value.startswith("connecting with")
            for _, r in collector.log_records()
        ),
        "the live export's log line",
    )
    with collector.lock:
        sent = [str(request) for requests in collector.received.values()
                for request in requests]  # fmt: skip
    assert sent and found_in("".join(sent)) == []


def test_redact_applies_the_rules_to_runs_stored_before(tmp_path: Path) -> None:
    """A store written without redaction (an older version): ``redact
    --dry-run`` counts and changes nothing; ``redact`` rewrites the rows and
    leaves no old byte in the file or its write-ahead log."""
    from dask_observe.capture.wire import EventRecord, LogRecord

    path = tmp_path / "observe.sqlite"
    secret = SECRETS["password="]
    with BaseStore(path) as store:
        run_id = store.create_run("old", cluster="tcp://s:1")
        store.telemetry.append("tcp://s:1", [
            LogRecord("log", 1.0, 30, "worker", "w", "user", f"password={secret} x"),
            LogRecord("log", 1.0, 30, "worker", "w", "user", CLEAN),
            EventRecord("event", 1.0, "custom", None, {"token": secret}),
        ])  # fmt: skip
        store.set_environment(run_id, {"config": {"coiled.token": secret}})
        store.end_run(run_id, "finished")
        # What its report shows of its tasks, a failure's exception included.
        failed = {"exception": [f"ConnectionError: password={secret}"]}
        store.kept.set_task_figures(run_id, "0.1", json.dumps({"failed": failed}))
    assert store_bytes(path) == ["password="]
    dry = dask_observe_cli(path, "redact", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert (
        "Would redact 4 rows (1 in logs, 1 in events, 1 in runs, 1 in task_figures)"
        in dry.stdout
    )
    assert store_bytes(path) == ["password="]
    done = dask_observe_cli(path, "redact")
    assert done.returncode == 0, done.stderr
    assert "Redacted 4 rows" in done.stdout
    assert store_bytes(path) == []
    with BaseStore(path) as store:
        messages = store.frame("SELECT message FROM logs", (), ("message",))
        assert sorted(messages["message"]) == [CLEAN, "password=[redacted] x"]
    again = dask_observe_cli(path, "redact")
    assert "Nothing to redact" in again.stdout


def test_the_recorders_redaction_loads_no_pybind11_binding() -> None:
    """The recorder redacts on daemon threads. A daemon thread inside RE2's
    binding (pybind11) when the interpreter exits aborts the process
    ("terminate called without an active exception": 4 exits of 6 with four
    such threads; once in the suite, a recording script's exit)."""
    code = (
        "import sys\n"
        "from dask_observe.capture.wire import LogRecord\n"
        "from dask_observe.redact import Redactor\n"
        "line = LogRecord('log', 1.0, 30, 'worker', 'w', 'u', 'password=x ghp_y')\n"
        "Redactor().records([(1, line)]); Redactor().text('token: abc')\n"
        "print('re2' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False"

"""The ``dask-observe`` command, run as a user would run it."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from distributed import Client

import dask_observe
from dask_observe.analysis.figures import time_split
from dask_observe.api import Run
from dask_observe.report.svg import short_address
from dask_observe.store import BaseStore

from .conftest import (
    DASK_OBSERVE,
    dask_observe_cli,
    dask_observe_loading,
    dask_observe_process,
    exited,
    stored_lines,
    subprocess_env,
    wait_until,
)
from .load import Pressure, kinds_not_the_hosts


def _removed(run: Run) -> set[str]:
    """distributed's own word on which workers left the cluster in a run."""
    return set(run.events("worker-removed")["worker"].dropna())


def test_demo_records_runs_that_go_wrong_and_says_why(store_path: Path) -> None:
    with Pressure() as pressure:
        done = dask_observe_process(store_path, "demo")  # as the Quick start runs it
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert str(store_path) in out and "dask-observe runs" in out
    with dask_observe.Store(store_path) as store:
        runs = {run.name: run for run in map(store.run, (1, 2, 3, 4))}
        flags = {name: set(run.flags()["kind"]) for name, run in runs.items()}
        # 200 mapped tasks and their sum, plus the array computation: clean.
        assert runs["demo: clean"].summary()["n_tasks"] > 201
        # On a host busy with other work (CI's, running the suite beside it)
        # its workers' loops stalled, told as the host's: true, and nothing
        # about the demo's code.
        assert kinds_not_the_hosts(runs["demo: clean"].flags(), pressure) == []
        assert {"memory-restart", "killed-worker"} <= flags["demo: memory death"]
        assert "spilling" in flags["demo: spilling"]
        assert "hung-task" in flags["demo: hang"]
        assert runs["demo: hang"].status == "failed"  # stopped by its timeout
        # Its one task still ran as it ended: counted, not "0 tasks".
        hang = runs["demo: hang"].summary()
        held = runs["demo: hang"].tasks(epoch=True).to_dict("records")
        assert (hang["n_tasks"], hang["n_running"]) == (1, 1), held
        # Its thread was held, not idle: the 4 s its task ran are that
        # task's in where the time went (distributed counts them idle).
        split = time_split(runs["demo: hang"])
        assert split.get("still running at the end", 0.0) >= 3.0, split
        death = runs["demo: memory death"]
        assert len(death.logs(contains="exceeded 95% memory budget")) >= 1
        # Its workers died for memory (the nanny said so): never a green
        # "finished", in the store's listing or the demo's own words.
        assert death.status == "finished" and death.summary()["n_lost"] >= 1
        listing = store.runs().set_index("name")
        assert listing.loc["demo: clean", "n_lost"] == 0
    said = next(line for line in out.splitlines() if line.startswith("Run 2 "))
    assert said.startswith("Run 2 'demo: memory death': finished with losses (1 task ")
    assert "workers died)" in said or "worker died)" in said
    # The clean run's block says what its store holds: "no flags", or (on a
    # busy host, checked above against the kernel) the host's flags alone.
    clean_block = out.split("Run 1 'demo: clean': finished,", 1)[1].split("Run 2 ")[0]
    told = re.findall(r"^  (?:error|warning|info)\s+([\w-]+):", clean_block, re.M)
    assert sorted(told) == sorted(flags["demo: clean"]), clean_block
    assert ("  no flags" in clean_block) == (not flags["demo: clean"]), clean_block
    assert "Run 4 'demo: hang': failed, 1 task, 1 still running at its end," in out
    listed = dask_observe_cli(store_path, "runs").stdout.splitlines()
    assert "finished with losses" in next(r for r in listed if "memory death" in r)
    assert "finished with losses" not in next(r for r in listed if "clean" in r)
    hang_report = (store_path.parent / "reports" / "run-4.html").read_text()
    assert "held by tasks still running at the end" in hang_report
    death_report = (store_path.parent / "reports" / "run-2.html").read_text()
    assert "memory death&#x27;: finished with losses (1 task failed, " in death_report
    # What the killed task printed as it grew, beside its failure.
    assert re.search(r"holding \d+ MiB of blocks", death_report)
    # A memory chart of every worker that died, as distributed removed them
    # (some die before their first heartbeat: their own samples, their
    # nanny's reading, or "no memory reading").
    with dask_observe.Store(store_path) as store:
        removed = _removed(store.run(2))
    assert removed
    for worker in removed:
        assert f'aria-label="memory of {short_address(worker)}"' in death_report
    assert "error    killed-worker: Task '_grow-" in out
    assert "it waits in _wait_forever at" in out  # the hang's line, named
    # The cluster closes without killing a worker still running the hung task.
    assert "still alive" not in done.stderr, done.stderr
    # distributed's warnings are the runs' to tell, not the terminal's: kept
    # in the store (above: the flags read them), not printed.
    assert "exceeded 95% memory budget" not in done.stderr, done.stderr
    for run_id in (1, 2, 3, 4):
        report = store_path.parent / "reports" / f"run-{run_id}.html"
        assert f"report   {report}" in out
        assert f'data-run-id="{run_id}"' in report.read_text()

    clean = dask_observe_cli(store_path, "flags", "1")
    assert clean.returncode == 0, clean.stderr
    if not flags["demo: clean"]:
        assert clean.stdout == "No flags: nothing looked wrong.\n"
    for kind in flags["demo: clean"]:
        assert kind in clean.stdout, clean.stdout
    elsewhere = store_path.parent / "copy.html"
    saved = dask_observe_cli(store_path, "report", "1", "-o", str(elsewhere))
    assert saved.returncode == 0, saved.stderr
    assert f"written to {elsewhere}" in saved.stdout
    assert 'data-run-id="1"' in elsewhere.read_text()
    bad = dask_observe_cli(store_path, "report", "1", "-o", "/nonexistent/r.html")
    assert bad.returncode == 1 and "No such file or directory" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_runs_lists_the_recorded_runs(store_path: Path) -> None:
    with BaseStore(store_path) as store:
        run_id = store.create_run("nightly etl", cluster="tcp://10.0.0.1:8786")
        store.end_run(run_id, "failed", n_tasks=42, n_failed=2)
    done = dask_observe_cli(store_path, "runs")
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.splitlines()
    assert header.split()[:3] == ["id", "name", "status"]
    assert "nightly etl" in row
    assert "failed" in row and "42" in row and "tcp://10.0.0.1:8786" in row


def test_runs_lists_a_store_whose_every_run_is_still_running(store_path: Path) -> None:
    # Read while the first runs of a store record (the held-out check of
    # concurrent recorders and readers): no run has ended, so no duration.
    # The listing failed ("NoneType doesn't define __round__").
    with BaseStore(store_path) as store:
        store.create_run("first")
        store.create_run("second")
    done = dask_observe_cli(store_path, "runs")
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split()[:3] == ["id", "name", "status"]
    assert [row.split()[1:3] for row in rows] == [
        ["second", "running"],
        ["first", "running"],
    ]


def test_runs_without_a_store_says_how_to_record_one_and_creates_none(
    store_path: Path,
) -> None:
    done = dask_observe_cli(store_path, "runs")
    assert done.returncode == 0
    assert f"No dask-observe store at {store_path} yet" in done.stdout
    assert "dask-observe demo" in done.stdout
    assert not store_path.exists() and not store_path.parent.exists()
    # The other reading commands say so as an error, and create nothing either.
    for command in (["logs", "last"], ["flags", "last"], ["report", "last"]):
        done = dask_observe_cli(store_path, *command)
        assert done.returncode == 1
        assert f"no dask-observe store at {store_path}" in done.stderr
    assert not store_path.parent.exists()


def test_a_store_path_given_that_holds_none_is_an_error(tmp_path: Path) -> None:
    # A path typed by hand that holds nothing is a typo, not a fresh start.
    missing = tmp_path / "missing" / "x.sqlite"
    done = dask_observe_cli(
        tmp_path / "default.sqlite", "--store", str(missing), "runs"
    )
    assert done.returncode == 1
    assert f"no dask-observe store at {missing}" in done.stderr
    assert not missing.parent.exists()


def test_read_answers_say_what_is_wrong_and_what_is_empty(tmp_path: Path) -> None:
    """A newcomer's first minutes with the command line: an unknown name
    exited 0 listing nothing, a time it could not read printed pandas' own
    words, an empty answer printed nothing at all, a table had no headers."""
    path = tmp_path / "observe.sqlite"
    with BaseStore(path) as store:
        for name in ("etl", "nightly"):
            run_id = store.create_run(name)
            store.end_run(run_id, "finished", n_tasks=3, n_failed=0)
    unknown = dask_observe_cli(path, "history", "nosuchname")
    assert unknown.returncode == 1
    assert "no runs named 'nosuchname'" in unknown.stderr
    assert "'etl', 'nightly'" in unknown.stderr
    history = dask_observe_cli(path, "history", "etl")
    assert history.returncode == 0, history.stderr
    header, row = history.stdout.splitlines()
    assert header.split()[:3] == ["id", "started", "(UTC)"] and "judged" in header
    assert row.split()[0] == "1" and " - " in row  # judged: nothing to judge against
    bad = dask_observe_cli(path, "logs", "last", "--since", "the day before")
    assert bad.returncode == 1
    assert "cannot read the time 'the day before'" in bad.stderr
    assert "'10min'" in bad.stderr and "yesterday" in bad.stderr
    assert "Unknown datetime" not in bad.stderr and "Traceback" not in bad.stderr
    for since in ("yesterday", "2h", "2026-01-01"):
        empty = dask_observe_cli(path, "logs", "last", "--since", since)
        assert empty.returncode == 0, (since, empty.stderr)
        assert empty.stdout == "" and "0 lines in run 2 'nightly'" in empty.stderr


def test_a_store_that_is_not_ours_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    done = dask_observe_cli(path, "runs")
    assert done.returncode == 1
    assert done.stderr.startswith("dask-observe: error: cannot open")
    assert str(path) in done.stderr
    assert "Traceback" not in done.stderr


def test_a_store_setting_that_is_no_path_is_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "DASK_OBSERVE__STORE__PATH": str(tmp_path / "s.sqlite")}
    env.pop("DASK_OBSERVE__STORE", None)
    done = subprocess.run(
        [DASK_OBSERVE, "runs"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "observe.store must be the path of a store file" in done.stderr
    assert "DASK_OBSERVE__STORE=" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing made of the setting's text


def test_the_command_line_offers_every_source_the_store_filters_by() -> None:
    # commands.py stays free of the store's imports (a CLI's start): its
    # list is written out, and must name what tasks wrote as the store does.
    from dask_observe.store.queries import OUTPUT_SOURCES
    from dask_observe.subcommands import SOURCES

    assert set(SOURCES) == {"scheduler", "worker", "nanny", *OUTPUT_SOURCES}


def test_an_unknown_command_shows_usage(store_path: Path) -> None:
    done = dask_observe_cli(store_path, "frobnicate")
    assert done.returncode == 2
    assert "usage: dask-observe" in done.stderr


def shout(x: int) -> int:
    import logging

    logging.getLogger("user.cli").warning("row %d looks <odd>", x)
    return x


def scheduler_says(line: str) -> None:
    logging.getLogger("distributed.scheduler").info(line)


def test_logs_prints_a_runs_lines_filtered(client: Client, store_path: Path) -> None:
    with dask_observe.record("loud"):
        client.gather(client.map(shout, range(3)))
        client.run_on_scheduler(scheduler_says, "from the scheduler")
        client.submit(print, "a task prints this", pure=False).result()
    done = dask_observe_cli(store_path, "logs", "last", "--filter", "LOOKS <ODD>")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3
    assert all(" WARNING  worker tcp://" in line for line in lines)
    # Each line names the task that logged it, in brackets.
    found = [re.search(r"user\.cli \[(shout-\w+)\]: (.*)$", line) for line in lines]
    said = sorted((m.group(2), m.group(1)) for m in found if m)
    assert [text for text, _ in said] == [f"row {i} looks <odd>" for i in range(3)]
    shouted = dask_observe_cli(store_path, "logs", "last", "--prefix", "shout")
    assert sorted(shouted.stdout.splitlines()) == sorted(lines)
    one = dask_observe_cli(store_path, "logs", "last", "--task", said[0][1])
    assert one.stdout.splitlines() == [line for line in lines if "row 0" in line]
    none = dask_observe_cli(store_path, "logs", "last", "--level", "error")
    assert none.returncode == 0 and none.stdout == ""
    # The scheduler's own lines have no worker: none is printed for them.
    scheduler = dask_observe_cli(store_path, "logs", "last", "--source", "scheduler")
    lines = scheduler.stdout.splitlines()
    assert lines[-1].endswith(
        " INFO     scheduler distributed.scheduler: from the scheduler"
    )
    assert all(line.split()[3] == "scheduler" for line in lines)
    assert all(line.split()[4].startswith("distributed.") for line in lines)
    # What tasks printed is a source of its own.
    printed = dask_observe_cli(store_path, "logs", "last", "--source", "stdout")
    (line,) = printed.stdout.splitlines()
    assert " stdout [print-" in line and line.endswith("]: a task prints this"), line


def test_logs_of_an_unknown_run_lists_the_latest(store_path: Path) -> None:
    with BaseStore(store_path) as store:
        store.create_run("only one")
    done = dask_observe_cli(store_path, "logs", "42")
    assert done.returncode == 1
    assert "no run 42" in done.stderr and "1 (only one)" in done.stderr


def test_record_an_unreachable_scheduler_fails_fast_and_clearly(
    store_path: Path,
) -> None:
    started = time.monotonic()
    done = dask_observe_cli(store_path, "record", "--scheduler", "tcp://127.0.0.1:9")
    assert time.monotonic() - started < 10
    assert done.returncode == 1
    assert "cannot reach the scheduler at tcp://127.0.0.1:9" in done.stderr
    assert "Traceback" not in done.stderr


def test_record_headless_until_interrupted(client: Client, store_path: Path) -> None:
    assert client.scheduler is not None
    address = str(client.scheduler.address)
    assert client.submit(abs, -1, key="before-the-run").result() == 1
    process = subprocess.Popen(
        [DASK_OBSERVE, "record", "--scheduler", address, "--name", "nightly"],
        env=subprocess_env(store_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().startswith("Recording run 1 'nightly'")
    process.stdout.readline(), process.stdout.readline()  # store path, how to stop
    client.gather(client.map(shout, range(5), key=[f"shout-{i}" for i in range(5)]))
    with pytest.raises(ValueError):
        client.submit(int, "not a number", key="parse").result()
    wait_until(
        lambda: stored_lines(store_path, 1, "looks <odd>") == 5,
        "the five lines in the store",
    )
    process.send_signal(signal.SIGINT)
    out, err = exited(process, timeout=30)
    assert process.returncode == 0, err
    # Its last line says what a nightly job's log should keep. (Only the
    # failure's flag is certain: the session's cluster is shared with other
    # tests' load.)
    last = out.splitlines()[-1]
    assert last.startswith(
        "Recorded run 1: 6 tasks, finished with losses (1 task failed); flags: "
    )
    assert last.endswith(" (dask-observe flags 1)")
    assert "task-errors" in last.split("flags: ")[1].split(" (")[0].split(", ")
    with BaseStore(store_path) as store:
        run = store.run("last")
        assert (run.name, run.status) == ("nightly", "finished")
        assert set(run.tasks()["key"]) == {"parse"} | {f"shout-{i}" for i in range(5)}
        assert len(run.logs(contains="looks <odd>")) == 5
        # No span: the run's fine metrics are the whole cluster's meanwhile,
        # and nothing of what the shared cluster ran before.
        fine = run.fine_metrics()
        assert set(fine[fine["context"] == "execute"]["prefix"]) == {"shout", "parse"}
        # The results fetched count too: transfers are metered by the worker.
        assert "get-data" in set(fine["context"])
        assert fine[fine["unit"] == "seconds"]["value"].sum() > 0


def test_logs_follow_prints_lines_as_they_come_and_stops_with_the_run(
    client: Client, store_path: Path
) -> None:
    with dask_observe.record("followed"):
        client.gather(client.map(shout, range(2)))  # before the follower starts
        follower = subprocess.Popen(
            [DASK_OBSERVE, "logs", "last", "--follow", "--filter", "looks"],
            env=subprocess_env(store_path),
            stdout=subprocess.PIPE,
            text=True,
        )
        assert follower.stdout is not None
        first = [follower.stdout.readline() for _ in range(2)]
        client.gather(client.map(shout, range(2, 5)))  # while it follows
        later = [follower.stdout.readline() for _ in range(3)]
    # The run ended: the follower prints what is left and exits by itself.
    rest, _ = exited(follower, timeout=30)
    assert follower.returncode == 0
    lines = first + later + rest.splitlines(keepends=True)
    assert sorted(line.split("]: ")[1].strip() for line in lines) == [
        f"row {i} looks <odd>" for i in range(5)
    ]


def test_terminal_escapes_in_names_and_lines_are_printed_visibly(
    store_path: Path,
) -> None:
    with BaseStore(store_path) as store:
        run_id = store.create_run(
            "\x1b]0;pwned\x07nightly\nfake row", cluster="tcp://x:1"
        )
        store.telemetry.append(
            "tcp://x:1",
            [
                (
                    "log",
                    time.time(),
                    30,
                    "worker",
                    None,
                    "u",
                    "\x1b[31mred\x1b[0m\rover \u202eevil\x9b",
                )
            ],
        )
        store.end_run(run_id, "finished")
    runs = dask_observe_cli(store_path, "runs")
    logs = dask_observe_cli(store_path, "logs", "last")
    for done in (runs, logs):
        assert done.returncode == 0, done.stderr
        assert not any(c in done.stdout for c in "\x1b\x07\r")
    assert "\\x1b]0;pwned\\x07nightly\\x0afake row" in runs.stdout
    assert len(runs.stdout.splitlines()) == 2  # the header and one row
    assert "\\x1b[31mred\\x1b[0m\\x0dover \\u202eevil\\x9b" in logs.stdout
    # An error that names what others chose (a run the user asked for).
    error = dask_observe_cli(store_path, "flags", "\x1b[2J\u202elast")
    assert error.returncode == 1
    assert "\x1b" not in error.stderr and "\u202e" not in error.stderr
    assert "\\x1b[2J\\u202elast" in error.stderr


def test_runs_logs_and_flags_answer_without_importing_pandas_or_dask(
    store_path: Path,
) -> None:
    from dataclasses import asdict

    from dask_observe.config import version
    from dask_observe.diagnose import Flag

    with BaseStore(store_path) as store:
        run_id = store.create_run("nightly", cluster="tcp://x:1")
        store.telemetry.append(
            "tcp://x:1",
            [("log", time.time(), 30, "worker", None, "etl", "rows skipped: 3")],
        )
        store.end_run(run_id, "finished", n_tasks=1)
        flag = Flag(
            kind="tiny-tasks",
            severity="warning",
            time=time.time(),
            worker=None,
            message="Tasks are tiny.",
            advice="Bigger.",
        )
        store.kept.set_judgement(run_id, [asdict(flag)], version())
    said = {
        ("runs",): "nightly",
        ("logs", "last"): "etl: rows skipped: 3",
        ("flags", "last"): "[warning] tiny-tasks: Tasks are tiny.",
    }
    for command, words in said.items():
        done, loaded = dask_observe_loading(store_path, *command)
        assert done.returncode == 0, done.stderr
        assert words in done.stdout
        assert loaded == [], command

"""What tasks say besides logging: prints, stderr, warnings and structured
fields, each line tied to the task that wrote it."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import dask.config
import pytest
from distributed import Client

import dask_observe
from dask_observe.capture.output import Lines, OutputCapture

from .spoken import assert_spoke, said_by
from .tasks import (
    print_lines,
    print_then_fail,
    speak_below_python,
    speak_every_way,
    write_to_fd_beside,
)


@pytest.mark.parametrize("processes", [True, False], ids=["processes", "threads"])
def test_what_a_task_prints_and_warns_is_kept_with_its_key(
    store_path: Path, make_client: Callable[..., Client], processes: bool
) -> None:
    client = make_client(n_workers=2, threads_per_worker=1, processes=processes)
    tags = [uuid.uuid4().hex for _ in range(3)]
    with dask_observe.record("speaks", client=client) as run:
        keys = [f"speak-{i}" for i in range(3)]
        futures = [
            client.submit(speak_every_way, tag, key=key)
            for tag, key in zip(tags, keys, strict=True)
        ]
        assert client.gather(futures) == tags
        print(f"the notebook's own print {tags[0]}-client")
    for tag, key in zip(tags, keys, strict=True):
        assert_spoke(run, tag, key)
    assert len(run.logs(task=keys[1])) == 4
    # The structured fields are a filter too.
    (found,) = run.logs(fields={"partition": tags[2], "rows": 3})["task"]
    assert found == keys[2]
    assert run.logs(fields={"partition": tags[2], "rows": 4}).empty
    # And so is the tasks' prefix (each speak-i is a task of prefix "speak").
    assert set(run.logs(prefix="speak")["task"]) == set(keys)
    assert run.logs(prefix="nothing-of-that-name").empty
    # What tasks wrote is a source of its own: printed, written to stderr,
    # warned (as the panel's source menu and the server's filter ask).
    for source, said in [
        ("stdout", f"processing {tags[1]}"),
        ("stderr", f"retrying {tags[1]}"),
        ("warning", f"UserWarning: a deprecated call in {tags[1]}"),
    ]:
        (found,) = run.logs(source=source, contains=tags[1])["message"]
        assert said in found, (source, found)
    assert run.logs(source="worker", contains=tags[1]).shape[0] == 4
    # What the client's process printed outside any task is the notebook's.
    assert run.logs(contains=f"{tags[0]}-client").empty
    # Tasks' prints are not distributed's words: no rule reads them.
    assert all(f.kind != "task-errors" for f in run.flag_list())


def test_what_compiled_code_and_subprocesses_write_is_kept_once_with_its_task(
    store_path: Path, make_client: Callable[..., Client]
) -> None:
    """Writes to fds 1 and 2 (a C library, C's printf, a child process) are
    lines of the task that ran alone on its worker; Python's own prints are
    not read back through the pipes a second time."""
    client = make_client(n_workers=1, threads_per_worker=1, processes=True)
    tag, spoken = uuid.uuid4().hex, uuid.uuid4().hex
    with dask_observe.record("native", client=client) as run:
        assert client.submit(speak_below_python, tag, key="native").result() == tag
        client.submit(speak_every_way, spoken, key="speak").result()
    said = run.logs(contains=tag)
    lines = {
        (row["logger"], row["message"], row["task"], row["level"])
        for row in said.to_dict("records")
    }
    assert lines == {
        ("stdout", f"written from C {tag}", "native", "INFO"),
        ("stderr", f"C complains {tag}", "native", "WARNING"),
        ("stdout", f"printf says {tag}", "native", "INFO"),
        ("stdout", f"a child says {tag}", "native", "INFO"),
    }
    assert all(json.loads(f) in ({"fd": 1}, {"fd": 2}) for f in said["fields"])
    # Python's words, each once: from its tee, not again from the pipes.
    assert_spoke(run, spoken, "speak")
    assert len(run.logs(contains=f"processing {spoken}")) == 1
    assert len(run.logs(contains=f"retrying {spoken}")) == 1


#: A process whose fd reader is slow to wake as its task ends: each time it
#: waits for its pipes it wakes 0.3 s late (as on a host too busy to run
#: it), beyond the 0.05 s a task's end waits for it.
SLOW_READER = """
import json, os, select, sys, time
from dask_observe.capture import fdout

real_poll = select.poll

class Late:
    def __init__(self):
        self.poller = real_poll()
        self.register = self.poller.register
        self.unregister = self.poller.unregister

    def poll(self, timeout):
        time.sleep(0.3)
        return self.poller.poll(timeout)

said, running = [], []
fdout.select.poll = Late
capture = fdout.FdCapture(said.append, lambda: list(running))
capture.install({})
for task in ("K1", "K2", "K3"):
    running.append(task)
    os.write(1, f"a child of {task} says hello\\n".encode())
    capture.settle(task)  # it ends; the reader has not read its line yet
    running.clear()
time.sleep(1.0)
capture.uninstall()
print(json.dumps([[r[3], r[4]] for r in said]), file=sys.stderr)
"""


def test_a_line_a_task_left_unread_is_its_own_when_read_after_its_end() -> None:
    # In a loaded suite, a child process's line was handed on after its task
    # had ended (the reader ran later than the task's end waited for it)
    # and named no task. A task's end now waits for a read in hand, and
    # counts what the pipes still hold unread: the task's when read.
    done = subprocess.run(
        [sys.executable, "-c", SLOW_READER],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    lines = json.loads(done.stderr.strip().splitlines()[-1])
    tasks = ["K1", "K2", "K3"]
    assert lines == [[f"a child of {t} says hello", t] for t in tasks], lines


def test_a_write_to_fd_1_beside_another_task_names_no_task_and_says_so(
    store_path: Path, make_client: Callable[..., Client]
) -> None:
    """Which of two running tasks wrote to fd 1 cannot be told: the line is
    the worker's, and says how many ran."""
    client = make_client(n_workers=1, threads_per_worker=2, processes=True)
    tag = uuid.uuid4().hex
    with dask_observe.record("two at once", client=client) as run:
        client.gather(
            [
                client.submit(write_to_fd_beside, f"{tag}-{i}", pure=False)
                for i in (0, 1)
            ]
        )
    said = run.logs(contains=tag)
    assert len(said) == 2, said
    assert said["task"].isna().all()
    assert [json.loads(f) for f in said["fields"]] == [{"fd": 1, "running": 2}] * 2


def test_a_task_printing_a_flood_keeps_its_first_lines_and_says_how_many_went(
    store_path: Path, make_client: Callable[..., Client]
) -> None:
    from dask_observe.capture.output import TASK_LINES

    client = make_client(n_workers=1, threads_per_worker=1)
    n = TASK_LINES + 2_500
    with dask_observe.record("flood", client=client) as run:
        assert client.submit(print_lines, n, key="flood").result() == n
        assert client.submit(print_lines, 3, key="brief").result() == 3
    printed = run.logs(task="flood")
    rows = printed[printed["logger"] == "stdout"]["message"]
    assert list(rows) == [f"row {i}" for i in range(TASK_LINES)]
    (note,) = printed[printed["logger"] == "dask_observe.output"]["message"]
    assert note == (
        f"this task wrote {n:,} lines of output; the first {TASK_LINES:,} "
        "are kept, 2,500 were not"
    )
    assert run.dropped("log") == 2_500
    # Another task keeps its own, the line without a newline too, at its end.
    brief = run.logs(task="brief")
    assert list(brief["message"]) == ["row 0", "row 1", "row 2"]


def test_a_cluster_set_not_to_capture_output_keeps_only_log_records(
    store_path: Path, make_client: Callable[..., Client]
) -> None:
    client = make_client(n_workers=1, processes=False)
    tag = uuid.uuid4().hex
    with (
        dask.config.set({"observe.capture.output": False}),
        dask_observe.record("quiet", client=client) as run,
    ):
        client.submit(speak_every_way, tag, key="speak").result()
    assert set(said_by(run, tag)) == {"user.structured"}


def test_a_failed_tasks_report_shows_what_that_task_said(
    store_path: Path, make_client: Callable[..., Client]
) -> None:
    from dask_observe.report.model import collect

    client = make_client(n_workers=1, threads_per_worker=2, processes=False)
    tag = uuid.uuid4().hex
    with dask_observe.record("fails", client=client) as run:
        noise = client.submit(speak_every_way, "other", key="other")
        failing = client.submit(print_then_fail, tag, key="failing")
        with pytest.raises(ValueError):
            failing.result()
        noise.result()
    (failure,) = collect(run).failures
    assert [line[3] for line in failure.logs] == [f"about to fail: {tag}"]


def make_lines() -> tuple[Lines, list[tuple[object, ...]]]:
    """Lines as a worker's own process has them: every line kept."""
    got: list[tuple[object, ...]] = []
    lines = Lines(got.append, lambda task: True)
    lines.outside = True
    return lines, got


def test_lines_are_assembled_from_writes_and_a_progress_bar_keeps_its_last_state() -> (
    None
):
    lines, got = make_lines()
    lines.wrote("stdout", "a")
    lines.wrote("stdout", "b\nc")
    lines.wrote("stderr", "10%\r50%\r100%\n")
    assert [(r[2], r[3]) for r in got] == [("stdout", "ab"), ("stderr", "100%")]
    lines.flush(older_than=60)  # too young: stays partial
    assert len(got) == 2
    lines.flush()
    assert [r[3] for r in got][-1] == "c"
    lines.wrote("stdout", "x" * 100_000 + "\n")  # a line is bounded, in parts
    assert all(len(str(r[3])) <= 16_384 for r in got)
    assert "".join(str(r[3]) for r in got[3:]) == "x" * 100_000


def test_a_print_in_the_kernel_is_not_the_clusters_and_the_streams_come_back() -> None:
    got: list[tuple[object, ...]] = []
    capture = OutputCapture(Lines(got.append, lambda task: task is not None))
    before = sys.stdout, sys.stderr
    capture.install()
    try:
        print("the notebook's own line")
        logging.getLogger(__name__).debug("nothing")
    finally:
        capture.uninstall()
    assert (sys.stdout, sys.stderr) == before
    assert got == []


def test_warning_wrappers_put_on_and_off_in_any_order_make_no_loop() -> None:
    # A kernel with threaded workers: a run listens for large-graph warnings,
    # the workers' output capture wraps on top, the run ends (its wrapper is
    # not on top, so it stays), the next run listens. A wrapper that took
    # "the original" again at each run called itself for good.
    import warnings

    from dask_observe.recording import graphs

    shown: list[str] = []
    before = warnings.showwarning
    warnings.showwarning = lambda message, *args, **kw: shown.append(str(message))
    try:
        first = graphs.listen()
        capture = OutputCapture(Lines(lambda r: None, lambda task: False))
        capture.install()
        assert first.close() == []
        second = graphs.listen()
        warnings.warn_explicit(
            "Sending large graph of size 2.29 MiB.", UserWarning, "client.py", 1
        )
        heard = second.close()
        capture.uninstall()
    finally:
        warnings.showwarning = before
    assert [size for _, size, _ in heard] == ["2.29 MiB"]
    assert shown == ["Sending large graph of size 2.29 MiB."]  # shown once


def test_a_warning_is_caught_once_whoever_unwrapped_or_wrapped_between() -> None:
    """``catch_warnings`` puts back, as it leaves, what it found as it came:
    a capture installed inside one (a test runner's around each test, pandas'
    in another thread) lost its wrapper as the block left, and every later
    warning of a task with it. Each task's start wraps again; a run's
    large-graph listener wrapped between two wrappers of ours took a warning
    twice."""
    import warnings

    from dask_observe.recording import graphs

    lines, got = make_lines()
    capture = OutputCapture(lines)
    shown: list[str] = []
    before = warnings.showwarning
    warnings.showwarning = lambda message, *args, **kw: shown.append(str(message))

    def warned(text: str) -> list[object]:
        warnings.warn_explicit(text, UserWarning, "task.py", 7)
        return [r[3] for r in got if text in str(r[3])]

    try:
        with warnings.catch_warnings():
            capture.install()
        assert warned("after the block") == []  # unwrapped as it left
        capture.wrap_warnings()  # a task starts
        assert len(warned("a task's warning")) == 1
        listening = graphs.listen()  # wraps ours
        capture.wrap_warnings()  # ours on top again: two of ours in the chain
        assert len(warned("with a listener between")) == 1
        listening.close()
        capture.uninstall()
    finally:
        warnings.showwarning = before
    assert shown == ["after the block", "a task's warning", "with a listener between"]


def test_a_print_is_caught_once_whoever_replaced_the_stream_since() -> None:
    """A stream put in place of the tee after the capture was installed (a
    test runner's capture, a redirect entered before and left after) took
    every later print past it. Each task's start stands a tee in again; a
    stream wrapped between two tees of ours has its text taken once."""
    import io

    lines, got = make_lines()
    capture = OutputCapture(lines)
    real = sys.stdout
    sys.stdout = io.StringIO()
    try:
        capture.install()
        replaced = sys.stdout = io.StringIO()  # the tee put aside
        print("past the capture")
        capture.wrap_streams()  # a task starts
        print("a task's line")

        class Forwarding(io.StringIO):  # someone's stream writing on to ours
            def __init__(self, beneath: TextIO) -> None:
                super().__init__()
                self.beneath = beneath

            def write(self, text: str) -> int:
                return self.beneath.write(text)

        sys.stdout = Forwarding(sys.stdout)
        capture.wrap_streams()
        print("through two tees")
        capture.uninstall()
        lines.flush()
    finally:
        sys.stdout = real
    assert [r[3] for r in got] == ["a task's line", "through two tees"]
    assert replaced.getvalue().splitlines() == [
        "past the capture",
        "a task's line",
        "through two tees",
    ]

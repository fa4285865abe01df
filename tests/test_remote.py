"""Clusters with nothing of ours installed: ``dask scheduler`` / ``dask worker``
processes from an environment that has dask and distributed only.

The cluster cannot import this module: tasks are lambdas, which distributed
pickles by value (as it does a notebook's functions), and the functions they call
go with them (``register_pickle_by_value``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from importlib.metadata import version
from pathlib import Path
from typing import Any, NoReturn

import cloudpickle
import dask.config
import pandas as pd
import pytest
from distributed import Client, KilledWorker

import dask_observe
from dask_observe import Run
from dask_observe.recording.install import CaptureUnavailableWarning
from dask_observe.store import BaseStore
from dask_observe.units import format_seconds

from .conftest import (
    DASK_OBSERVE,
    READ_RUN,
    dask_observe_cli,
    exited,
    read_in_new_process,
    read_lines,
    stored_lines,
    subprocess_env,
    wait_until,
)
from .load import Pressure, kinds_not_the_hosts
from .remote import (
    OTHER_ENV,
    OTHER_RELEASE,
    TLSFiles,
    clock_ahead,
    cluster_env,
    process_cluster,
)
from .spoken import assert_spoke
from .tasks import (
    eat_memory,
    say,
    say_over,
    sleep_in_c,
    speak_below_python,
    speak_every_way,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(sys.modules[eat_memory.__module__])

#: The scheduler fails a task at the first worker death: no retries to wait for.
ONE_DEATH = {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}


def inc(x: int) -> int:
    return x + 1


def busy(seconds: float) -> float:
    """On the CPU for ``seconds`` of this thread's time: a profile to read."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    return seconds


def assert_memory_death_recorded(seen: dict[str, Any], line: str) -> None:
    """What a new process reads of a run in which ``say(line)`` ran, then
    ``eat_memory`` under the key "eater" killed its worker."""
    assert [said["source"] for said in seen["line"]] == ["worker"]
    tasks = {t["key"]: t["status"] for t in seen["tasks"]}
    assert {"say", "inc", "eater"} <= set(tasks)
    assert (tasks["say"], tasks["inc"], tasks["eater"]) == ("memory", "memory", "erred")
    restarts = [
        n for n in seen["nanny"] if "exceeded 95% memory budget" in n["message"]
    ]
    assert restarts, seen["nanny"]
    flags = {f["kind"]: f for f in seen["flags"]}
    killed = flags["killed-worker"]["message"]
    assert "'eater' failed with KilledWorker" in killed
    assert "died because its nanny restarted it" in killed
    assert "exceeding 95% of its memory limit (RSS " in killed


def run_the_workload(client: Client, line: str) -> tuple[str, int]:
    client.wait_for_workers(2, timeout=60)
    said = client.submit(lambda: say(line), key="say").result()
    two = client.submit(lambda: inc(1), key="inc").result()
    with pytest.raises(KilledWorker):
        client.submit(lambda: eat_memory("eating"), key="eater").result()
    return said, two


def test_a_cluster_without_dask_observe_is_recorded_from_a_notebook_client(
    tmp_path: Path, store_path: Path
) -> None:
    line = f"a remote worker speaks {uuid.uuid4().hex}"
    with (
        process_cluster(tmp_path / "cluster", env=ONE_DEATH) as cluster,
        Client(cluster.address, timeout="30s") as client,
    ):
        with dask_observe.record("remote", client=client) as run:
            returned = run_the_workload(client, line)
            client.submit(lambda: busy(0.8), key="busy").result()
        assert returned == (line, 2)  # the block ran and its results came back
        assert run.partial is None
        # The profile was read from workers that know nothing of us.
        profile = run.profile()
        ours = profile[(profile["prefix"] == "busy") & (profile["function"] == "busy")]
        assert len(ours) == 1 and ours["self_s"].iloc[0] >= 0.4
    # The cluster is gone; a new process reads what it said.
    seen = read_in_new_process(store_path, READ_RUN, line)
    assert_memory_death_recorded(seen, line)
    assert "dask_observe" not in cluster.log()  # nothing of ours was imported


def test_what_tasks_print_on_a_cluster_without_us_is_kept_and_still_printed(
    tmp_path: Path, store_path: Path
) -> None:
    # Prints, stderr and warnings went to the worker's own stdout and died
    # with it: now each is a line of the run, with its task, and still goes
    # where it went (the worker's log here, a pod's stdout elsewhere).
    tag, deep = uuid.uuid4().hex, uuid.uuid4().hex
    with (
        process_cluster(tmp_path / "cluster", workers=1) as cluster,
        Client(cluster.address, timeout="30s") as client,
    ):
        client.wait_for_workers(1, timeout=60)
        with dask_observe.record("speaks", client=client) as run:
            client.submit(lambda: speak_every_way(tag), key="speak").result()
            client.submit(lambda: speak_below_python(deep), key="native").result()
        assert_spoke(run, tag, "speak")
        # What compiled code and a child process wrote to fds 1 and 2 too.
        native = run.logs(task="native")
        assert set(native["message"]) == {
            f"written from C {deep}", f"C complains {deep}",
            f"printf says {deep}", f"a child says {deep}",
        }  # fmt: skip
        printed = cluster.log()
    for line in native["message"]:
        assert printed.count(line) == 1, line
    assert printed.count(f"processing {tag}") == 1
    assert f"retrying {tag}" in printed
    assert f"UserWarning: a deprecated call in {tag}" in printed
    # The log call no handler took, printed by logging's last resort as
    # without us, and once (not again as a line the task wrote to stderr).
    assert printed.count(f"loaded {tag}") == 1


#: How far two estimates of a worker's clock offset may disagree on a loaded
#: host (each is good to half the round trip of the heartbeat it came from).
CLOCKS_AGREE_S = 0.5


def test_a_worker_whose_clock_runs_ahead_has_its_lines_inside_its_tasks(
    tmp_path: Path, store_path: Path
) -> None:
    # A worker 7 s ahead (a VM after a suspend): distributed puts its tasks
    # on the scheduler's clock; its lines, samples and events were stored 7 s
    # ahead, after their own task and outside the run.
    tag = uuid.uuid4().hex
    with (
        process_cluster(tmp_path / "cluster", workers=0) as cluster,
        Client(cluster.address, timeout="30s") as client,
    ):
        cluster.add_workers(1, env=clock_ahead(7))
        client.wait_for_workers(1, timeout=60)
        ahead = next(iter(client.run(time.time).values())) - time.time()
        assert 6.5 < ahead < 7.5  # the worker's clock, as its tasks read it
        with Pressure() as pressure, dask_observe.record("ahead", client=client) as run:
            # 3 s: the worker tells a task once it has run 1 s, at a tick of
            # its loop, which the task's spinning thread may hold off for a
            # while on a loaded host (the suite missed a task of 1.6 s).
            client.submit(lambda: say_over(tag, 6, 0.5), key="say").result()
    (task,) = run.tasks().to_dict("records")
    said = run.logs(contains=tag)
    assert len(said) == 6
    # Inside the task, to within what two clocks measured from heartbeats can
    # agree on: the task's times are distributed's estimate, the lines ours,
    # each good to half a heartbeat's round trip (a line sat 0.14 s before
    # its task once, on the loaded suite; 7 s before the offset was applied).
    start = task["start"] - pd.Timedelta(seconds=CLOCKS_AGREE_S)
    stop = task["stop"] + pd.Timedelta(seconds=CLOCKS_AGREE_S)
    for at in said["time"]:
        assert start <= at <= stop, (at, task["start"], task["stop"])
    # Seen once in the suite: no task-running event at all, the lines inside
    # the task (so its clock was right). What the run holds, to tell why.
    events = run.events()
    kinds = events["kind"].value_counts().to_dict()
    running = events[events["kind"] == "task-running"]["time"].tolist()
    assert len(running) == 1, (kinds, task)
    assert start <= running[0] <= stop
    # The offset is kept with the run, and said: its own log files read 7 s off.
    ((worker, offset),) = run.environment()["clocks"].items()
    assert -7.5 < offset < -6.5 and worker == task["worker"]
    flags = run.flags()
    # Nothing else, but what a loaded host did and said of itself (the suite
    # ran it beside others: a worker's loop held 1 s, blamed on the host).
    told = flags[["kind", "message"]].to_dict("records")
    assert kinds_not_the_hosts(flags, pressure) == ["clock-offset"], told
    (said,) = flags[flags["kind"] == "clock-offset"]["message"]
    # The figure said is the one kept (7 s, give or take a heartbeat's error).
    assert f"{worker} {format_seconds(-offset)} ahead" in said, said


CLIENT_AHEAD = """
import json, logging, sys
import dask_observe
from distributed import Client

def say(tag, n):
    for i in range(n):
        logging.getLogger("user.task").warning("line %d of %s", i, tag)
    return n

with Client(sys.argv[1], timeout="30s") as client:
    with dask_observe.record("client ahead", client=client) as run:
        client.submit(say, sys.argv[2], 5, pure=False).result()
    (task,) = run.tasks(epoch=True).to_dict("records")
    print(json.dumps({
        "lines": len(run.logs(contains=sys.argv[2])),
        "run": [run.started, run.window_end()],
        "task": [task["start"], task["stop"]],
        "flags": run.flags()[["kind", "message"]].to_dict("records"),
        "offset": [e["seconds"] for e in run.events("clock-offset")["data"]],
    }))
"""


def test_a_client_whose_clock_runs_ahead_has_its_run_around_its_tasks(
    tmp_path: Path, store_path: Path
) -> None:
    # A notebook on a laptop 7 s ahead of its cluster (no NTP after a
    # suspend): its runs started and ended by its own clock, 7 s after the
    # lines and tasks they held by the scheduler's, and a run read none of
    # its lines. The truth: each line and the task are inside their run.
    tag = uuid.uuid4().hex
    with process_cluster(tmp_path / "cluster", workers=1) as cluster:
        done = subprocess.run(
            [sys.executable, "-c", CLIENT_AHEAD, cluster.address, tag],
            env={**subprocess_env(store_path), **clock_ahead(7)},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["lines"] == 5, seen
    (started, ended), (start, stop) = seen["run"], seen["task"]
    assert started <= start <= stop <= ended, seen
    # Measured to within a few ms: its round trips beside the scheduler.
    assert seen["offset"] == [pytest.approx(-7.0, abs=0.005)], seen
    # And said: what the notebook stamps by its own clock reads 7 s off.
    (said,) = [f["message"] for f in seen["flags"] if f["kind"] == "clock-offset"]
    figure = format_seconds(-seen["offset"][0])
    assert (
        f"the client that recorded the run was {figure} ahead of the scheduler's"
        in said
    )
    assert "Worker clocks" not in said, said


def test_a_clients_clock_offset_is_as_good_as_its_quickest_reading() -> None:
    # A client 7 s behind its scheduler. Its hello took 100 ms (plugins
    # installed), read by the scheduler near its end: by its midpoint, the
    # offset came 45 ms off, and a run ended before its last task. The truth:
    # 7 s, told to within half the quickest reading's 1 ms round trip.
    from dask_observe.capture.clock import clock_identity, offset_within

    def reading(asked: float, read_at: float, answered: float, offset: float) -> Any:
        theirs = {"clock": clock_identity(), "time": read_at + offset}
        return asked, theirs, answered

    hello = reading(100.0, 100.095, 100.1, 7.0)
    quick = [reading(t, t + 0.0007, t + 0.001, 7.0) for t in (100.2, 100.3)]
    assert abs(offset_within([hello]) - 7.0) > 0.04  # what the hello alone says
    assert offset_within([hello, *quick]) == pytest.approx(7.0, abs=0.0005)
    # One clock: its readings fall inside their round trips.
    assert offset_within([reading(100.0, 100.05, 100.1, 0.0)]) == 0.0
    # A clock stepped between readings: bounds that do not meet; the quickest.
    stepped = [hello, reading(100.2, 100.2005, 100.201, 9.0)]
    assert offset_within(stepped) == pytest.approx(9.0, abs=0.0005)


def test_a_process_records_stay_in_order_whatever_its_clock_estimates_say() -> None:
    # Each estimate of a worker's clock against the scheduler's holds
    # milliseconds of jitter (5-10 ms for a worker beside its scheduler on a
    # loaded host). Moved by each, a task's flood of lines printed microseconds
    # apart came out interleaved where two batches met. The truth: lines made
    # in order; estimates jittering near 0, then a real 7 s offset jittering.
    from dask_observe.capture.shipper import LogShipper
    from dask_observe.recording.plugins import capture_settings

    estimates = iter([0.0, 0.008, 0.006, -0.007, 7.004, 6.996, 7.003, 7.001])
    shipped: list[float] = []

    async def push(**batch: Any) -> None:
        shipped.extend(record[0] for record in batch["records"])

    async def main() -> None:
        shipper = LogShipper("worker", capture_settings(since=time.time()))
        shipper.start(push, lambda: "tcp://w:1", clock=lambda: next(estimates))
        try:
            made = time.time()
            for batch in range(8):
                for i in range(100):  # 1 us apart, as a flood's lines
                    shipper.buffer.append((made + batch * 1e-4 + i * 1e-6, "line"))
                await shipper.flush()
        finally:
            await shipper.stop()

    asyncio.run(main())
    assert len(shipped) == 800
    near, ahead = shipped[:400], shipped[400:]
    assert near == sorted(near) and ahead == sorted(ahead)  # in the order made
    assert ahead[0] - near[-1] == pytest.approx(7.004, abs=1e-3)  # taken at once


def test_a_cluster_without_py_spy_says_once_why_no_native_frames(
    tmp_path: Path, store_path: Path
) -> None:
    # The cluster's environment has no py-spy: a task stuck in C keeps its
    # Python stack, and one line says why there is nothing beneath it; a
    # native profile asked of it is none, and its run says why.
    with (
        dask.config.set({"observe.flags.hung-task.after": "1s"}),
        process_cluster(tmp_path / "cluster", workers=1) as cluster,
        Client(cluster.address, timeout="30s") as client,
    ):
        client.wait_for_workers(1, timeout=60)
        # The scheduler asked now: the client's copy of its identity lagged.
        (worker,) = client.nthreads()
        with dask_observe.record("in C", client=client) as run:
            client.submit(lambda: sleep_in_c(3), key="in-c").result()
        with dask_observe.record("native", client=client, native=True) as native:
            client.submit(lambda: 1 + 1).result()
    missing = (
        "py-spy is not installed on this worker "
        "(pip install 'dask-observe[native]', or py-spy)"
    )
    (said,) = set(run.stacks()["native"])
    assert said == f"native stacks unavailable: {missing}"
    assert len(run.events("task-native")) == 1  # once for the worker
    found = native.native_profile()
    assert found is not None and found["unavailable"] == {missing: [worker]}
    assert native.native().empty  # nothing sampled, no row of zeros
    html = native.report().html
    assert "Native profile unavailable on 1 worker: py-spy is not installed" in html


def test_a_cluster_quieted_to_warning_prints_no_more_while_recorded(
    tmp_path: Path, store_path: Path
) -> None:
    # A cluster whose dask config quiets distributed to WARNING: capture lowers
    # the logger to INFO to record those lines, and once had every one of them
    # printed to the processes' stderr too (a log file, a log aggregator's bill,
    # a pipe that nobody reads). Recorded, yes; printed, only as before.
    line = f"an info line {uuid.uuid4().hex}"
    quiet = {"DASK_LOGGING__DISTRIBUTED": "warning"}
    with (
        process_cluster(tmp_path / "cluster", workers=1, env=quiet) as cluster,
        Client(cluster.address, timeout="30s") as client,
    ):
        client.wait_for_workers(1, timeout=60)  # client.run: on those there
        with dask_observe.record("quiet", client=client) as run:
            client.run(lambda: logging.getLogger("distributed.worker").info(line))
            client.run(lambda: logging.getLogger("distributed.worker").warning(line))
        assert len(run.logs(contains=line)) == 2
        assert cluster.log().count(line) == 1  # the warning, as without us


def test_a_cluster_without_dask_observe_is_recorded_headless(
    tmp_path: Path, store_path: Path
) -> None:
    line = f"recorded headless {uuid.uuid4().hex}"
    with process_cluster(tmp_path / "cluster", env=ONE_DEATH) as cluster:
        recorder = subprocess.Popen(
            [DASK_OBSERVE, "record", "--scheduler", cluster.address, "--name", "h"],
            env=subprocess_env(store_path),
            stdout=subprocess.PIPE,
            text=True,
        )
        assert recorder.stdout is not None
        assert recorder.stdout.readline().startswith("Recording run 1 'h'")
        with Client(cluster.address, timeout="30s") as client:
            assert run_the_workload(client, line) == (line, 2)
        # The nanny's last words travel on its next flush.
        wait_until(
            lambda: stored_lines(store_path, 1, "exceeded 95% memory budget"),
            "the nanny's restart line in the store",
        )
        recorder.send_signal(signal.SIGINT)
        out, err = exited(recorder, timeout=60)
        assert recorder.returncode == 0, out + err
    seen = read_in_new_process(store_path, READ_RUN, line)
    assert_memory_death_recorded(seen, line)


#: A scheduler preload as an administrator might lock a shared cluster down:
#: it takes no plugins from clients.
LOCKDOWN = """
def dask_setup(scheduler):
    for op in ("register_scheduler_plugin", "register_worker_plugin",
               "register_nanny_plugin"):
        scheduler.handlers.pop(op, None)
"""


def distributed_says(line: str) -> str:
    # A worker keeps distributed's own recent lines: that much survives
    # without plugins. Not what a task prints or logs with its own logger
    # (the warning says so).
    logging.getLogger("distributed.worker").warning(line)
    print(f"{line} printed", flush=True)
    logging.getLogger("etl").warning(f"{line} from its own logger")
    return line


def test_a_cluster_that_refuses_plugins_still_runs_the_block_and_records_a_partial_run(
    tmp_path: Path, store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lockdown = tmp_path / "lockdown.py"
    lockdown.write_text(LOCKDOWN)
    line = f"said without plugins {uuid.uuid4().hex}"
    with (
        process_cluster(
            tmp_path / "cluster", scheduler_args=["--preload", str(lockdown)]
        ) as cluster,
        Client(cluster.address, timeout="30s") as client,
    ):
        client.wait_for_workers(2, timeout=60)
        with (
            pytest.warns(CaptureUnavailableWarning) as warned,
            dask_observe.record("locked", client=client) as run,
        ):
            results = client.gather(
                [
                    client.submit(lambda: distributed_says(line), key="said"),
                    *(
                        client.submit(lambda i=i: inc(i), key=f"inc-{i}")
                        for i in range(4)
                    ),
                ]
            )
        assert results == [line, 1, 2, 3, 4]
        thawed = record_a_partial_run_whose_scheduler_froze_as_it_began(
            client, cluster, caplog
        )
        frozen = record_a_partial_run_whose_scheduler_froze(client, cluster, caplog)
    # Only ours: pytest.warns also records what other threads show.
    ours = [w for w in warned if w.category is CaptureUnavailableWarning]
    assert len(ours) == 1, [f"{w.category.__name__}: {w.message}" for w in warned]
    # It says what is missing and why, naming the plugin that was refused.
    assert re.search(
        r"records this cluster partially: the cluster did not take dask-observe's "
        r"capture plugins \(the (scheduler|worker|nanny) plugin was refused",
        str(ours[0].message),
    ), ours[0].message
    assert "lost: what tasks print and log, " in str(ours[0].message)
    assert run.status == "finished"
    assert run.partial is not None and "did not take" in run.partial
    assert run.summary()["partial"] == run.partial
    assert set(run.tasks()["key"]) == {"said", *(f"inc-{i}" for i in range(4))}
    assert run.summary()["n_tasks"] == 5
    logs = run.logs(contains=line)
    # distributed's line alone: the task's print and own logger's are lost.
    assert list(logs["message"]) == [line], logs
    report = run.report()
    assert "Recorded partially:" in report.inline_html
    assert "(recorded partially)" in repr(report)
    # The run whose scheduler froze as it began: its tasks once it answered.
    assert thawed.status == "finished"
    assert "the scheduler did not answer" in (thawed.partial or "")
    assert list(thawed.tasks()["key"]) == ["after-the-thaw"]
    # The run whose scheduler froze as its block ended: failed, as a whole
    # recording's is, saying which read went unanswered.
    assert frozen.status == "failed"
    (lost,) = frozen.events(kind="scheduler-lost")["data"]
    assert lost["reason"] == (
        "the scheduler stopped answering: no answer in 1 s to a read of the task stream"
    )


def record_a_partial_run_whose_scheduler_froze_as_it_began(
    client: Client, cluster: Any, caplog: pytest.LogCaptureFixture
) -> Run:
    """A run's start asks the scheduler three things (its capture, its
    dashboard, its task stream). A frozen one held the block for good,
    without a word: the dashboard was asked with no bound. It is asked once,
    within ``answer-timeout``; the warning says it did not answer, and the
    run's end reads what it holds once it answers again."""
    import dask.config

    scheduler = cluster.processes[0].pid
    bound = 2.0
    caplog.clear()
    try:
        with (
            dask.config.set({"observe.recorder.answer-timeout": f"{bound}s"}),
            caplog.at_level(logging.WARNING, logger="dask_observe"),
            pytest.warns(CaptureUnavailableWarning) as warned,
        ):
            os.killpg(scheduler, signal.SIGSTOP)
            began = time.monotonic()
            with dask_observe.record("thawed", client=client) as run:
                waited = time.monotonic() - began
                os.killpg(scheduler, signal.SIGCONT)
                assert client.submit(lambda: inc(7), key="after-the-thaw").result() == 8
    finally:
        os.killpg(scheduler, signal.SIGCONT)
    assert bound <= waited < 2 * bound, waited
    (said,) = [w for w in warned if w.category is CaptureUnavailableWarning]
    assert str(said.message).startswith(
        f"dask-observe records this cluster partially: the scheduler did not answer"
        f" in {bound:g} s, so dask-observe's capture plugins could not be set up."
    ), said.message
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("dask_obs")]
    assert not logged, logged
    return run


def record_a_partial_run_whose_scheduler_froze(
    client: Client, cluster: Any, caplog: pytest.LogCaptureFixture
) -> Run:
    """A partial run's end reads what the scheduler holds, five reads: a
    scheduler that froze held the block's end for each in turn, five times
    ``answer-timeout`` in silence, and the run was said to have finished.
    The first unanswered read is the last asked."""
    import dask.config

    scheduler = cluster.processes[0].pid
    try:
        with (
            dask.config.set({"observe.recorder.answer-timeout": "1s"}),
            caplog.at_level(logging.WARNING, logger="dask_observe"),
            pytest.warns(CaptureUnavailableWarning),
            dask_observe.record("frozen", client=client) as run,
        ):
            assert client.submit(lambda: inc(5), key="before-the-freeze").result() == 6
            os.killpg(scheduler, signal.SIGSTOP)
    finally:
        os.killpg(scheduler, signal.SIGCONT)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("dask_obs")]
    assert not [m for m in said if "cannot read" in m], said  # one read, no more
    assert any("the run's scheduler is gone" in m for m in said), said
    return run


def test_a_tls_cluster_is_recorded_from_a_client_and_headless(
    tmp_path: Path, store_path: Path
) -> None:
    from distributed.security import Security

    tls = TLSFiles.make(tmp_path / "tls")
    security = Security(
        tls_ca_file=str(tls.ca),
        tls_client_cert=str(tls.cert),
        tls_client_key=str(tls.key),
        require_encryption=True,
    )
    line = f"over tls {uuid.uuid4().hex}"
    with process_cluster(tmp_path / "cluster", tls=tls) as cluster:
        assert cluster.address.startswith("tls://")
        recorder = subprocess.Popen(
            [
                DASK_OBSERVE,
                "record",
                "--scheduler",
                cluster.address,
                "--name",
                "tls-headless",
                "--tls-ca-file",
                str(tls.ca),
                "--tls-cert",
                str(tls.cert),
                "--tls-key",
                str(tls.key),
            ],
            env=subprocess_env(store_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert recorder.stdout is not None
        first = recorder.stdout.readline()
        assert first.startswith("Recording run 1"), first
        with Client(cluster.address, security=security, timeout="30s") as client:
            client.wait_for_workers(2, timeout=60)
            with dask_observe.record("tls-client", client=client) as run:
                assert client.submit(lambda: say(line), key="said").result() == line
            assert list(run.logs(contains=line)["source"]) == ["worker"]
            assert list(run.tasks()["key"]) == ["said"]
        wait_until(
            lambda: stored_lines(store_path, 1, line), "the line in the headless run"
        )
        recorder.send_signal(signal.SIGINT)
        _, err = exited(recorder, timeout=60)
        assert recorder.returncode == 0, err
    with dask_observe.open_store(store_path) as store:
        headless = store.run(1)
        assert headless.name == "tls-headless"
        assert "said" in set(headless.tasks()["key"])
        assert len(headless.logs(contains=line)) == 1


def test_a_worker_added_mid_run_has_its_first_lines_in_the_run(
    tmp_path: Path, store_path: Path
) -> None:
    with (
        process_cluster(tmp_path / "cluster", workers=1) as cluster,
        Client(cluster.address, timeout="30s") as client,
    ):
        client.wait_for_workers(1, timeout=60)
        # The scheduler asked, not the client's copy of its identity: a
        # periodic refresh asked before the new worker came can land after
        # wait_for_workers' own, and the copy then lacked it (seen once).
        (first,) = client.nthreads()
        with dask_observe.record("scaling", client=client) as run:
            cluster.add_workers(1)  # as adaptive scaling would
            client.wait_for_workers(2, timeout=60)
            (added,) = set(client.nthreads()) - {first}
            line = f"from the new worker {uuid.uuid4().hex}"
            said = client.submit(lambda: say(line), workers=[added], key="said")
            assert said.result() == line
    logs = run.logs()
    mine = logs[logs["worker"] == added]
    # Its first line was logged before its plugin was set up: handed over then.
    assert mine["message"].str.contains("Start worker at").any()
    assert mine["message"].str.contains(line, regex=False).any()
    assert "worker-added" in set(run.events()["kind"])


def test_a_scheduler_that_dies_mid_run_fails_the_run_and_keeps_its_last_lines(
    tmp_path: Path, store_path: Path
) -> None:
    import dask.config

    line = f"before the end {uuid.uuid4().hex}"
    with (
        process_cluster(tmp_path / "cluster") as cluster,
        Client(cluster.address, timeout="5s") as client,
    ):
        client.wait_for_workers(2, timeout=60)
        started = time.monotonic()
        # The workers would ship the task's line only in 30 s: it is kept
        # because the closing scheduler asks them for it (shipped every
        # 100 ms, such a line was missing once, under load).
        with (
            dask.config.set({"observe.capture.flush-interval": "30s"}),
            dask_observe.record("doomed", client=client) as run,
        ):
            assert client.submit(lambda: say(line), key="said").result() == line
            scheduler = cluster.processes[0]
            os.killpg(scheduler.pid, signal.SIGTERM)  # as a cluster manager would
            scheduler.wait(timeout=30)
        ended_in = time.monotonic() - started
    assert run.status == "failed"
    assert ended_in < 20  # not a connect timeout per call
    assert list(run.tasks()["key"]) == ["said"]
    assert len(run.logs(contains=line)) == 1
    scheduler_lines = run.logs(source="scheduler")["message"]
    assert scheduler_lines.str.contains("Closing scheduler").any()
    assert "scheduler-lost" in set(run.events()["kind"])


def test_a_worker_from_another_release_is_shown_as_a_version_mismatch(
    tmp_path: Path, store_path: Path
) -> None:
    """An image rebuilt with another pin: one worker runs another release of
    dask and distributed than the client, the scheduler and the other worker."""
    other = OTHER_RELEASE["distributed"]
    assert other != version("distributed")
    with (
        process_cluster(tmp_path / "cluster", workers=1) as cluster,
        Client(cluster.address, timeout="30s") as client,
    ):
        client.wait_for_workers(1, timeout=60)
        # Asked of the scheduler now, not the client's copy of its identity:
        # that copy, refreshed every few seconds, came back without the
        # worker just waited for (an older refresh answered last).
        (same,) = client.nthreads()
        cluster.add_workers(1, bin_dir=cluster_env(OTHER_ENV, OTHER_RELEASE))
        client.wait_for_workers(2, timeout=60)
        (odd,) = set(client.nthreads()) - {same}
        with dask_observe.record("mixed image", client=client) as run:
            client.gather(client.map(lambda x: x + 1, range(10)))
    packages = run.environment()["packages"]
    assert packages[odd]["distributed"] == other
    assert packages[same]["distributed"] == version("distributed")
    assert packages["client"]["dask"] == version("dask")
    flags = run.flags()
    assert list(flags["kind"]) == ["version-mismatch"]
    message = str(flags["message"][0])
    assert f"{odd} {other}" in message
    assert f"client {version('distributed')}" in message
    # The CLI's flags say the same.
    shown = dask_observe_cli(store_path, "flags", str(run.id))
    assert shown.returncode == 0, shown.stderr
    assert "version-mismatch" in shown.stdout and other in shown.stdout


def recording_headless(
    address: str, env: dict[str, str], line: str, *options: str
) -> subprocess.Popen[str]:
    """``dask-observe record`` on the cluster at ``address`` (run 1, named
    h), once a task's ``line`` is in its store."""
    recorder = subprocess.Popen(
        [DASK_OBSERVE, "record", "--scheduler", address, *options, "--name", "h"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert recorder.stdout is not None
    first = recorder.stdout.readline()
    if not first.startswith("Recording run 1 'h'"):
        _failed(recorder, f"the recorder began {first!r}")
    with Client(address, timeout="30s") as client:
        assert client.submit(lambda: say(line), key="said").result() == line
    store_path = Path(env["DASK_OBSERVE__STORE"])
    try:
        wait_until(lambda: _stored(store_path, line), "the line and its task stored")
    except AssertionError as e:
        _failed(recorder, str(e))
    return recorder


def _stored(store_path: Path, line: str) -> bool:
    """Whether run 1 holds the task's line and the task's row. They come by
    different paths (the worker's lines, the scheduler's transitions): a
    scheduler killed once the line alone was stored took the row with it."""
    if not stored_lines(store_path, 1, line):
        return False
    with dask_observe.open_store(store_path) as store:
        return "said" in set(store.run(1).tasks()["key"])


def _failed(recorder: subprocess.Popen[str], what: str) -> NoReturn:
    """Fail with the recorder's word on why (a capture not set up within
    ``answer-timeout`` records the cluster partially, and says so; a
    connection not made ends it), not the wait's alone."""
    recorder.kill()
    _, err = recorder.communicate()
    raise AssertionError(f"{what}; the recorder said:\n{err}")


@pytest.mark.parametrize("way_out", ["a second Ctrl-C", "the answer timeout"])
def test_a_recording_whose_scheduler_froze_ends(
    tmp_path: Path, store_path: Path, way_out: str
) -> None:
    """A run's end asks the scheduler to flush every worker; a scheduler that
    froze (its connection still open) never answers, and the command waited
    for ever. It says it is ending; a second Ctrl-C leaves at once, and
    without one the scheduler's silence past ``answer-timeout`` ends the run
    failed. Either way what was stored is kept."""
    line = f"before the freeze {uuid.uuid4().hex}"
    env = subprocess_env(store_path)
    if way_out == "the answer timeout":
        # Short, but long enough to set the capture up at the run's start:
        # with 2 s, a loaded CI host did not, and the run was recorded
        # partially, without the task's line (the same failure here with
        # 0.01 s).
        env["DASK_OBSERVE__RECORDER__ANSWER_TIMEOUT"] = "8s"
    with process_cluster(tmp_path / "cluster", workers=1) as cluster:
        recorder = recording_headless(cluster.address, env, line)
        assert recorder.stdout is not None
        scheduler = cluster.processes[0].pid
        os.killpg(scheduler, signal.SIGSTOP)
        try:
            recorder.send_signal(signal.SIGINT)
            said = read_lines(recorder, 3, timeout=60)[-1]
            assert said.startswith("Ending the run (Ctrl-C again"), said
            if way_out == "a second Ctrl-C":
                recorder.send_signal(signal.SIGINT)
            out, err = exited(recorder, timeout=60)
        finally:
            os.killpg(scheduler, signal.SIGCONT)
    with dask_observe.open_store(store_path) as store:  # a writer: see below
        run = store.run(1)
        assert len(run.logs(contains=line)) == 1
        events = set(run.events()["kind"])
    if way_out == "a second Ctrl-C":
        assert recorder.returncode == 130, err
        assert "left at once; run 1 is kept as it stood" in err
        assert run.status == "interrupted"  # its process gone, a writer says so
    else:
        assert recorder.returncode == 1, err
        assert out.splitlines()[-1].startswith("Recorded run 1: 1 task, failed"), out
        assert run.status == "failed" and "scheduler-lost" in events


def test_a_cells_live_display_and_the_panel_say_when_its_scheduler_stops_answering(
    tmp_path: Path, store_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A cell waiting on a frozen scheduler waited in silence: the progress
    line (a terminal's; the widget's header shows the same words) now says
    the scheduler has not answered, and stops saying so once it answers. The
    store says so too, for the panel's card of the cluster (which showed it
    live, then gone): still watched, silent since its last answer. Both say
    it once a question has waited ``silent-after``, while it waits on for its
    answer (``answer-timeout``, set here beyond the test's waits); the
    cluster is kept live meanwhile, not left to look gone."""
    import dask.config

    from dask_observe.notebook.polling import LiveProgress
    from dask_observe.notebook.progress import TextView, header_html
    from dask_observe.recording.lifecycle import Recording

    view = TextView("frozen")
    view.EVERY_S = 0.0  # every change, not one line every 2 s
    silence = re.compile(r"the scheduler has not answered for \d")
    with (
        process_cluster(tmp_path / "cluster", workers=1) as cluster,
        Client(cluster.address, timeout="30s") as client,
        dask_observe.open_store(store_path) as store,
        dask.config.set({
            "observe.recorder.silent-after": "1s",
            "observe.recorder.answer-timeout": "60s",
        }),
    ):  # fmt: skip
        recording = Recording("frozen", client, store)
        recording.start()
        assert store.run_record(1)["partial"] is None  # its records pulled
        live = LiveProgress(recording, view).start()
        try:
            assert client.submit(abs, -2, key="before").result() == 2
            scheduler = cluster.processes[0].pid
            frozen_at = time.time()
            os.killpg(scheduler, signal.SIGSTOP)
            stopped_at = time.time()
            try:
                wait_until(
                    lambda: silence.search(capfd.readouterr().err),
                    "the progress line to say the scheduler is silent",
                )
                # The widget's header, as a notebook shows it, says it too.
                assert silence.search(header_html(live.snapshot, "frozen"))
                wait_until(
                    lambda: cluster_row(store, cluster.address)["silent_since"],
                    "the store to say the cluster's scheduler is silent",
                )
                # Silent since its last answer, not since the silence was
                # noticed (at the earliest silent-after, 1 s, after the stop):
                # an answer sent just before the stop may be read just after it.
                since = cluster_row(store, cluster.address)["silent_since"]
                assert frozen_at - 30 < since < stopped_at + 1
                seen = cluster_row(store, cluster.address)["last_seen"]
                wait_until(
                    lambda: cluster_row(store, cluster.address)["last_seen"] > seen,
                    "the cluster marked live while its scheduler is silent",
                )
            finally:
                os.killpg(scheduler, signal.SIGCONT)
            assert client.submit(abs, -3, key="after").result() == 3
            wait_until(
                lambda: (
                    (last := capfd.readouterr().err.strip().splitlines())
                    and "2/2 tasks" in last[-1]
                    and not silence.search(last[-1])
                ),
                "a progress line without it once the scheduler answers",
            )
            wait_until(
                lambda: cluster_row(store, cluster.address)["silent_since"] is None,
                "the store to say the cluster's scheduler answers again",
            )
        finally:
            live.stop()
        run = recording.stop("finished")
        # Resumed before the run ended: not lost, and nothing missing.
        assert run.summary()["n_tasks"] == 2 and run.status == "finished"


def cluster_row(store: BaseStore, address: str) -> dict[str, Any]:
    """The live cluster at ``address`` as the store says for the panel
    (``/api/clusters``): ``silent_since``, when its scheduler last answered
    once it stopped, and ``last_seen``, when a recorder last marked it live."""
    (found,) = [c for c in store.telemetry.clusters() if c["address"] == address]
    assert found["alive"], found  # watched all along: not taken for gone
    return found


@pytest.mark.parametrize("end", ["shut down", "killed"])
def test_a_headless_recording_ends_with_its_cluster(
    tmp_path: Path, store_path: Path, end: str
) -> None:
    """A nightly job records its cluster headless and shuts the cluster down
    at its end: the recorder used to wait for a Ctrl-C nobody would send,
    and a Ctrl-C then ended the run ``failed``."""
    line = f"before the end {uuid.uuid4().hex}"
    with process_cluster(tmp_path / "cluster", workers=1) as cluster:
        # --timeout: how long the client tries to connect, and to reconnect
        # to a killed scheduler before it gives up. Its default, 5 s: with 2 s
        # a recorder on a loaded host once ended before its first line (a
        # connection not made in time, likely; its stderr was not kept then,
        # recording_headless now says it).
        env = subprocess_env(store_path)
        recorder = recording_headless(cluster.address, env, line, "--timeout", "5s")
        if end == "shut down":
            cluster.stop()  # as a cluster manager does: SIGTERM, workers first
        else:
            os.killpg(cluster.processes[0].pid, signal.SIGKILL)
        out, err = exited(recorder, timeout=60)  # it outlived its cluster
    with dask_observe.open_store(store_path) as store:
        run = store.run(1)
        events = set(run.events()["kind"])
        assert "said" in set(run.tasks()["key"])
        assert len(run.logs(contains=line)) == 1
    if end == "shut down":
        assert recorder.returncode == 0, err
        assert f"The scheduler at {cluster.address} closed." in out
        assert "Recorded run 1: 1 task, finished" in out
        assert run.status == "finished"
        assert "Traceback" not in err
    else:
        assert recorder.returncode == 1, err
        assert f"The scheduler at {cluster.address} stopped answering." in out
        assert run.status == "failed"
        assert "scheduler-lost" in events

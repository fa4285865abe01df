"""Every rule, judged on telemetry written to measure through a real store: each
threshold from both sides, the false alarms that real workloads raised, and
the same verdict whoever reads the run. (Each family is also provoked for real
on a cluster: test_flags.py, and test_capture.py for dying workers.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask.config
import pytest
from distributed import Client

import dask_observe
from dask_observe import Run, Store
from dask_observe.analysis.figures import peak_memory, phase_totals, task_table
from dask_observe.diagnose import FLAG_KINDS
from dask_observe.diagnose.base import RULES
from dask_observe.diagnose.host import HOST_ADVICE
from dask_observe.report.model import collect

from .synthetic import A, B, SyntheticRun, busy_host, workers

MiB = 2**20


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "observe.sqlite") as store:
        yield store


@pytest.fixture
def run(store: Store) -> SyntheticRun:
    return workers(SyntheticRun(store), 0.0)


def flags(run: Run) -> list[tuple[str, str]]:
    """(kind, severity) of each flag the run raises."""
    frame = run.flags()
    return list(zip(frame["kind"], frame["severity"], strict=True))


def message(run: Run, kind: str) -> str:
    frame = run.flags()
    return str(frame[frame["kind"] == kind]["message"].iloc[0])


def the_flag(run: Run, kind: str) -> dict[Any, Any]:
    """The one flag of ``kind`` in ``run``, as a record."""
    frame = run.flags()
    (flag,) = frame[frame["kind"] == kind].to_dict("records")
    return flag


def settings(**memory: float) -> dict[str, Any]:
    return {"memory": memory, "flags": {}, "source": "workers"}


def test_the_kinds_are_the_registry_s_one_rule_each() -> None:
    design = {
        "memory-pressure", "memory-restart", "killed-worker", "worker-lost",
        "spilling", "event-loop-blocked", "gil-contention", "tiny-tasks",
        "task-errors", "load-imbalance", "high-transfer", "hung-task",
        "no-progress",
    }  # fmt: skip
    assert design <= set(FLAG_KINDS) == {r.kind for r in RULES}
    assert len(FLAG_KINDS) == len(RULES)
    families = {"memory", "workers", "runtime", "work", "hangs"}
    assert {r.family for r in RULES} == families


@pytest.mark.parametrize(
    ("clocks", "expected"),
    [
        ({}, []),  # every clock within 5 ms: nothing kept, nothing said
        ({A: 0.4, B: -0.02}, []),  # moved, but under a second
        ({A: -7.012, B: 1.5}, ["clock-offset"]),
    ],
)
def test_a_worker_clock_off_the_schedulers_is_named(
    run: SyntheticRun, clocks: dict[str, float], expected: list[str]
) -> None:
    """A worker's clock 7 s ahead (a VM after a suspend): its lines were
    moved onto the scheduler's clock, but its own log files read 7 s off.
    (Each worker says its offset with its last lines, from 5 ms off.)"""
    run.tasks(20, 0.05)
    for worker, seconds in clocks.items():
        run.event(0.5, "clock-offset", worker, seconds=seconds / 2)  # an earlier word
        run.event(1.9, "clock-offset", worker, seconds=seconds)
    recorded = run.end(2.0)
    assert [kind for kind, _ in flags(recorded)] == expected
    if expected:
        said = message(recorded, "clock-offset")
        assert f"{A} 7.01 s ahead; {B} 1.50 s behind" in said
        assert recorded.flags().iloc[0]["severity"] == "info"


@pytest.mark.parametrize(("seconds", "said"), [(-7.0, "7.00 s ahead of"), (0.3, None)])
def test_the_recording_clients_clock_off_the_schedulers_is_named(
    run: SyntheticRun, seconds: float, said: str | None
) -> None:
    """A notebook on a laptop 7 s ahead of its cluster: the run's start and
    end were put on the scheduler's clock (the client said so, with no
    worker), but what the notebook prints by its own clock reads 7 s off."""
    run.tasks(20, 0.05)
    run.event(1.9, "clock-offset", None, seconds=seconds, of="client")
    recorded = run.end(2.0)
    if said is None:
        assert flags(recorded) == []
        return
    assert [kind for kind, _ in flags(recorded)] == ["clock-offset"]
    text = message(recorded, "clock-offset")
    assert f"the client that recorded the run was {said} the scheduler's" in text
    assert "Worker clocks" not in text


def test_a_quiet_run_raises_nothing(run: SyntheticRun) -> None:
    assert flags(run.tasks(20, 0.05).end(2.0)) == []


# -- memory ------------------------------------------------------------------------


def test_a_pause_raises_memory_pressure_at_the_run_s_own_pause_threshold(
    run: SyntheticRun,
) -> None:
    run.event(1.0, A, action="worker-status-change", status="paused")
    # The event's kind is the worker's topic, as distributed logs it.
    recorded = run.end(3.0, settings(pause=0.85))
    assert flags(recorded) == [("memory-pressure", "warning")]
    assert "passed 85% of its limit" in message(recorded, "memory-pressure")


def test_a_nanny_restart_raises_memory_restart(run: SyntheticRun) -> None:
    run.event(1.0, "worker-restart-memory", A, worker=A, rss=960.0, pid=12)
    recorded = run.end(3.0, settings(terminate=0.95))
    assert flags(recorded) == [("memory-restart", "error")]
    assert "exceeding 95% of its memory limit" in message(recorded, "memory-restart")


def test_a_worker_that_died_before_its_first_sample_has_its_limit_in_the_flag(
    run: SyntheticRun,
) -> None:
    # It joined and died within a second, between the scheduler's samples: its
    # limit is the one it joined with.
    late = "tcp://10.0.0.9:40001"
    run.event(0.5, "worker-added", late, nthreads=1, memory_limit=1000.0)
    run.event(0.9, "worker-restart-memory", late, worker=late, rss=960.0, pid=13)
    recorded = run.end(3.0, settings(terminate=0.95))
    said = message(recorded, "memory-restart")
    assert "exceeding 95% of its memory limit (RSS 960 B of a 1000 B limit)" in said


def test_p2p_shards_on_disk_are_not_spilling(store: Store, run: SyntheticRun) -> None:
    # A P2P merge: 973 MiB of shards written by the shuffle, nothing spilled.
    run.tasks(10, 0.1, "merge")
    run.meter("p2p", "background-disk", "disk-write", "bytes", 973 * MiB)
    run.meter("p2p", "background-disk", "disk-write", "seconds", 4.0)
    run.meter("p2p", "foreground", "disk-read", "bytes", 973 * MiB)
    recorded = run.end(5.0)
    assert flags(recorded) == []
    # The report shows it apart, as the shuffle's.
    assert collect(recorded).shuffle_written == 973 * MiB


@pytest.mark.parametrize(
    ("written", "seconds", "severity"),
    [
        (119, 0.001, "info"),  # true, and noise
        (int(2.8 * 1024), 0.002, "info"),
        (99 * MiB, 0.9, "info"),
        (100 * MiB, 0.5, "warning"),  # spilling.warning-bytes
        (10 * MiB, 1.0, "warning"),  # spilling.warning-time
    ],
)
def test_spilling_is_a_warning_only_from_an_amount_that_costs(
    run: SyntheticRun, written: int, seconds: float, severity: str
) -> None:
    run.tasks(10, 0.1)
    run.meter("execute", "work", "disk-write", "bytes", written)
    run.meter("execute", "work", "disk-write", "seconds", seconds)
    assert flags(run.end(3.0)) == [("spilling", severity)]


def test_unmanaged_memory_is_judged_at_the_workers_spill_threshold_not_the_reader_s(
    store: Store, run: SyntheticRun
) -> None:
    # A leak held at 72% of the limit for 5 s on workers that spill at 70%.
    run.series([0.5 * i for i in range(12)], A, memory_unmanaged=720.0)
    recorded = run.end(6.0, settings(spill=0.7, pause=0.8))
    with dask.config.set({"distributed.worker.memory.spill": 0.8}):
        assert flags(recorded) == [("unmanaged-memory", "warning")]
    # The same leak on workers that spill at 75%: nothing, whoever reads it.
    other = workers(SyntheticRun(store), 0.0)
    other.series([0.5 * i for i in range(12)], A, memory_unmanaged=720.0)
    with dask.config.set({"distributed.worker.memory.spill": 0.6}):
        assert flags(other.end(6.0, settings(spill=0.75))) == []


def test_unmanaged_memory_needs_min_time_above_the_line(run: SyntheticRun) -> None:
    run.series([0.0, 0.5, 1.0, 1.5], A, memory_unmanaged=900.0)  # 1.5 s high
    run.series([2.0, 2.5], A, memory_unmanaged=100.0)
    run.series([3.0, 3.5, 4.0], A, memory_unmanaged=900.0)  # 1 s high again
    assert flags(run.end(5.0, settings(spill=0.7))) == []


def test_workers_with_different_thresholds_are_each_judged_by_their_own(
    run: SyntheticRun,
) -> None:
    for worker in (A, B):
        run.series([0.5 * i for i in range(12)], worker, memory_unmanaged=720.0)
    recorded = run.end(
        6.0,
        {
            "memory": {"spill": 0.7},
            "memory_by_worker": {A: {"spill": 0.7}, B: {"spill": 0.8}},
            "flags": {},
        },
    )
    frame = recorded.flags()
    assert list(frame["kind"]) == ["unmanaged-memory"] and frame["worker"][0] == A


# -- workers ---------------------------------------------------------------------


def test_client_restart_is_not_a_lost_worker(run: SyntheticRun) -> None:
    # What client.restart() leaves: the scheduler's restart, then the workers'
    # removals with a cleanup stimulus, milliseconds later.
    run.event(1.0, "cluster-restart")
    for worker in (A, B):
        stimulus = "handle-worker-cleanup-1795400000.1"
        run.event(1.05, "worker-removed", worker, stimulus_id=stimulus)
        run.log(1.04, "Worker process 123 was killed by signal 15", worker,
                level=20, source="nanny")  # fmt: skip
    assert flags(run.end(3.0)) == []


def test_restart_workers_is_not_a_lost_worker(run: SyntheticRun) -> None:
    run.event(1.0, "worker-removed", A, stimulus_id="handle-worker-cleanup-1.2")
    # distributed logs which workers it restarted once they are back.
    run.event(1.8, "client-abc", action="restart-workers", workers=[A])
    assert flags(run.end(3.0)) == []


@pytest.mark.parametrize(
    "stimulus", ["handle-worker-cleanup-1795400000.1", "check-worker-ttl-1.0"]
)
def test_a_worker_gone_outside_a_restart_is_lost(
    run: SyntheticRun, stimulus: str
) -> None:
    run.event(0.5, "cluster-restart")
    # Past the restart window (60 s).
    run.event(61.0, "worker-removed", A, stimulus_id=stimulus)
    recorded = run.end(62.0)
    assert flags(recorded) == [("worker-lost", "error")]
    cause = "heartbeat" if "ttl" in stimulus else "connection to the scheduler"
    assert cause in message(recorded, "worker-lost")


@pytest.mark.parametrize("stimulus", ["retire-workers-1.0", "worker-close-1.0"])
def test_a_worker_retired_or_closed_is_not_lost(
    run: SyntheticRun, stimulus: str
) -> None:
    run.event(1.0, "worker-removed", A, stimulus_id=stimulus)
    assert flags(run.end(3.0)) == []


def test_a_killed_worker_task_names_why_the_worker_died(run: SyntheticRun) -> None:
    run.log(1.0, "Worker process 77 was killed by signal 9", A, source="nanny")
    run.event(1.1, "worker-removed", A, stimulus_id="handle-worker-cleanup-1.1")
    run.task(1.2, 0.0, "grow", A, status="erred", exception=(
        "KilledWorker: Attempted to run task 'grow-1' on 3 different workers, but "
        f"all those workers died while running it. The last worker that attempt "
        f"to run the task was {A}. Inspecting worker logs is often a good next step"
    ))  # fmt: skip
    recorded = run.end(3.0)
    assert flags(recorded) == [("worker-lost", "error"), ("killed-worker", "error")]
    assert "killed by signal 9 (SIGKILL)" in message(recorded, "killed-worker")


# -- runtime ---------------------------------------------------------------------


def stalls(run: SyntheticRun, worker: str | None, *seconds: float) -> SyntheticRun:
    """Stalls of ``worker``'s event loop (None: the scheduler's), 3 s apart."""
    for i, s in enumerate(seconds):
        end = 3.0 * (i + 1)
        run.event(end, "event-loop-stall", worker, seconds=s, since=run.start + end - s)
    return run


def test_four_2s_stalls_of_a_worker_raise_event_loop_blocked(run: SyntheticRun) -> None:
    recorded = stalls(run, A, 2.0, 2.0, 2.0, 2.0).end(13.0)
    print(recorded.flags()[["kind", "severity", "message"]].to_string())
    assert flags(recorded) == [("event-loop-blocked", "warning")]
    text = message(recorded, "event-loop-blocked")
    assert "stalled 4 time(s), up to 2.00 s (8.00 s in all)" in text


#: Every kind of event whose data the rules and the report read, and fields
#: of each as another version's capture might send them: of other types.
READ_KINDS = (
    "event-loop-stall", "host-load", "task-stack", "task-native", "task-running",
    "clock-offset", "transfer", "worker-added", "worker-removed",
    "worker-restart-memory", "worker-status-change", "stall", "run-stopped",
)  # fmt: skip
GARBLED: dict[str, Any] = {
    "seconds": "2", "since": None, "cpu": "x", "loop_cpu": [], "gc": {}, "spilled": "a",
    "held": {"frames": "none", "thread": 3}, "imported": 3.5, "packages": "pandas",
    "rss": "big", "pid": "1", "stimulus_id": None, "memory_limit": "2GB", "key": None,
    "native": "frames", "frames": 3, "bytes": "many", "action": 5, "status": None,
    "workers": "all", "waiting": "high", "runnable": [], "cores": None, "run": "no",
    "of": 7, "n_workers": "2", "unrunnable": {"key": 1}, "stalled_s": [],
}  # fmt: skip


def test_events_with_fields_missing_or_of_another_type_are_read_as_unknown(
    run: SyntheticRun,
) -> None:
    """A capture of another version may ship an event's data without a field,
    or with one of another type: the rules and the report read the field as
    unknown, and judge the rest of the run as they would without it."""
    for kind in READ_KINDS:
        run.event(1.0, kind, A, **GARBLED)
        run.event(1.5, kind, A)
    recorded = stalls(run, A, 2.0, 2.0, 2.0, 2.0).end(13.0)
    # Each worker-restart-memory event is a restart, its RSS unknown.
    assert flags(recorded) == [
        ("memory-restart", "error"),
        ("memory-restart", "error"),
        ("event-loop-blocked", "warning"),
    ]
    assert message(recorded, "memory-restart").endswith(
        "exceeding 95% of its memory limit. Its tasks were lost and rescheduled."
    )
    assert "stalled 4 time(s), up to 2.00 s (8.00 s in all)" in message(
        recorded, "event-loop-blocked"
    )
    assert "event loop of" in recorded.report().html


@pytest.mark.parametrize(
    ("worker", "seconds", "expected"),
    [
        (A, (0.9,), []),
        (A, (1.0,), [("event-loop-blocked", "warning")]),
        (A, (10.0,), [("event-loop-blocked", "error")]),
        (A, (4.0, 4.0, 4.0), [("event-loop-blocked", "error")]),  # 12 s in all
        (None, (2.5,), []),  # the scheduler taking in a big graph
        (None, (3.0,), [("event-loop-blocked", "warning")]),
    ],
)
def test_event_loop_stalls_count_from_their_threshold(
    run: SyntheticRun,
    worker: str | None,
    seconds: tuple[float, ...],
    expected: list[tuple[str, str]],
) -> None:
    assert flags(stalls(run, worker, *seconds).end(15.0)) == expected


def held_by_task(
    run: SyntheticRun,
    key: str,
    frames: list[tuple[str, int, str, str, bool]],
    *,
    at: float = 4.0,
    seconds: float = 2.5,
    cpu: float = 2.5,
    loop_cpu: float = 0.0,
    held_cpu: float = 2.4,
    queued: float | None = None,
) -> None:
    """A stall of A's loop, ending at ``at``, that its watchdog saw a task's
    thread (thread 1, running ``key``) hold, at ``frames`` (``queued``: the
    seconds the loop's thread waited for a core meanwhile, where read)."""
    read = {} if queued is None else {"loop_queued": queued}
    run.event(at, "event-loop-stall", A, seconds=seconds,
              since=run.start + at - seconds, cpu=cpu, loop_cpu=loop_cpu,
              held={"thread": "task", "key": key, "ident": 1, "cpu": held_cpu,
                    "frames": frames}, **read)  # fmt: skip


def test_a_stall_names_what_its_watchdog_saw_hold_the_loop(run: SyntheticRun) -> None:
    """The watchdog beside the loop tells what held it: a task's thread with
    its frames (the user's innermost frame named, its stack as evidence), a
    task's thread gone before it was looked at (its task found in the run's
    rows, by thread and time), or the loop's own thread."""
    user = ("/home/me/etl.py", 12, "validate_lines", "pattern.match(line)", False)
    lib = ("/usr/lib/python3.12/re/__init__.py", 166, "match", "return ...", True)
    run.task(0.5, 3.0, "validate", key="validate-3")  # on thread 1 of A
    held_by_task(run, "validate-3", [lib, user, lib])
    said = message(run.end(5.0), "event-loop-blocked")
    assert (
        "validate_lines (/home/me/etl.py:12) held it, in task 'validate-3', "
        "holding the GIL, so heartbeats"
    ) in said, said


def test_a_holders_compiled_code_is_named_by_a_function_not_an_address(
    run: SyntheticRun,
) -> None:
    """py-spy read the holder in libc beneath the regular expression's C, at
    a frame it could not symbolize (seen in the suite): the flag said "in
    compiled code at 0x7f08ef78b874 (libc.so.6)". The innermost frame with a
    name is said; the evidence keeps the frames as read."""
    user = ("/home/me/etl.py", 12, "validate_lines", "pattern.match(line)", False)
    native = [
        "sre_ucs1_match (libpython3.12.so.1.0)",
        "0x7f08ef78b874 (libc.so.6)",
    ]
    run.task(0.5, 3.0, "validate", key="validate-6")  # on thread 1 of A
    held_by_task(run, "validate-6", [user])
    run.event(2.0, "task-native", A, key="validate-6", thread=1, native=native)
    flag = the_flag(run.end(5.0), "event-loop-blocked")
    assert (
        "holding the GIL (read a moment later in compiled code at "
        "sre_ucs1_match (libpython3.12.so.1.0))"
    ) in flag["message"], flag["message"]
    texts = [e["text"] for e in flag["evidence"]]
    assert "in compiled code: 0x7f08ef78b874 (libc.so.6)" in texts, texts


def test_a_stall_a_busy_host_stretched_names_what_held_it_and_blames_the_host(
    run: SyntheticRun,
) -> None:
    """A task's regular expression held the GIL for 0.94 s of CPU while a
    busy host stretched the stall to 1.63 s (seen in the suite): under the
    1 s a stall takes to count, so the host's, and said "A busy host, not the
    tasks' code, held it up" of a stall the watchdog saw the task hold."""
    user = ("/home/me/etl.py", 12, "validate_lines", "pattern.match(line)", False)
    busy_host(run, 4.0)
    run.task(0.5, 3.0, "validate", key="validate-5")  # on thread 1 of A
    held_by_task(run, "validate-5", [user], at=3.5, seconds=1.63, cpu=0.97,
                 loop_cpu=0.02, held_cpu=0.94)  # fmt: skip
    flag = the_flag(run.end(5.0), "event-loop-blocked")
    said = flag["message"]
    assert (
        "validate_lines (/home/me/etl.py:12) held it, in task 'validate-5', "
        "holding the GIL, for less CPU time than a stall takes to count (1.00 s)"
    ) in said, said
    assert "not the tasks' code" not in said and "A busy host made it a stall" in said
    assert flag["advice"] == HOST_ADVICE
    assert flag["evidence"][0]["text"].startswith("validate_lines at /home/me/etl.py")


@pytest.mark.parametrize(
    ("seconds", "loop_cpu", "queued", "hosts"),
    [
        # Measured in the suite: a task spinning in Python for 3 s beside a
        # busy host's other work. Its loop's thread ran 0.61 s and waited
        # for a core 1.32 s of a 1.94 s stall: it waited for no GIL, and
        # without the host's queue would have been 0.62 s late, not a stall.
        (1.94, 0.61, 1.32, True),
        # Queued most of it too, but held 1.3 s besides: a stall without the
        # host's queue as well, the code's.
        (2.7, 0.1, 1.4, False),
    ],
)
def test_a_stall_is_the_hosts_where_without_its_waits_for_a_core_it_was_none(
    run: SyntheticRun, seconds: float, loop_cpu: float, queued: float, hosts: bool
) -> None:
    spin = ("/home/me/job.py", 9, "spin", "while time.monotonic() < until:", False)
    busy_host(run, 4.0)
    run.task(0.5, 4.0, "spin", key="spin-1")  # on thread 1 of A
    # The process had a stall's worth of CPU (over the 1 s tick) either way.
    held_by_task(run, "spin-1", [spin], at=3.5, seconds=seconds, cpu=1.24,
                 loop_cpu=loop_cpu, held_cpu=0.63, queued=queued)  # fmt: skip
    flag = the_flag(run.end(5.0), "event-loop-blocked")
    said = flag["message"]
    if hosts:
        assert (
            f"its loop's thread waited for a core {queued:.2f} s of {seconds:.2f} s, "
            "as the kernel counted, and without those waits would not have been "
            "held as long as a stall takes to count (1.00 s)"
        ) in said, said
        assert "held it" not in said and "A busy host made it a stall" in said
        assert flag["advice"] == HOST_ADVICE
        # What ran meanwhile is still shown, as what the watchdog saw.
        assert flag["evidence"][0]["text"].startswith("spin at /home/me/job.py")
    else:
        assert "spin (/home/me/job.py:9) held it, in task 'spin-1'" in said, said
        assert "oversubscribed" not in said and flag["advice"] != HOST_ADVICE


def test_a_stall_whose_task_left_before_it_was_looked_at_names_its_task(
    run: SyntheticRun,
) -> None:
    run.task(0.5, 3.0, "validate", key="validate-4")  # on thread 1 of A
    run.event(4.0, "event-loop-stall", A, seconds=2.5, since=run.start + 1.5,
              cpu=2.5, loop_cpu=0.0, held={
                  "thread": "task", "key": None, "ident": 1, "cpu": 2.4, "frames": [],
              })  # fmt: skip
    said = message(run.end(5.0), "event-loop-blocked")
    assert "task 'validate-4' held it, holding the GIL" in said, said


def test_a_stall_on_the_loops_own_thread_says_so(run: SyntheticRun) -> None:
    own = ("/home/me/plugin.py", 7, "setup", "load_everything()", False)
    run.tasks(2, 0.1)
    held = {"thread": "loop", "frames": [own]}
    run.event(4.0, "event-loop-stall", A, seconds=2.0, since=run.start + 2.0,
              cpu=2.0, loop_cpu=2.0, held=held)  # fmt: skip
    said = message(run.end(5.0), "event-loop-blocked")
    assert (
        "setup (/home/me/plugin.py:7) held it, on the event loop's own thread" in said
    )


def test_a_stall_its_process_hardly_ran_in_is_no_advice_to_release_the_gil(
    run: SyntheticRun, store: Store
) -> None:
    # Seen in the suite: a worker's loop stalled 1.72 s while its whole
    # process had 0.04 s of CPU, its host's samples under the busy share:
    # told as busy code ("release the GIL in long-running tasks"). Busy work
    # would have kept a core busy: it waited.
    from dask_observe.diagnose.runtime import WAITED_ADVICE

    run.event(4.0, "event-loop-stall", A, seconds=1.72, since=run.start + 2.28,
              cpu=0.04, loop_cpu=0.01)  # fmt: skip
    flag = the_flag(run.end(5.0), "event-loop-blocked")
    assert (
        "while its process hardly ran (40.0 ms of CPU in 1.72 s)" in (flag["message"])
    ), flag["message"]
    assert flag["advice"] == WAITED_ADVICE
    assert "something held it" not in flag["message"]
    # A process whose work kept a core busy meanwhile: its own work held it.
    busy = workers(SyntheticRun(store), 0.0)
    busy.event(4.0, "event-loop-stall", A, seconds=1.72, since=busy.start + 2.28,
               cpu=1.70, loop_cpu=0.01)  # fmt: skip
    said = message(busy.end(5.0), "event-loop-blocked")
    assert "something held it (or the GIL)" in said and "hardly ran" not in said


def test_distributed_s_own_unresponsive_line_counts_once(run: SyntheticRun) -> None:
    stalls(run, A, 4.0)
    run.log(3.0, "Event loop was unresponsive in Worker for 4.00s.  This is often "
            "caused by long-running GIL-holding functions", A)  # fmt: skip
    recorded = run.end(5.0)
    assert "stalled 1 time(s), up to 4.00 s" in message(recorded, "event-loop-blocked")
    evidence = recorded.flags()["evidence"][0]
    assert any("unresponsive" in e["text"] for e in evidence)


def test_distributed_s_line_goes_with_the_stall_it_tells_on_a_busy_host(
    run: SyntheticRun,
) -> None:
    """A task held the GIL 4 s on a host that other work kept busy (CI, three
    test processes on two cores): the ticker's stall had the process's CPU
    (the task's, so the code's); distributed's line about the same stall has
    no CPU reading, and was filed apart as the host's. The flag then lost it
    as evidence and said "1 more came while the host was oversubscribed"."""
    busy_host(run, 4.0)
    run.event(3.0, "event-loop-stall", A, seconds=4.0, since=run.start - 1.0, cpu=4.0)
    run.log(3.0, "Event loop was unresponsive in Worker for 4.00s.  This is often "
            "caused by long-running GIL-holding functions", A)  # fmt: skip
    recorded = run.end(5.0)
    text = message(recorded, "event-loop-blocked")
    assert "stalled 1 time(s), up to 4.00 s" in text
    assert "oversubscribed" not in text
    evidence = recorded.flags()["evidence"][0]
    assert any("unresponsive" in e["text"] for e in evidence)


def test_a_partial_run_has_distributed_s_lines_only(run: SyntheticRun) -> None:
    run.log(3.0, "Event loop was unresponsive in Scheduler for 3.50s.", None,
            source="scheduler")  # fmt: skip
    assert flags(run.end(5.0)) == [("event-loop-blocked", "warning")]


def contention(
    run: SyntheticRun, *values: float, threads: int = 4, computing: int = 4
) -> SyntheticRun:
    """GIL contention samples of worker A, a second apart, while ``computing``
    of its task threads run a task each all along."""
    workers(run, 0.0, threads)
    for i, v in enumerate(values):
        run.metrics(1.0 + i, A, gil_contention=v)
    for _ in range(computing):
        run.task(0.0, len(values) + 1.0, "spin", A)
    return run


@pytest.mark.parametrize(
    ("values", "threads", "computing", "expected"),
    [
        ((0.9,) * 4, 4, 4, []),  # four seconds: too short to tell (min-time)
        ((0.9,) * 5, 4, 4, ["gil-contention"]),
        ((0.9,) * 5, 4, 2, ["gil-contention"]),
        ((0.8,) * 6, 4, 4, []),  # not above the share
        # pandas on four threads: 0.3-0.75, from one identical run to the next.
        ((0.75, 0.7, 0.75) * 2, 4, 4, []),
        ((0.9,) * 5, 1, 1, []),  # one thread: event-loop-blocked's
        # The process's contention, its task threads idle: in a threads-only
        # cluster the client and the scheduler share the process.
        ((0.9,) * 6, 4, 1, []),
    ],
)
def test_gil_contention_needs_five_high_seconds_while_task_threads_compute(
    run: SyntheticRun,
    values: tuple[float, ...],
    threads: int,
    computing: int,
    expected: list[str],
) -> None:
    recorded = contention(run, *values, threads=threads, computing=computing)
    assert [kind for kind, _ in flags(recorded.end(len(values) + 2.0))] == expected


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        # dask-examples' dataframe notebook on one worker of four threads, at
        # the lowest versions claimed: two peaks in eight seconds (it was
        # flagged in one run of eight, and failed CI).
        ((0.58, 0.58, 0.86, 0.65, 0.82, 0.6, 0.61, 0.76), []),
        ((0.57, 0.57, 0.41, 0.85, 0.77, 0.66, 0.96, 0.71), []),
        ((0.3, 0.3, 0.57, 0.97, 0.67, 0.94, 0.94, 0.66), []),
        # At those versions, one pass in ten: three seconds of three. Only a
        # longer spell tells the code's contention from that.
        ((0.9, 0.88, 0.86), []),
        # Five seconds of twelve: a spell, not most of the time.
        ((0.9,) * 5 + (0.5,) * 7, []),
        # Threads that fight from their second second on.
        ((0.6, 0.9, 0.95, 0.9, 0.92, 0.9, 0.93, 0.9), ["gil-contention"]),
    ],
)
def test_gil_contention_is_most_of_the_threads_time_not_a_peak_here_and_there(
    run: SyntheticRun, values: tuple[float, ...], expected: list[str]
) -> None:
    recorded = contention(run, *values)
    assert [kind for kind, _ in flags(recorded.end(len(values) + 2.0))] == expected


@pytest.mark.parametrize(
    ("lanes", "until", "expected"),
    [
        (4, 7.0, ["gil-contention"]),  # four threads busy before every sample
        (2, 7.0, ["gil-contention"]),
        (1, 7.0, []),  # one thread cannot contend with itself
        # Four threads before the first four samples, 0.8 before the fifth:
        # four seconds computing, not the five the flag needs.
        (4, 4.2, []),
    ],
)
def test_gil_contention_counts_the_threads_busy_in_the_second_before_a_sample(
    run: SyntheticRun, lanes: int, until: float, expected: list[str]
) -> None:
    """Many short tasks, back to back on ``lanes`` threads until ``until``:
    each sample (at 1 to 6 s) judges the second before it."""
    workers(run, 0.0, threads=4)
    for i in range(1, 7):
        run.metrics(float(i), A, gil_contention=0.9)
    for _ in range(lanes):
        for j in range(round(until / 0.05)):
            run.task(j * 0.05, 0.05, "spin", A)
    assert [kind for kind, _ in flags(run.end(8.0))] == expected


def test_threads_taking_turns_slow_the_loop_without_a_second_flag(
    run: SyntheticRun,
) -> None:
    contention(run, *([0.9] * 6))
    run.event(2.5, "event-loop-stall", A, seconds=1.3, since=run.start + 1.2)
    assert [kind for kind, _ in flags(run.end(8.0))] == ["gil-contention"]


@pytest.mark.parametrize(
    ("spilled", "expected"),
    [(0.7, ["spilling"]), (0.6, ["event-loop-blocked", "spilling"])],
)
def test_a_stall_spent_at_least_half_spilling_is_told_by_spilling_alone(
    run: SyntheticRun, spilled: float, expected: list[str]
) -> None:
    """A worker's loop held 1.3 s, 0.7 s of it moving data to disk: the disk
    held it, and the spilling flag (a warning for it) says so. With 0.6 s of
    it on disk, most of the stall was something else: event-loop-blocked."""
    workers(run, 0.0)
    run.metrics(1.0, A, memory_spilled=0)
    run.metrics(2.6, A, memory_spilled=200.0)
    run.event(
        2.5,
        "event-loop-stall",
        A,
        seconds=1.3,
        since=run.start + 1.2,
        cpu=1.2,
        spilled=spilled,
    )
    recorded = run.end(4.0)
    assert sorted(kind for kind, _ in flags(recorded)) == expected
    spilling = message(recorded, "spilling")
    if expected == ["spilling"]:
        assert dict(flags(recorded)) == {"spilling": "warning"}
        assert "stalled 1 time(s) while it spilled, up to 1.30 s" in spilling
    else:
        assert "stalled" not in spilling
        blocked = message(recorded, "event-loop-blocked")
        assert "held it (or the GIL)" in blocked, blocked


PAUSING = "Worker is at 82% memory usage. Pausing worker.  Process memory: 494 MiB"
RESUMING = "Worker is at 61% memory usage. Resuming worker. Process memory: 366 MiB"


def collected_as_it_paused(run: SyntheticRun) -> SyntheticRun:
    """A worker's loop held 1.65 s, 1.6 s of it in full garbage collections
    (seen on CI: a worker eating memory under its nanny, whose memory monitor
    collects on the event loop as the worker passes its pause threshold)."""
    run.event(3.0, "event-loop-stall", A, seconds=1.65, since=run.start + 1.35,
              cpu=1.6, loop_cpu=1.6, gc=1.6)  # fmt: skip
    return run


@pytest.mark.parametrize(
    "pause",
    [
        [("line", 2.98)],  # said as its collection returned
        [("status", 3.05)],  # its line lost with it: the scheduler's change
        [("line", 1.0)],  # paused before, still paused: a paused worker collects
    ],
    ids=["as it paused", "status change only", "while paused"],
)
def test_a_stall_in_the_collection_a_worker_runs_as_it_pauses_is_the_pauses(
    run: SyntheticRun, pause: list[tuple[str, float]]
) -> None:
    for how, t in pause:
        if how == "line":
            run.log(t, PAUSING, A, logger="distributed.worker.memory")
        else:
            run.event(t, A, action="worker-status-change", status="paused")
    recorded = collected_as_it_paused(run).end(4.0, settings(pause=0.8))
    assert flags(recorded) == [("memory-pressure", "warning")]
    said = message(recorded, "memory-pressure")
    assert "was paused 1 time(s)" in said
    assert "Its event loop stalled 1 time(s) meanwhile, up to 1.65 s" in said
    evidence = recorded.flags()["evidence"][0]
    assert any("stalled for 1.65 s" in e["text"] for e in evidence)


def test_a_collection_long_after_a_worker_resumed_is_the_collectors(
    run: SyntheticRun,
) -> None:
    # Paused and resumed a second before the stall began: its collection was
    # not the pause's, and event-loop-blocked names the collector.
    run.log(0.1, PAUSING, A, logger="distributed.worker.memory")
    run.log(0.3, RESUMING, A, logger="distributed.worker.memory")
    recorded = collected_as_it_paused(run).end(4.0, settings(pause=0.8))
    assert sorted(flags(recorded)) == [
        ("event-loop-blocked", "warning"),
        ("memory-pressure", "warning"),
    ]
    assert "garbage collector ran" in message(recorded, "event-loop-blocked")
    assert "stalled" not in message(recorded, "memory-pressure")


def test_event_loop_blocked_counts_apart_the_stalls_a_pause_told(
    run: SyntheticRun,
) -> None:
    run.log(2.98, PAUSING, A, logger="distributed.worker.memory")
    collected_as_it_paused(run)
    # Later, resumed, the same worker's loop held 2 s by its tasks' code.
    run.log(4.0, RESUMING, A, logger="distributed.worker.memory")
    run.event(7.0, "event-loop-stall", A, seconds=2.0, since=run.start + 5.0,
              cpu=2.0, loop_cpu=2.0)  # fmt: skip
    recorded = run.end(8.0, settings(pause=0.8))
    assert sorted(flags(recorded)) == [
        ("event-loop-blocked", "warning"),
        ("memory-pressure", "warning"),
    ]
    blocked = message(recorded, "event-loop-blocked")
    assert "stalled 1 time(s), up to 2.00 s" in blocked
    assert (
        "1 more came while a worker paused for memory collected garbage "
        "(see memory-pressure)" in blocked
    )


@pytest.mark.parametrize(
    ("seconds", "text", "expected"),
    [(5.3, "5.30 s", "warning"), (12.0, "12.00 s", "error")],
)
def test_a_loop_starved_all_along_by_threads_taking_turns_is_told_in_their_flag(
    run: SyntheticRun, seconds: float, text: str, expected: str
) -> None:
    """Four spinning threads on a busy machine: the loop's thread got the GIL
    too rarely to tick for the whole spin (5.3 s seen on CI), and distributed
    said so too. One flag, which says how long the loop waited."""
    contention(run, *([0.9] * 12))
    run.event(1 + seconds, "event-loop-stall", A, seconds=seconds, since=run.start + 1)
    run.log(1.0 + seconds, f"Event loop was unresponsive in Worker for {seconds}s.", A)
    recorded = run.end(14.0)
    assert flags(recorded) == [("gil-contention", expected)]
    flag = recorded.flags().iloc[0]
    assert f"event loop stalled for up to {text} meanwhile" in flag["message"]
    assert any("stalled for" in e["text"] for e in flag["evidence"])


def test_one_late_sample_after_a_starved_loop_speaks_for_its_whole_wait(
    run: SyntheticRun,
) -> None:
    """The loop got no heartbeat out for 5 s of spinning: the one sample that
    came after is the average of those 5 s, not a second's noise."""
    workers(run, 0.0, threads=4)
    run.metrics(1.0, A, gil_contention=0.1)
    run.metrics(6.2, A, gil_contention=0.95)
    for _ in range(4):
        run.task(1.0, 5.0, "spin", A)
    run.event(6.1, "event-loop-stall", A, seconds=5.0, since=run.start + 1.1)
    recorded = run.end(7.0)
    assert flags(recorded) == [("gil-contention", "warning")]
    assert "stalled for up to 5.00 s meanwhile" in message(recorded, "gil-contention")


def test_a_stall_after_the_threads_stopped_fighting_is_its_own_flag(
    run: SyntheticRun,
) -> None:
    contention(run, *([0.9] * 6))
    run.event(12.0, "event-loop-stall", A, seconds=1.5, since=run.start + 10.5)
    recorded = run.end(13.0)
    assert flags(recorded) == [
        ("gil-contention", "warning"), ("event-loop-blocked", "warning"),
    ]  # fmt: skip
    assert "stalled for" not in message(recorded, "gil-contention")


def test_a_stall_while_the_host_was_busy_and_the_process_starved_is_the_hosts(
    run: SyntheticRun,
) -> None:
    busy_host(run, 4.0)
    # 1.4 s without a tick, in which the process had 0.3 s of CPU: on a quiet
    # host its loop would not have stalled past the tick. Its thread was ready
    # to run but waited for a core 1.2 s of it, as the kernel counted.
    run.event(
        3.0, "event-loop-stall", A,
        seconds=1.4, since=run.start + 1.6, cpu=0.3, loop_queued=1.2,
    )  # fmt: skip
    recorded = run.end(5.0)
    print(recorded.flags()[["kind", "severity", "message"]].to_string())
    assert flags(recorded) == [("event-loop-blocked", "warning")]
    flag = recorded.flags().iloc[0]
    assert "while its host was oversubscribed" in flag["message"]
    assert "threads waited for a core 90% of the time" in flag["message"]
    assert flag["advice"] == HOST_ADVICE
    texts = [e["text"] for e in flag["evidence"]]
    assert "host 10.0.0.2 oversubscribed" in texts[0] and "stalled for" in texts[1]


@pytest.mark.parametrize(
    ("cpu", "other_host", "waiting", "queued", "why"),
    [
        (1.3, False, 0.9, None, "the process ran as long as its loop stalled"),
        (0.3, True, 0.9, None, "the busy host is another worker's"),
        (0.3, False, 0.3, None, "threads waited for a core only 30% of the time"),
        # Measured beside twelve busy processes: a task waiting in C with the
        # GIL held, its loop's thread queued 0.09 s of a 2.49 s stall.
        (0.04, False, 0.9, 0.09, "the loop's thread hardly waited for a core"),
    ],
)
def test_a_stall_is_the_codes_unless_the_host_was_busy_and_starved_it(
    run: SyntheticRun,
    cpu: float,
    other_host: bool,
    waiting: float,
    queued: float | None,
    why: str,
) -> None:
    from dask_observe.diagnose.holdups import WAITED_SHARE
    from dask_observe.diagnose.runtime import WAITED_ADVICE

    stall = 1.4
    busy_host(run, 4.0, B if other_host else A, waiting=waiting)
    read = {"cpu": cpu} if queued is None else {"cpu": cpu, "loop_queued": queued}
    run.event(3.0, "event-loop-stall", A, seconds=stall, since=run.start + 1.6, **read)
    recorded = run.end(5.0)
    assert flags(recorded) == [("event-loop-blocked", "warning")], why
    flag = recorded.flags().iloc[0]
    assert "oversubscribed" not in flag["message"], why
    if cpu >= stall * WAITED_SHARE:  # busy work of its own
        assert "Release the GIL" in flag["advice"], why
    else:  # 0.3 s of CPU in 1.4 s: a wait, not the host's
        assert "while its process hardly ran" in flag["message"], why
        assert flag["advice"] == WAITED_ADVICE, why


def test_stalls_of_both_causes_blame_the_code_and_count_the_hosts_apart(
    run: SyntheticRun,
) -> None:
    busy_host(run, 4.0)
    run.event(3.0, "event-loop-stall", A, seconds=1.4, since=run.start + 1.6, cpu=0.2)
    run.event(9.0, "event-loop-stall", A, seconds=1.5, since=run.start + 7.5, cpu=1.5)
    recorded = run.end(10.0)
    print(recorded.flags()[["kind", "severity", "message"]].to_string())
    assert flags(recorded) == [("event-loop-blocked", "warning")]
    text = message(recorded, "event-loop-blocked")
    assert "stalled 1 time(s), up to 1.50 s" in text
    assert "1 more came while the host was oversubscribed" in text


def test_without_pressure_information_more_runnable_threads_than_cores_is_busy(
    run: SyntheticRun,
) -> None:
    busy_host(run, 4.0, waiting=None)  # 6 runnable threads on 2 cores
    run.event(3.0, "event-loop-stall", A, seconds=1.4, since=run.start + 1.6, cpu=0.3)
    assert "oversubscribed" in message(run.end(5.0), "event-loop-blocked")


def test_gil_contention_on_a_busy_host_names_the_host(run: SyntheticRun) -> None:
    contention(run, 0.9, 0.9, 0.9)
    busy_host(run, 4.0)
    recorded = run.end(5.0)
    assert flags(recorded) == [("gil-contention", "warning")]
    flag = recorded.flags().iloc[0]
    assert "each while their host was oversubscribed" in flag["message"]
    assert flag["advice"] == HOST_ADVICE


def test_a_stall_while_threads_take_turns_on_a_busy_host_is_in_that_flag(
    run: SyntheticRun,
) -> None:
    # The process had its CPU (the spinning threads'): not starved, but the
    # loop's thread waited its turn at the GIL on a host that ran it rarely.
    contention(run, 0.9, 0.9, 0.9)
    busy_host(run, 4.0)
    since = run.start + 1.1
    run.event(3.0, "event-loop-stall", A, seconds=1.9, since=since, cpu=1.9)
    recorded = run.end(5.0)
    assert flags(recorded) == [("gil-contention", "warning")]
    flag = recorded.flags().iloc[0]
    assert "oversubscribed" in flag["message"]
    assert "event loop stalled for up to 1.90 s meanwhile" in flag["message"]


def test_gil_contention_on_a_quiet_host_beside_a_busy_one_is_the_codes(
    run: SyntheticRun,
) -> None:
    contention(run, *([0.9] * 6))
    busy_host(run, 7.0, B)
    recorded = run.end(8.0)
    assert flags(recorded) == [("gil-contention", "warning")]
    assert "Use processes" in recorded.flags().iloc[0]["advice"]


def test_threads_that_go_on_fighting_once_their_host_is_quiet_are_the_codes(
    run: SyntheticRun,
) -> None:
    # Ten seconds on a host busy with other work, then six on a quiet one:
    # the quiet seconds are judged among themselves (all high), not against
    # the sixteen (most of which the host explains).
    contention(run, *([0.9] * 16))
    busy_host(run, 10.0)
    recorded = run.end(18.0)
    assert flags(recorded) == [("gil-contention", "warning")]
    flag = recorded.flags().iloc[0]
    assert "Use processes" in flag["advice"]
    assert "(6 samples)" in flag["message"]


def test_a_scheduler_stall_is_judged_by_the_schedulers_own_host_samples(
    run: SyntheticRun,
) -> None:
    busy_host(run, 6.0, None)
    run.event(
        5.0, "event-loop-stall", None, seconds=3.5, since=run.start + 1.5, cpu=0.1
    )
    recorded = run.end(6.0)
    assert "the scheduler stalled 1 time(s)" in message(recorded, "event-loop-blocked")
    assert "oversubscribed" in message(recorded, "event-loop-blocked")


def test_a_stall_while_modules_were_imported_names_them_and_the_remedy(
    run: SyntheticRun,
) -> None:
    run.event(
        2.0, "event-loop-stall", A, seconds=1.6, since=run.start + 0.4, cpu=1.5,
        loop_cpu=1.5, imported=312, packages=["pandas", "pyarrow"],
    )  # fmt: skip
    recorded = run.end(3.0)
    print(recorded.flags()[["kind", "severity", "message"]].to_string())
    assert flags(recorded) == [("event-loop-blocked", "warning")]
    flag = recorded.flags().iloc[0]
    assert "while it imported modules (312 in all: pandas, pyarrow)" in flag["message"]
    assert "--preload" in flag["advice"]


def test_stalls_of_the_code_and_of_imports_blame_the_code_and_count_the_others(
    run: SyntheticRun,
) -> None:
    run.event(2.0, "event-loop-stall", A, seconds=1.6, since=run.start + 0.4,
              cpu=1.5, imported=3, packages=["mylib"])  # fmt: skip
    run.event(6.0, "event-loop-stall", A, seconds=1.2, since=run.start + 4.8, cpu=1.2)
    recorded = run.end(7.0)
    text = message(recorded, "event-loop-blocked")
    assert "stalled 1 time(s), up to 1.20 s" in text
    assert "1 more came while modules were imported" in text


def test_a_task_holding_the_gil_after_its_module_was_imported_is_the_codes(
    run: SyntheticRun,
) -> None:
    """A worker unpickled a task on its loop (its module, two of them,
    imported in milliseconds), then the task held the GIL for 4 s: the loop's
    own thread had 10 ms of CPU in the stall, the process 4 s (the task's).
    It was told as an import stall, with advice to preload the module."""
    run.event(5.0, "event-loop-stall", A, seconds=3.9, since=run.start + 1.1,
              cpu=4.0, loop_cpu=0.01, imported=2, packages=["tests"])  # fmt: skip
    recorded = run.end(6.0)
    flag = recorded.flags().iloc[0]
    assert "stalled 1 time(s), up to 3.90 s" in flag["message"]
    assert "imported" not in flag["message"]
    assert "Release the GIL" in flag["advice"]


def test_an_import_waiting_on_a_slow_disk_is_the_imports(run: SyntheticRun) -> None:
    """A module read from a slow file system: little CPU on the loop's thread
    and none elsewhere. Nothing else held the loop: the imports did."""
    run.event(5.0, "event-loop-stall", A, seconds=2.0, since=run.start + 3.0,
              cpu=0.05, loop_cpu=0.04, imported=40, packages=["mylib"])  # fmt: skip
    assert "while it imported modules" in message(run.end(6.0), "event-loop-blocked")


def test_an_import_on_a_busy_host_that_starved_the_process_is_the_hosts(
    run: SyntheticRun,
) -> None:
    busy_host(run, 4.0)
    run.event(3.0, "event-loop-stall", A, seconds=1.4, since=run.start + 1.6,
              cpu=0.2, imported=2, packages=["tests"])  # fmt: skip
    assert "oversubscribed" in message(run.end(5.0), "event-loop-blocked")


def test_an_import_seen_holding_the_loop_on_a_busy_host_is_the_imports(
    run: SyntheticRun,
) -> None:
    """The same busy host and starved process, but the watchdog saw the
    loop's own thread inside the import machinery through the stall (an
    import waiting, as one that sleeps or reads a slow disk): the import
    held it, not the host (the suite's slow-import test, on a loaded host)."""
    busy_host(run, 4.0)
    in_import = [
        ["<frozen importlib._bootstrap>", 1360, "_find_and_load", "", True],
        ["/work/mylib/__init__.py", 3, "<module>", "time.sleep(2)", False],
    ]
    run.event(3.0, "event-loop-stall", A, seconds=1.4, since=run.start + 1.6,
              cpu=0.2, imported=2, packages=["mylib"],
              held={"thread": "loop", "frames": in_import})  # fmt: skip
    text = message(run.end(5.0), "event-loop-blocked")
    assert "while it imported modules (2 in all: mylib)" in text
    assert "oversubscribed" not in text


def test_a_worker_on_the_schedulers_host_is_judged_by_its_samples_too(
    run: SyntheticRun,
) -> None:
    # A worker's own sampler has its first sample a second into the run; the
    # scheduler's, on the same machine (here 10.0.0.1), cover that second.
    beside = "tcp://10.0.0.1:40002"
    busy_host(run, 4.0, None)
    run.event(1.2, "event-loop-stall", beside, seconds=1.1, since=run.start, cpu=0.2)
    run.event(1.2, "event-loop-stall", B, seconds=1.1, since=run.start, cpu=0.2)
    recorded = run.end(5.0)
    text = message(recorded, "event-loop-blocked")
    # B's host (10.0.0.3) was not sampled busy: its stall is the code's.
    assert f"The event loop of {B} stalled 1 time(s)" in text
    assert "1 more came while the host was oversubscribed" in text


# -- work ------------------------------------------------------------------------


# A scheduler that spends 1 ms on a task keeps each of two threads waiting 2 ms
# between one task and the next.
QUIET_GAP = 0.002


def test_tiny_tasks_that_cost_more_to_schedule_than_to_run(run: SyntheticRun) -> None:
    recorded = run.tasks(3000, 0.0002, "inc", gap=QUIET_GAP).end(4.0)
    assert flags(recorded) == [("tiny-tasks", "warning")]
    flag = recorded.flags().iloc[0]
    assert "3000 tasks of 'inc'" in flag["message"]
    assert "a median 2.0 ms between one task's end" in flag["message"]
    assert "x more work" in flag["advice"] and "'inc'" in flag["advice"]


def test_tiny_tasks_cut_from_chunks_are_told_to_grow_no_larger_than_dask_s_size(
    run: SyntheticRun,
) -> None:
    """A diff across 8 MB chunks cut 1,270 slivers of 8 KB (the diagnosis
    benchmark's double_diff): "about 900x more work" asked for chunks of 7 GB.
    Growth stops at dask's chunk size (array.chunk-size, 128 MiB)."""
    run.tasks(3000, 0.0002, "rechunk-merge", gap=QUIET_GAP, nbytes=8_000)
    recorded = run.tasks(100, 0.01, "random_sample", nbytes=8_000_000).end(4.0)
    assert flags(recorded) == [("tiny-tasks", "warning")]
    advice = recorded.flags().iloc[0]["advice"]
    assert advice.startswith("Give each task of 'rechunk-merge' about 10x more work")
    assert (
        "(about 76.29 MiB, as large as dask's chunk size; the run's are 7.63 MiB)"
        in advice
    )


def test_tiny_tasks_beside_chunks_of_dask_s_size_are_not_told_to_grow_them(
    run: SyntheticRun,
) -> None:
    run.tasks(3000, 0.0002, "getitem", gap=QUIET_GAP, nbytes=4_000)
    recorded = run.tasks(20, 0.05, "load", nbytes=128 * MiB).end(4.0)
    advice = recorded.flags().iloc[0]["advice"]
    assert advice.startswith("The run's chunks are 128.00 MiB already, about dask's")
    assert "x more work" not in advice


def test_tiny_tasks_on_a_loaded_host_are_named_by_the_cost_measured(
    run: SyntheticRun,
) -> None:
    """10,001 trivial tasks took 34-45 s on a host loaded 2-3x over its cores,
    with no flag: the rule assumed 1 ms a task where it cost 2.7-4 ms, so the
    scheduling it reckoned (10 s) was under its share of the run."""
    recorded = run.tasks(10_001, 0.0006, "inc", gap=0.0062).end(34.0)
    assert flags(recorded) == [("tiny-tasks", "warning")]
    assert "a median 6.2 ms between one task's end" in message(recorded, "tiny-tasks")


def test_tasks_longer_than_what_handing_them_out_costs_are_not_tiny(
    run: SyntheticRun,
) -> None:
    # On a quiet, fast host: 0.5 ms tasks handed out in 0.2 ms each.
    assert flags(run.tasks(3000, 0.0005, "inc", gap=0.0002).end(1.2)) == []


def test_a_stencil_with_tiny_slices_and_real_compute_is_well_cut(
    run: SyntheticRun,
) -> None:
    # An array stencil: median task 0.27 ms (slicing, concatenating), mean
    # 4.6 ms: 5.5 s of compute against ~1.2 s of scheduling.
    run.tasks(1000, 0.00027, "getitem", gap=QUIET_GAP)
    run.tasks(200, 0.0013, "concatenate", gap=QUIET_GAP)
    run.tasks(100, 0.0525, "apply_stencil", gap=QUIET_GAP)
    assert flags(run.end(4.0)) == []


@pytest.mark.parametrize(
    ("n", "duration", "expected"),
    [
        (999, 1.5, []),  # min-count
        (1000, 1.5, [("tiny-tasks", "warning")]),  # 1 s of scheduling, 0.67 of the run
        (1000, 2.5, [("tiny-tasks", "info")]),  # 0.4 of the run
        (1000, 4.0, []),  # 0.25 of the run: below the share
    ],
)
def test_tiny_tasks_edges(
    run: SyntheticRun, n: int, duration: float, expected: list[tuple[str, str]]
) -> None:
    assert flags(run.tasks(n, 0.0001, gap=QUIET_GAP).end(duration)) == expected


def test_failed_tasks_raise_task_errors(run: SyntheticRun) -> None:
    run.task(0.5, 0.1, "parse", status="erred", exception="ValueError: bad row")
    run.task(0.7, 0.1, "parse", status="erred", exception="ValueError: bad row")
    recorded = run.end(2.0)
    assert flags(recorded) == [("task-errors", "error")]
    assert "ValueError (2)" in message(recorded, "task-errors")


@pytest.mark.parametrize(
    ("transfer", "expected"), [(0.9, []), (1.5, ["high-transfer"])]
)
def test_high_transfer_from_min_time(
    run: SyntheticRun, transfer: float, expected: list[str]
) -> None:
    run.task(0.1, 0.5, transfer=transfer / 2).task(0.2, 0.5, worker=B,
                                                   transfer=transfer / 2)  # fmt: skip
    assert [kind for kind, _ in flags(run.end(3.0))] == expected


def test_waiting_for_a_few_kib_is_not_high_transfer(run: SyntheticRun) -> None:
    """The loaded notebook's 10,717 tiny tasks waited seconds for 71 KiB in
    all: latency, not data in the wrong place."""
    run.task(0.1, 0.5, "sum", transfer=1.0).task(0.2, 0.5, "sum", B, transfer=1.0)
    run.event(1.0, "transfer", A, **{"from": B, "bytes": 71 * 2**10, "seconds": 2.0})
    assert flags(run.end(3.0)) == []


def test_high_transfer_names_what_moved_and_which_tasks_waited(
    run: SyntheticRun,
) -> None:
    run.task(0.1, 0.5, "merge", transfer=1.0).task(0.2, 0.5, "merge", B, transfer=1.0)
    run.event(1.0, "transfer", A, **{"from": B, "bytes": 300 * 2**20, "seconds": 2.0})
    recorded = run.end(3.0)
    assert flags(recorded) == [("high-transfer", "warning")]
    text = message(recorded, "high-transfer")
    assert (
        "2.00 s for 300.00 MiB moved" in text and "the tasks of 'merge' 2.00 s" in text
    )


@pytest.mark.parametrize(
    ("on_b", "the_hosts"), [(0.4, True), (1.5, False)], ids=["host", "data"]
)
def test_waiting_for_data_on_a_busy_host_is_told_as_the_hosts(
    run: SyntheticRun, on_b: float, the_hosts: bool
) -> None:
    """A's host was oversubscribed while its tasks waited 1.5 s for data: the
    host's, unless B's waits on a quiet host make the flag alone."""
    busy_host(run, 3.0, worker=A)
    run.task(1.6, 0.5, "merge", transfer=1.5).task(1.6, 0.5, "merge", B, transfer=on_b)
    run.event(2.0, "transfer", A, **{"from": B, "bytes": 300 * 2**20, "seconds": 1.5})
    recorded = run.end(3.0)
    assert flags(recorded) == [("high-transfer", "warning")]
    flag = recorded.flags().iloc[0]
    assert (flag["advice"] == HOST_ADVICE) is the_hosts
    host_said = "1.50 s of it while their host was oversubscribed (host 10.0.0.2"
    assert (host_said in flag["message"]) is the_hosts, flag["message"]


@pytest.mark.parametrize(
    ("seconds", "expected"), [(1.0, []), (3.0, ["load-imbalance"])]
)
def test_load_imbalance_from_min_time(
    run: SyntheticRun, seconds: float, expected: list[str]
) -> None:
    for i in range(int(seconds / 0.5) + 1):
        run.metrics(0.5 * i, A, tasks_processing=5.0)
        run.metrics(0.5 * i, B, tasks_processing=0.0)
    assert [kind for kind, _ in flags(run.end(seconds + 0.5))] == expected


def test_load_imbalance_holds_counts_sampled_only_when_they_change(
    run: SyntheticRun,
) -> None:
    # As the capture samples a large cluster: every worker at the run's start,
    # then a worker's task count only when it changes.
    # A's count moves every tick, B's none: B idled all along.
    run.metrics(0.0, A, tasks_processing=5.0).metrics(0.0, B, tasks_processing=0.0)
    for i in range(1, 8):
        run.metrics(0.5 * i, A, tasks_processing=5.0 - i % 2)
    assert [kind for kind, _ in flags(run.end(4.0))] == ["load-imbalance"]


def test_a_removed_workers_last_count_is_not_held_after_it_left(
    run: SyntheticRun,
) -> None:
    # B held nothing when it left: it was not idle for the 3 s after.
    run.metrics(0.0, A, tasks_processing=5.0).metrics(0.0, B, tasks_processing=0.0)
    run.event(0.2, "worker-removed", B, stimulus_id="worker-close")
    for i in range(1, 8):
        run.metrics(0.5 * i, A, tasks_processing=5.0 - i % 2)
    assert flags(run.end(4.0)) == []


# -- figures ---------------------------------------------------------------------


def test_peak_memory_holds_each_workers_last_reading_until_it_left(
    run: SyntheticRun,
) -> None:
    # As a large cluster's heartbeats come: not every worker every second.
    for t in (0.0, 2.0):
        run.metrics(t, A, memory_process=100 * MiB)
    run.metrics(1.0, B, memory_process=200 * MiB)
    run.event(1.2, "worker-removed", B, stimulus_id="worker-close")
    run.metrics(4.0, A, memory_process=250 * MiB)
    # Second 1 held A's 100 MiB beside B's 200; by second 4 B had left.
    assert peak_memory(run.end(5.0)) == 300 * MiB


def test_disk_time_is_zero_where_no_byte_touched_a_disk(
    store: Store, run: SyntheticRun
) -> None:
    # A dataframe join: distributed timed 7 s of waits as "disk-read".
    for i in range(7):
        run.task(0.1 * i, 0.2, "align", disk_read=1.0)
    recorded = run.end(3.0)
    phases = phase_totals(task_table(recorded, recorded.started))
    assert phases["disk"] == 0.0 and phases["stall"] == pytest.approx(7.0)
    # Where the workers' meters counted bytes read back from disk, it was disk.
    spilled = workers(SyntheticRun(store), 0.0)
    for i in range(7):
        spilled.task(0.1 * i, 0.2, "align", disk_read=1.0)
    spilled.meter("execute", "align", "disk-read", "bytes", 300 * MiB)
    again = spilled.end(3.0)
    phases = phase_totals(task_table(again, again.started))
    assert phases["disk"] == pytest.approx(7.0) and phases["stall"] == 0.0


def test_disk_time_of_a_run_without_meters_follows_the_spilled_bytes(
    store: Store, run: SyntheticRun
) -> None:
    run.task(0.1, 0.2, disk_write=0.5)
    quiet = run.end(2.0)
    assert phase_totals(task_table(quiet, quiet.started))["disk"] == 0.0
    spilled = workers(SyntheticRun(store), 0.0).task(0.1, 0.2, disk_write=0.5)
    spilled.metrics(0.5, None, memory_spilled=200.0 * MiB)
    again = spilled.end(2.0)
    assert phase_totals(task_table(again, again.started))["disk"] == 0.5


# -- who reads --------------------------------------------------------------------


def test_the_cli_and_the_kernel_raise_the_same_flags(
    store: Store, run: SyntheticRun, store_path: Path
) -> None:
    run.series([0.5 * i for i in range(12)], A, memory_unmanaged=720.0)
    recorded = run.end(6.0, settings(spill=0.7))
    # Here distributed is imported and configured otherwise; the CLI's process
    # has its defaults: both judge with the run's own thresholds.
    with dask.config.set({"distributed.worker.memory.spill": 0.9}):
        here = [kind for kind, _ in flags(recorded)]
    shown = subprocess.run(
        [Path(sys.executable).with_name("dask-observe"), "--store", str(store.path),
         "flags", str(recorded.id)],
        capture_output=True, text=True, check=True,
        env={**os.environ, "DASK_DISTRIBUTED__WORKER__MEMORY__SPILL": "0.6"},
    )  # fmt: skip
    assert here == ["unmanaged-memory"]
    assert shown.stdout.count("unmanaged-memory") == 1, shown.stdout
    assert "spilled" not in shown.stdout


def test_a_recorded_run_keeps_the_settings_it_ran_with(
    client: Client, store_path: Path
) -> None:
    with (
        dask.config.set({"observe.flags.tiny-tasks.min-count": 5}),
        dask_observe.record("settings", client=client) as recorded,
    ):
        client.submit(abs, -1).result()
    found = recorded.settings()
    assert found["source"] == "workers"
    # The LocalCluster's workers: distributed's defaults, as they reported them.
    assert found["memory"] == {"target": 0.6, "spill": 0.7, "pause": 0.8,
                               "terminate": 0.95}  # fmt: skip
    assert found["flags"]["tiny-tasks"]["min-count"] == 5
    assert json.loads(json.dumps(found)) == found


@pytest.mark.parametrize(
    ("address", "host"),
    [
        ("tcp://10.0.0.5:40331", "10.0.0.5"),
        ("tls://[::1]:8786", "::1"),
        ("inproc://10.0.0.5/812/3", "10.0.0.5"),  # a threads-only LocalCluster
        ("ucx://node-3:1234", "node-3"),
        (None, "the scheduler's host"),
    ],
)
def test_samples_and_stalls_are_matched_by_the_host_of_their_address(
    address: str | None, host: str
) -> None:
    from dask_observe.diagnose.host import address_host

    assert address_host(address) == host


def test_bytes_a_run_before_spilled_are_not_this_runs(store: Store) -> None:
    """A hang run carried a ``spilling 320 MiB`` flag: the run before had
    spilled them, and its client still held the data. The gauge stood at
    320 MiB from this run's first sample to its last."""
    spills = workers(SyntheticRun(store, "spills"), 0.0).tasks(4, 0.5)
    spills.series((0.5,), A, memory_spilled=0.0).series(
        (0.5,), None, memory_spilled=0.0
    )
    spills.series((1.5,), A, memory_spilled=320.0 * MiB)
    spills.series((1.5,), None, memory_spilled=320.0 * MiB)
    assert [kind for kind, _ in flags(spills.end(2.0))] == ["spilling"]
    held = workers(SyntheticRun(store, "held"), 0.0).tasks(4, 0.5)
    held.series((0.5, 1.5, 2.5), A, memory_spilled=320.0 * MiB)
    held.series((0.5, 1.5, 2.5), None, memory_spilled=320.0 * MiB)
    quiet = held.end(3.0)
    assert flags(quiet) == []
    assert quiet.report().data.peak_spilled == 0
    compared = dask_observe.compare(quiet, quiet).table.set_index("figure")
    assert compared.loc["spilled (peak)", "a"] == 0
    # What a run adds on top is its own.
    more = workers(SyntheticRun(store, "more"), 0.0).tasks(4, 0.5)
    more.series((0.5,), A, memory_spilled=320.0 * MiB)
    more.series((1.5, 2.5), A, memory_spilled=420.0 * MiB)
    flag = more.end(3.0).flags().iloc[0]
    assert flag["kind"] == "spilling" and "100.00 MiB" in flag["message"]

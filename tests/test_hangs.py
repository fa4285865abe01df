"""A run that stops moving says why, while it records and after it is stopped.

Each hang is made on a real LocalCluster, its cause known by construction
(TOOLCHAIN: a task waiting on an Event, a leak past the pause threshold, a
resource no worker has, a task waiting on one it submitted from the only
thread, a cluster scaled to zero). The block waits until the live judgement
names the stall, then is interrupted as a cell's stop button does (a
KeyboardInterrupt inside it). Thresholds are lowered from 10 s / 30 s so that
each test takes seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dask.config
import nbformat
import psutil
import pytest
from distributed import Client, get_client, secede
from nbclient import NotebookClient

import dask_observe
from dask_observe.api import Run
from tests.conftest import dask_observe_cli, wait_until
from tests.tasks import connect, hold_memory, leak, sleep_in_c, use

FAST = {
    "observe.flags.hung-task.after": "1s",
    "observe.flags.no-progress.after": "2s",
}

#: Released when each test ends, so an in-process worker's thread is freed.
RELEASE = threading.Event()


@pytest.fixture(autouse=True)
def fast_thresholds(make_client: Callable[..., Client]) -> Iterator[None]:
    # Asks for make_client so as to end before it: the stuck task is released
    # before its cluster closes (which would wait 30 s for it).
    RELEASE.clear()
    with dask.config.set(FAST):
        yield
    RELEASE.set()


def inc(x: int) -> int:
    return x + 1


def wait_for_release() -> None:
    RELEASE.wait()


def waits_on_its_own_task() -> int:
    return int(get_client().submit(inc, 1, pure=False).result())


def seceded_then_waits() -> None:
    secede()  # as worker_client() does: the worker's thread is free again
    RELEASE.wait()


def kinds(run: Run) -> set[str]:
    return set(run.flags()["kind"])


def live_message(run: Run, kind: str) -> str:
    """The message of the run's flag of that kind, as judged now ("" if none)."""
    flags = run.flags()
    return "\n".join(flags[flags["kind"] == kind]["message"])


def stopped_when(run: Run, condition: Callable[[Run], bool], what: str) -> None:
    """Wait for the live run to show ``condition``, then stop it as the stop
    button does."""
    wait_until(lambda: condition(run), what, timeout=30)
    raise KeyboardInterrupt


def stuck_until(
    client: Client, name: str, function: Callable[[], Any], kind: str
) -> tuple[Run, Any]:
    """Record ``function``, submitted alone, until the live run raises
    ``kind``; then stop it as the stop button does. The run, the future."""
    with (
        pytest.raises(KeyboardInterrupt),
        dask_observe.record(name, client=client) as run,
    ):
        stuck = client.submit(function, pure=False)
        stopped_when(run, lambda r: kind in kinds(r), f"a live {kind}")
    return run, stuck


def flag(run: Run, kind: str) -> dict[str, Any]:
    flags = run.flags()
    found = flags[flags["kind"] == kind]
    assert len(found) >= 1, list(flags["kind"])
    return dict(found.iloc[0])


def test_a_task_stuck_in_its_own_code_is_named_with_where_it_waits(
    make_client: Callable[..., Client], store_path: Any
) -> None:
    client = make_client(n_workers=1, threads_per_worker=2, processes=False)
    with (
        pytest.raises(KeyboardInterrupt),
        dask_observe.record("stuck", client=client) as run,
    ):
        assert client.gather(client.map(inc, range(40))) == list(range(1, 41))
        stuck = client.submit(wait_for_release, pure=False)
        stopped_when(run, lambda r: "no-progress" in kinds(r), "a live no-progress")
    assert run.status == "failed"
    hung = flag(run, "hung-task")
    assert stuck.key in hung["message"]
    assert "wait_for_release at " in hung["message"]
    assert "test_hangs.py" in hung["message"] and "RELEASE.wait()" in hung["message"]
    stalled = flag(run, "no-progress")
    assert "stuck in their own code" in stalled["message"]
    assert "wait_for_release" in stalled["message"]
    # Its stack, sampled on the worker, innermost last.
    stacks = run.stacks()
    own = stacks[stacks["key"] == stuck.key]
    assert len(own) >= 1
    assert own["frames"].iloc[-1].rstrip().endswith("waiter.acquire()")
    assert "RELEASE.wait()" in own["frames"].iloc[-1]
    # Folded: the worker thread's machinery (threading, distributed: a dozen
    # frames) is one line, so the user's frame comes first, then where it
    # waits.
    folded = own["folded"].iloc[-1].splitlines()
    assert re.fullmatch(r"  \.\.\. \d+ library frames \(threading.*distributed.*\)",
                        folded[0]), folded  # fmt: skip
    assert "in wait_for_release" in folded[1] and "RELEASE.wait()" in folded[2]
    assert folded[-1].strip() == "waiter.acquire()"
    assert len(folded) < len(own["frames"].iloc[-1].splitlines())
    # The command line shows it folded, or whole with --full.
    said = dask_observe_cli(store_path, "stacks", "last").stdout
    assert "library frames (threading" in said and "in wait_for_release" in said
    full = dask_observe_cli(store_path, "stacks", "last", "--full").stdout
    assert "library frames" not in full and "in _bootstrap_inner" in full
    # The report shows where it stood when it stopped: the user's frame in
    # bold after the fold, every frame a click away.
    html = run.report().html
    assert "Where it stood when it stopped" in html
    first_own = (
        r"library frames \(threading[^<]*\n<b>  File &quot;[^<]*test_hangs.py&quot;"
        r", line \d+, in wait_for_release"
    )
    assert re.search(first_own, html)
    assert "every frame (" in html and "in _bootstrap_inner" in html


def test_a_task_stuck_since_its_workers_last_heartbeat_is_timed_to_now(
    make_client: Callable[..., Client],
) -> None:
    # The scheduler knows how long a task has run from the worker's last
    # heartbeat. A process paused between two (py-spy reading it, a loaded
    # host) once read a task stuck for 5 s as run for 0.86 s, below
    # hung-task.after, so the hang went unnamed. The truth here: heartbeats
    # stop once the scheduler has seen the task executing; it runs on.
    client = make_client(n_workers=1, threads_per_worker=1, processes=False)
    cluster: Any = client.cluster
    scheduler, worker = cluster.scheduler, next(iter(cluster.workers.values()))

    def seen_executing() -> bool:
        return any(ws.executing for ws in scheduler.workers.values())

    with (
        pytest.raises(KeyboardInterrupt),
        dask_observe.record("quiet", client=client) as run,
    ):
        stuck = client.submit(wait_for_release, pure=False)
        wait_until(seen_executing, "a heartbeat with the task executing")
        cluster.loop.add_callback(worker.periodic_callbacks["heartbeat"].stop)
        stopped_when(
            run,
            lambda r: "stuck in their own code" in live_message(r, "no-progress"),
            "the stuck task named while no heartbeat comes",
        )
    said = flag(run, "no-progress")["message"]
    assert stuck.key in said and "wait_for_release" in said
    ran = re.search(r"had run ([\d.]+) s", said)
    assert ran and float(ran[1]) >= 1.0, said


def test_a_task_its_client_let_go_of_still_counts_where_the_run_stopped(
    make_client: Callable[..., Client],
) -> None:
    # A user's `client.submit(f).result(timeout=...)` holds its future only
    # in a temporary: the timeout releases the task, and that release can
    # reach the scheduler before the run's end (CI, the demo's hang: "0
    # tasks", nothing of where it stood). Its worker runs it on regardless.
    # The truth here: one task, still running in its worker's thread.
    client = make_client(n_workers=1, threads_per_worker=1, processes=False)
    scheduler = client.cluster.scheduler  # type: ignore[union-attr]
    with (
        pytest.raises(TimeoutError),
        dask_observe.record("let go", client=client) as run,
    ):
        submitted = time.monotonic()
        future = client.submit(wait_for_release, pure=False)
        key = future.key
        wait_until(  # (the scheduler learns it from a heartbeat: late)
            lambda: any(ws.executing for ws in scheduler.workers.values()),
            "the task executing",
        )
        seen = time.monotonic()
        time.sleep(0.5)
        del future  # as the timeout's unwinding drops it
        wait_until(lambda: key not in scheduler.tasks, "the scheduler forgot it")
        ran_at_least = time.monotonic() - seen
        raise TimeoutError
    summary = run.summary()
    # (The run's end, which asks the worker, may finish after the block has:
    # the summary waits for it.)
    took = time.monotonic() - submitted
    assert (summary["n_tasks"], summary["n_running"]) == (1, 1), summary
    assert run.status == "failed"
    html = run.report().html
    assert "Where it stood when it stopped" in html
    # Timed by its worker: the scheduler no longer knows it.
    assert re.search(rf"{re.escape(str(key))} \(its client let go; [\d.]+ m?s\)", html)
    # Its time, as its worker told it, against the test's own clock: it ran
    # from before it was seen executing, and after it was submitted, until
    # the run was stopped.
    (stopped,) = run.events("run-stopped")["data"]
    (told,) = [t for w in stopped["workers"] for t in w["processing"]]
    assert (told["key"], told["let_go"]) == (str(key), True)
    # (Told to the ms, on the wall clock: a few ms either way.)
    assert ran_at_least - 0.01 <= told["elapsed"] <= took + 0.01, (told, took)
    assert "in wait_for_release" in html  # its stack, sampled as it stopped
    stacks = run.stacks()
    assert key in set(stacks["key"])


def test_a_task_let_go_of_while_its_run_ends_is_counted_once(
    make_client: Callable[..., Client],
) -> None:
    """The run's end counts the tasks processing, then asks the workers which
    of those let go of they still run; a release that reached the scheduler
    in between (the demo's hung task, once in the suite) was counted both
    ways: "2 tasks, 2 still running". Here the release reaches it exactly
    then: the scheduler is told it (as the client's message tells it) as the
    end asks the workers. The truth: one task, still running."""
    from dask_observe.recording.link import SCHEDULER_PLUGIN

    client = make_client(n_workers=1, threads_per_worker=1, processes=False)
    scheduler = client.cluster.scheduler  # type: ignore[union-attr]
    released: list[str] = []

    async def release_then_ask(name: str, addresses: list[str]) -> dict[str, Any]:
        if not released:
            released.append(name)
            scheduler.client_releases_keys(
                keys=[key], client=client.id, stimulus_id="test-release"
            )
        answers: dict[str, Any] = await asked(name, addresses)
        return answers

    with (
        pytest.raises(TimeoutError),
        dask_observe.record("released as it ends", client=client) as run,
    ):
        future = client.submit(wait_for_release, pure=False)
        key = future.key
        wait_until(
            lambda: any(ws.executing for ws in scheduler.workers.values()),
            "the task executing",
        )
        # (Installed as the run began.)
        plugin = scheduler.plugins[SCHEDULER_PLUGIN]
        asked = plugin.runs._answers
        plugin.runs._answers = release_then_ask
        raise TimeoutError
    summary = run.summary()
    assert released, "the end did not ask the workers"
    assert key not in scheduler.tasks or scheduler.tasks[key].state != "processing"
    assert (summary["n_tasks"], summary["n_running"]) == (1, 1), summary
    (stopped,) = run.events("run-stopped")["data"]
    told = [t["key"] for w in stopped["workers"] for t in w["processing"]]
    assert told == [str(key)], stopped
    del future


def test_a_task_that_seceded_and_hangs_is_named_with_where_it_waits(
    make_client: Callable[..., Client],
) -> None:
    # A task that left the worker's threads (secede, worker_client) runs on:
    # its hang said "waiting in code not sampled", its stack never taken.
    # The truth here: it waits in seceded_then_waits, on RELEASE.
    client = make_client(n_workers=1, threads_per_worker=1, processes=False)
    run, stuck = stuck_until(client, "seceded", seceded_then_waits, "hung-task")
    said = flag(run, "hung-task")["message"]
    assert stuck.key in said and "seceded_then_waits at " in said, said
    stacks = run.stacks()
    own = stacks[stacks["key"] == stuck.key]
    assert len(own) >= 1 and "RELEASE.wait()" in own["frames"].iloc[-1]


def test_a_block_that_caught_its_own_timeout_says_its_task_runs_on(
    make_client: Callable[..., Client],
) -> None:
    # A block that gives up on a task (a timeout it catches) and finishes: the
    # task runs on in its worker's thread. The truth here: the run finished,
    # with one task, still running as it ended.
    client = make_client(n_workers=1, threads_per_worker=1, processes=False)
    scheduler = client.cluster.scheduler  # type: ignore[union-attr]
    with dask_observe.record("caught", client=client) as run:
        future = client.submit(wait_for_release, pure=False)
        key = future.key
        # As a user's block catches it (pytest.raises would keep it alive).
        with contextlib.suppress(TimeoutError):
            future.result(timeout=0.5)
        # Once the client's loop has cancelled the wait, nothing holds it but
        # the timeout's traceback, a reference cycle that the next garbage
        # collection frees (seconds later, at random): collected here, its
        # release comes before the run ends.
        del future

        def forgotten() -> bool:
            gc.collect()
            return key not in scheduler.tasks

        wait_until(forgotten, "the scheduler forgot it")
    summary = run.summary()
    assert run.status == "finished"
    assert (summary["n_tasks"], summary["n_running"]) == (1, 1), summary
    # Nothing was stopped: no picture of where it stood.
    assert "Where it stood when it stopped" not in run.report().html


def test_a_worker_running_a_task_let_go_of_is_described_among_many(
    make_client: Callable[..., Client],
) -> None:
    # Where a stopped run stood names 20 workers at most, the busiest first:
    # one whose only task the client let go of (nothing processing, as the
    # scheduler sees it) must not be left out among 22 idle ones.
    from dask_observe.capture.progress import MAX_WORKERS, describe

    client = make_client(n_workers=MAX_WORKERS + 2, threads_per_worker=1,
                         processes=False)  # fmt: skip
    scheduler = client.cluster.scheduler  # type: ignore[union-attr]
    last = sorted(scheduler.workers)[-1]
    task = {"key": "x-1", "prefix": "x", "elapsed": None, "typical": None,
            "let_go": True}  # fmt: skip
    described = describe(scheduler, "span", time.time(), {last: [task]})
    assert len(described["workers"]) == MAX_WORKERS
    first = described["workers"][0]
    assert (first["worker"], first["processing"]) == (last, [task])


def test_the_tasks_let_go_of_are_kept_to_a_bound_newest_first() -> None:
    # A client that cancels a graph of a million tasks must not grow the
    # scheduler's memory: only a worker's threads' worth can still run.
    from dask_observe.capture.letgo import MAX_LET_GO, LetGo

    let_go = LetGo()
    let_go.watch("span")
    for i in range(MAX_LET_GO + 5):
        let_go.released(["span", "unwatched"], ("x", i), "x")
    kept = let_go.unwatch("span")
    assert len(kept) == MAX_LET_GO
    assert "('x', 4)" not in kept and kept["('x', 5)"] == ("x", ("x", 5))
    assert not let_go.any("unwatched")


def test_a_worker_paused_by_a_leak_is_why_nothing_runs(
    make_client: Callable[..., Client], store_path: Any
) -> None:
    # The nanny must not kill it: the leak sits between pause and terminate.
    with dask.config.set({"distributed.worker.memory.terminate": False}):
        client = make_client(
            n_workers=1, threads_per_worker=1, processes=True, memory_limit="700MiB"
        )
    with (
        pytest.raises(KeyboardInterrupt),
        dask_observe.record("paused", client=client) as run,
    ):
        # The worker process imports the task's module as it unpickles the
        # task: this one's (nbclient, traitlets: 405 modules) stalled its loop
        # 10 s under load, a no-progress of its own before the pause. So the
        # leak comes from a module that imports nothing, and the wait is for
        # the stall the pause makes.
        client.submit(leak, 560 * 2**20).result()
        waiting = client.map(abs, range(-20, 0))
        stopped_when(
            run,
            lambda r: "paused for memory" in live_message(r, "no-progress"),
            "a live no-progress naming the pause",
        )
    message = flag(run, "no-progress")["message"]
    assert "paused for memory" in message
    assert next(iter(client.nthreads())) in message
    assert "20 task(s) waiting" in message, message
    assert len(waiting) == 20


def test_a_long_tasks_memory_goes_back_as_it_returns(
    make_client: Callable[..., Client], store_path: Any
) -> None:
    """A task running past hung-task.after has its stack sampled, and the
    sampler read every thread's frame into a dict that held its own: a
    cycle only a full collection frees. The task's frame was kept in it,
    and its locals with it: 770 MiB stayed after it returned, and the next
    runs on that worker found memory-pressure, spilling and unmanaged
    memory that were the capture's. The truth, as the OS counts the
    worker's memory: it falls back as the task returns."""
    client = make_client(
        n_workers=1, threads_per_worker=1, processes=True, memory_limit="1GiB"
    )

    def rss() -> int:
        (found,) = client.run(lambda: psutil.Process().memory_info().rss).values()
        return int(found)

    before = rss()
    with dask_observe.record("long", client=client) as run:
        # 40% of 1 GiB for 6 s: sampled from 1 s (hung-task.after) on. Read
        # while the worker idles in its run, every half second, as a memory
        # chart would: questions asked faster (wait_until's 50 ms) made the
        # worker collect its garbage, and hid the cycle in 2-3 s; its run's
        # end does too.
        held = client.submit(hold_memory, 0.4, 6.0, pure=False).result()
        seen = []
        for _ in range(6):
            seen.append(rss())
            if seen[-1] < before + 100 * 2**20:
                break
            time.sleep(0.5)
    assert seen[-1] < before + 100 * 2**20, (before, seen)
    assert held >= 300 * 2**20
    assert len(run.events("task-stack")) >= 1  # its stack was sampled


def test_a_resource_no_worker_has_is_named(
    make_client: Callable[..., Client], store_path: Any
) -> None:
    client = make_client(n_workers=1, threads_per_worker=1, processes=False)
    with (
        pytest.raises(KeyboardInterrupt),
        dask_observe.record("gpu", client=client) as run,
    ):
        needs_gpu = client.submit(inc, 1, resources={"GPU": 1})
        stopped_when(run, lambda r: "no-progress" in kinds(r), "a live no-progress")
    found = flag(run, "no-progress")
    assert "ask for what no worker has: GPU=1" in found["message"]
    assert "offer no resources" in found["message"]
    assert needs_gpu.key in found["evidence"][0]["text"]
    assert "--resources" in found["advice"]


def test_a_task_waiting_on_a_task_it_submitted_from_the_only_thread_is_told_to_secede(
    make_client: Callable[..., Client], store_path: Any
) -> None:
    client = make_client(n_workers=1, threads_per_worker=1, processes=False)
    run, outer = stuck_until(client, "deadlock", waits_on_its_own_task, "no-progress")
    found = flag(run, "no-progress")
    assert f"task {outer.key}" in found["message"]
    assert "waits for tasks it submitted" in found["message"]
    assert "all 1 thread(s) of the cluster are busy" in found["message"]
    assert "secede()" in found["advice"] and "worker_client()" in found["advice"]
    assert "secede()" in flag(run, "hung-task")["advice"]


def test_a_cluster_scaled_to_zero_with_work_queued_says_there_are_no_workers(
    make_client: Callable[..., Client], store_path: Any
) -> None:
    client = make_client(n_workers=1, threads_per_worker=1, processes=False)
    with (
        pytest.raises(KeyboardInterrupt),
        dask_observe.record("no-workers", client=client) as run,
    ):
        assert client.submit(inc, 1).result() == 2
        assert client.cluster is not None
        client.cluster.scale(0)
        wait_until(lambda: not client.nthreads(), "no workers")
        queued = client.map(inc, range(5, 10))
        stopped_when(run, lambda r: "no-progress" in kinds(r), "a live no-progress")
    found = flag(run, "no-progress")
    assert "there are no workers: 5 task(s) wait" in found["message"]
    assert "cluster.scale" in found["advice"]
    assert len(queued) == 5


def test_data_that_cannot_be_pickled_is_named_as_why_nothing_moves(
    make_client: Callable[..., Client], store_path: Any
) -> None:
    # A task returns an object holding a lock; the task that needs it runs on
    # another worker process. distributed logs "Could not serialize object of
    # type Connection" and the second task waits for good: the stall's cause
    # is distributed's own diagnosis, said as such.
    client = make_client(n_workers=2, threads_per_worker=1)
    first, second = list(client.nthreads())
    with (
        pytest.raises(KeyboardInterrupt),
        dask_observe.record("unpicklable", client=client) as run,
    ):
        held = client.submit(connect, key="connect", workers=[first])
        used = client.submit(use, held, key="use", workers=[second])
        stopped_when(run, lambda r: "no-progress" in kinds(r), "a live no-progress")
    found = flag(run, "no-progress")
    assert "could not serialize an object of type Connection" in found["message"]
    assert found["evidence"][0]["text"] == (
        "Could not serialize object of type Connection"
    )
    assert "pickles" in found["advice"]
    assert used.status == "pending"


def test_a_clean_run_and_a_legitimately_long_task_raise_neither_flag(
    make_client: Callable[..., Client], store_path: Any
) -> None:
    client = make_client(n_workers=1, threads_per_worker=2, processes=False)
    with dask_observe.record("clean", client=client) as clean:
        assert sum(client.gather(client.map(inc, range(50)))) == sum(range(1, 51))
    with dask_observe.record("long", client=client) as long:
        short = client.map(inc, range(20))
        # 6 s: past hung-task.after (1 s) and no-progress.after (2 s), but it
        # finishes: the stall was real while it lasted, and ended.
        slow = client.submit(time.sleep, 6, pure=False)
        stalled_live = []
        while not slow.done():
            stalled_live.append("no-progress" in kinds(long))
            time.sleep(0.3)
        client.gather(short)
    assert any(stalled_live)  # the live judgement saw it stand still...
    for run in (clean, long):  # ...and the run's verdict holds no hang
        assert not kinds(run) & {"hung-task", "no-progress"}, run.name
    assert len(long.stacks()) >= 1  # sampled while it ran past 1 s


class InterruptingClient(NotebookClient):
    """nbclient as is, but it interrupts the kernel, as the stop button does,
    once the live display under the cell says that nothing moves. It keeps
    what the display showed."""

    def __init__(self, nb: nbformat.NotebookNode, **kwargs: Any) -> None:
        super().__init__(nb, **kwargs)
        self.shown: list[str] = []
        self.interrupted: list[asyncio.Task[Any]] = []

    def process_message(self, msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
        if msg["msg_type"] == "comm_msg":
            value = msg["content"]["data"].get("state", {}).get("value")
            if isinstance(value, str) and "no-progress" in value:
                if not self.interrupted:  # nbclient's kernel manager is async
                    assert self.km is not None
                    interrupt: Any = self.km.interrupt_kernel()
                    self.interrupted.append(asyncio.ensure_future(interrupt))
                self.shown.append(value)
        return super().process_message(msg, cell, cell_index)


def test_a_hung_dask_record_cell_says_why_before_and_after_the_stop_button(
    store_path: Any, tmp_path: Path
) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "%load_ext dask_observe\n"
            "import dask\n"
            f"dask.config.set({FAST!r})\n"
            "from distributed import Client, LocalCluster\n"
            "client = Client(LocalCluster(n_workers=1, threads_per_worker=1,"
            " processes=False, dashboard_address=':0'))"
        ),
        nbformat.v4.new_code_cell(
            "%%dask_record hang\n"
            "import threading\n"
            "def hang():\n"
            "    threading.Event().wait()\n"
            "client.submit(hang, pure=False).result()"
        ),
    ]
    executor = InterruptingClient(
        nb, kernel_name="python3", timeout=120, allow_errors=True,
        resources={"metadata": {"path": str(tmp_path)}},
    )  # fmt: skip
    executor.execute()

    # While the cell ran, the display said that nothing moved, and why.
    said = next(v for v in executor.shown if "no-progress" in v)
    assert "No progress for" in said and "stuck in their own code" in said
    outputs = nb.cells[1].outputs
    assert any(o.get("ename") == "KeyboardInterrupt" for o in outputs)
    report = next(
        o.data["text/html"] for o in outputs if "text/html" in o.get("data", {})
    )
    assert "Where it stood when it stopped" in report
    # A function defined in a notebook travels by value: its frame has the
    # cell's line number (as the user counts it, the magic's line first) and
    # no source line.
    assert "hung-task" in report and "waits in hang at &lt;dynamic-code&gt;:4" in report
    assert "threading.py" in report  # the stack, escaped, in the report
    run = dask_observe.open_store().run("last")
    assert run.status == "failed"
    assert {"hung-task", "no-progress"} <= kinds(run)


def test_the_stack_sampler_sees_every_thread_and_leaves_the_collector_be() -> None:
    # Where sys._current_frames can deadlock with a collection (CPython
    # gh-106883, before 3.11.9), the sampler holds the collector off for the
    # call: it must give the same frames and put the collector back.
    import gc

    from dask_observe.capture.stacks import current_frames

    waiting = threading.Event()
    other = threading.Thread(target=waiting.wait, name="sampled")
    other.start()
    try:
        assert gc.isenabled()
        found = current_frames()
        assert gc.isenabled()
        assert {threading.get_ident(), other.ident} <= set(found)
        gc.disable()
        try:
            assert other.ident in current_frames()
            assert not gc.isenabled()  # left off, as it was
        finally:
            gc.enable()
    finally:
        waiting.set()
        other.join()


def test_the_collector_stays_off_until_the_last_thread_inside_leaves() -> None:
    # Workers' profilers and the stack sampler read frames from several
    # threads at once: one leaving must not turn the collector back on under
    # another still inside (each used to put back what it found).
    import gc

    from dask_observe.capture.stacks import collector_held

    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with collector_held:
            inside.set()
            leave.wait()

    first = threading.Thread(target=hold, name="first inside")
    first.start()
    inside.wait()
    try:
        with collector_held:
            leave.set()
            first.join()  # the first one has left
            assert not gc.isenabled()
    finally:
        leave.set()
        first.join()
    assert gc.isenabled()


def test_a_stack_sampled_on_the_loop_reads_no_source_file_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker samples long tasks' stacks on its event loop. Reading a source
    # file there (linecache reads it whole at the first line asked) once held
    # a loaded worker's loop 1.24 s, which was then flagged as a blocked loop
    # the user's code had not caused. The file is read on another thread; the
    # stack as sampled again has its lines.
    import linecache

    from dask_observe.capture.stacks import StackSampler

    module = tmp_path / "stuck_here.py"
    module.write_text("def stuck(event):\n    event.wait()  # stuck here\n")
    namespace: dict[str, Any] = {}
    exec(compile(module.read_text(), str(module), "exec"), namespace)
    read_on: list[str] = []
    updatecache = linecache.updatecache

    def noted(filename: str, *args: Any) -> list[str]:
        if filename == str(module):
            read_on.append(threading.current_thread().name)
        return updatecache(filename, *args)

    monkeypatch.setattr(linecache, "updatecache", noted)
    release = threading.Event()
    task = threading.Thread(target=namespace["stuck"], args=(release,))
    task.start()
    try:
        sampler, shipped = StackSampler(after_s=0.0), list[dict[str, Any]]()
        assert task.ident is not None
        threads, running = {task.ident: "stuck-1"}, {"stuck-1": 0.0}
        sampler.sample(1.0, running, threads, shipped.append)
        assert read_on == []  # not on this thread, the loop's
        wait_until(lambda: read_on, "the file read by the reader thread")
        assert read_on == ["dask-observe-source-lines"]
        sampler.sample(3.0, running, threads, shipped.append)  # its 2nd sample
    finally:
        release.set()
        task.join()
    lines = [[f[3] for f in s["frames"] if f[0] == str(module)] for s in shipped]
    assert lines == [[""], ["event.wait()  # stuck here"]]
    assert [s["count"] for s in shipped] == [1, 2]  # one stack, seen twice


def test_a_forked_process_reads_source_lines_with_a_reader_of_its_own(
    tmp_path: Path,
) -> None:
    # A child forked after the reader started has none of its thread (and
    # maybe its lock held): it starts over, and its stacks get their lines.
    module = tmp_path / "forked_here.py"
    module.write_text("first = 1\n")
    script = f"""
import os, time
from dask_observe.capture.sourcelines import source_lines
source_lines.line("/nonexistent/x.py", 1)  # the parent's reader runs
time.sleep(0.1)
pid = os.fork()
if pid == 0:
    source_lines.line({str(module)!r}, 1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if source_lines.line({str(module)!r}, 1) == "first = 1":
            os._exit(0)
        time.sleep(0.05)
    os._exit(3)
print(os.waitpid(pid, 0)[1] >> 8)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "0", done.stdout + done.stderr


def test_a_task_waiting_in_compiled_code_has_the_native_frames_beneath(
    make_client: Callable[..., Client], store_path: Any
) -> None:
    """Python's stack of a task stuck in a C call ends at the call; py-spy
    (installed beside the worker's Python, as the test extra has it) reads
    the frames beneath: libc's sleep."""
    client = make_client(n_workers=1, threads_per_worker=1, processes=True)
    with (
        pytest.raises(TimeoutError),
        dask_observe.record("in C", client=client) as run,
    ):  # stopped by the user's timeout while it waits in C
        client.submit(sleep_in_c, 5, key="in-c").result(timeout=3)
    stacks = run.stacks()
    own = stacks[stacks["key"] == "in-c"]
    assert len(own) >= 1, stacks
    assert "in sleep_in_c" in own["frames"].iloc[0]
    native = str(own["native"].iloc[0]).splitlines()
    assert any(
        re.match(r"(clock_nanosleep|nanosleep|sleep) \(libc", n) for n in native
    ), native
    said = dask_observe_cli(store_path, "stacks", "last").stdout
    assert "in compiled code, beneath:" in said and "(libc" in said
    # The hung-task flag names the call and the compiled frame it waits in.
    hung = flag(run, "hung-task")
    assert "it waits in sleep_in_c at " in hung["message"]
    assert re.search(r", in compiled code at \S*sleep \(libc", hung["message"]), hung
    # And so does the run's no-progress, which the stop made.
    stalled = flag(run, "no-progress")
    assert "waiting in sleep_in_c at " in stalled["message"]
    assert re.search(r", in compiled code at \S*sleep \(libc", stalled["message"])
    # The report's picture of where the stopped run stood shows them too.
    html = run.report().html
    assert "in compiled code, beneath:" in html
    assert re.search(r"<pre[^>]*>[^<]*sleep \(libc", html), "no native frames"


def test_a_native_dump_that_hangs_holding_the_process_lets_it_go(
    tmp_path: Path,
) -> None:
    """py-spy stops the threads of the process it reads; one that hangs or
    dies while it holds them (py-spy#416) must not leave a worker, or the
    kernel of an in-process cluster, frozen for good: the dump gives up at
    its limit and the process runs on. The stand-in for py-spy stops the
    process it is pointed at and never ends, which the real one does only
    when it goes wrong."""
    fake = tmp_path / "py-spy"
    fake.write_text('#!/bin/sh\neval pid=\\${$#}\nkill -STOP "$pid"\nexec sleep 60\n')
    fake.chmod(0o755)
    code = (
        "import os, time\n"
        "from dask_observe.capture import pyspy\n"
        "pyspy.DUMP_TIMEOUT_S = 1.0\n"
        "start = time.monotonic()\n"
        "print(pyspy.dump(os.getpid())[1])\n"
        "print(time.monotonic() - start)\n"
    )
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    with subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True
    ) as process:
        try:
            said, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            state = psutil.Process(process.pid).status()
            process.kill()  # a stopped process still ends so
            pytest.fail(f"the process that asked for the dump is left {state}")
    reason, took = said.splitlines()
    assert reason == "py-spy did not end within 1 s"
    assert float(took) < 10  # not the stand-in's 60 s

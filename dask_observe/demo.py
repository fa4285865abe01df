"""``dask-observe demo``: a short sequence of runs on an embedded LocalCluster
that provokes the failures dask-observe explains, each recorded as a run.

1. ``demo: clean``: an array reduction and mapped tasks; no flag.
2. ``demo: memory death``: a task that outgrows its worker, killed by its
   nanny (``memory-restart``), and the scheduler gives up (``killed-worker``).
3. ``demo: spilling``: results persisted past the workers' memory target, so
   that they spill to disk (``spilling``).
4. ``demo: hang``: a task waiting for an event that never comes, stopped by a
   timeout (``hung-task``, with the line it waits on).

Workers have 400 MiB each, so that the failures come within seconds; the flags
that name a hang are judged sooner than by default (``observe.flags``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dask_observe.api import Run, Store
from dask_observe.store.outcome import status_line, tasks_text

#: Each worker's memory limit: small, so that spilling and a memory death
#: come within seconds.
MEMORY_LIMIT = "400MiB"
#: How long the hang's block waits for its task before a timeout stops it.
HANG_TIMEOUT_S = 4.0
#: The hang's flags judged after seconds rather than the default 10 s / 30 s.
HANG_FLAGS = {
    "observe.flags.hung-task.after": "2s",
    "observe.flags.no-progress.after": "3s",
}


def _slow_square(x: int) -> int:
    time.sleep(0.01)
    return x * x


def _chunk(i: int) -> bytes:
    """20 MiB of a result: persisted, they outgrow the workers' target."""
    return bytes([i % 256]) * (20 * 2**20)


def _grow(_: int) -> int:
    """Allocate, a step at a time, until the worker's nanny kills it (its
    memory monitor looks every 100 ms: a faster climb finishes first)."""
    import psutil
    from distributed import get_worker

    limit = get_worker().memory_manager.memory_limit or 2**31
    blocks = []
    while psutil.Process().memory_info().rss < 3 * limit:
        blocks.append(b"\x01" * (16 * 2**20))
        if len(blocks) % 4 == 0:  # what a task says: the report shows it
            print(f"holding {len(blocks) * 16} MiB of blocks")
        time.sleep(0.03)
    return len(blocks)


def _wait_forever(_: int) -> None:
    """A task that waits on something that never happens (a lost message),
    until a second after its block gave up on it: long enough to be the
    hang, short enough that the cluster then closes without killing the
    worker (a worker process waits for its running task as it exits: with
    15 s here, the demo's last 4 s were its nanny's wait, ending in
    "Worker process still alive after 4.0 seconds, killing")."""
    threading.Event().wait(HANG_TIMEOUT_S + 1)


def _clean(client: Any) -> None:
    import dask.array as da

    x = da.random.random((2000, 2000), chunks=(250, 250))
    (x + x.T).mean(axis=0).std().compute()
    futures = client.map(_slow_square, range(200))
    client.submit(sum, futures).result()


def _spilling(client: Any) -> None:
    from distributed import wait

    held = client.map(_chunk, range(24), pure=False)
    wait(held)
    # Each chunk read where it is held: the spilled ones come back from disk.
    client.submit(sum, client.map(len, held)).result()
    del held


def _memory_death(client: Any) -> None:
    from distributed import KilledWorker

    with contextlib.suppress(KilledWorker):  # the point: the run tells why
        client.submit(_grow, 1, pure=False).result()


def _hang(client: Any) -> None:
    """A user's timeout stops the block (and so the run) with the task still
    waiting: what was running, and where, is the run's last word."""
    client.submit(_wait_forever, 1, pure=False).result(timeout=HANG_TIMEOUT_S)


#: The demo's runs: name, what it does, the config it runs under.
STEPS: list[tuple[str, Callable[[Any], None], dict[str, Any]]] = [
    ("demo: clean", _clean, {}),
    ("demo: memory death", _memory_death, {}),
    ("demo: spilling", _spilling, {}),
    ("demo: hang", _hang, HANG_FLAGS),
]


def run_demo(store: Store, n_workers: int = 2) -> list[Run]:
    """Start a LocalCluster and record each step of the demo into ``store``."""
    import dask.config
    from distributed import Client, LocalCluster

    from dask_observe.recording.block import record

    print(
        f"Starting a LocalCluster with {n_workers} workers of {MEMORY_LIMIT} ...",
        flush=True,
    )
    runs = []
    # The scheduler reads it when it starts: a task that killed one worker is
    # KilledWorker at once (not after four deaths).
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            memory_limit=MEMORY_LIMIT,
            dashboard_address=":0",
            # distributed's lines kept off the terminal (critical ones aside):
            # the runs keep every one, and their flags say what they meant.
            silence_logs=logging.CRITICAL,
        ) as cluster,
        Client(cluster) as client,
    ):
        for name, step, config in STEPS:
            print(f"Recording {name!r} ...", flush=True)
            with (
                dask.config.set(config),
                contextlib.suppress(TimeoutError),  # the hang's, told by its run
                record(name, client=client, store=store) as run,
            ):
                step(client)
            runs.append(run)
    return runs


def print_summary(runs: list[Run], store: Store) -> None:
    print()
    for run in runs:
        summary = run.summary()
        report = run.report().save(_report_path(store, run))
        flags = run.flags()
        print(
            f"Run {run.id} {run.name!r}: {status_line(summary)}, "
            f"{tasks_text(summary)}, {summary['duration_s']:.2f} s"
        )
        if flags.empty:
            print("  no flags")
        for flag in flags.to_dict("records"):
            print(f"  {flag['severity']:<8} {flag['kind']}: {_first_sentence(flag)}")
        print(f"  report   {report}")
    print()
    print(f"Store: {store.path}")
    print("Where to look next (the commands are in .venv/bin/ in a clone):")
    last = runs[-1].id if runs else "last"
    death = next((r.id for r in runs if r.name == "demo: memory death"), last)
    pointers = (
        ("dask-observe runs", "every recorded run"),
        (f"dask-observe flags {last}", "a run's flags with their evidence and advice"),
        (f"dask-observe logs {last}", "the run's log lines"),
        (
            f"dask-observe logs {death} --filter holding",
            "what the killed task printed, kept after its worker died",
        ),
        ("jupyter lab", 'the "Dask Observe" panel in the left sidebar'),
        ("%load_ext dask_observe", "in a notebook; then %%dask_record NAME on a cell"),
    )
    # One column whatever the run's id: the id's width shifted it.
    width = max(len(command) for command, _ in pointers)
    for command, what in pointers:
        print(f"  {command:<{width}} {what}")


def _first_sentence(flag: dict[Any, Any]) -> str:
    message = str(flag["message"])
    end = message.find(". ")
    cut = message if end < 0 else message[: end + 1]
    return cut if len(cut) <= 200 else cut[:197] + "..."


def _report_path(store: Store, run: Run) -> Path:
    """Reports of demo runs go beside the store, where the user's data lives."""
    folder = store.path.parent / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"run-{run.id}.html"

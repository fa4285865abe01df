"""Workers: those that died, the tasks they took with them, and why; and
processes that ran different versions."""

from __future__ import annotations

import re

from dask_observe.analysis.changes import mismatches
from dask_observe.analysis.figures import (
    client_clock_offset,
    clock_offsets,
    killed_task_story,
)
from dask_observe.diagnose.base import (
    MAX_EVIDENCE,
    Context,
    Flag,
    evidence,
    rule,
    workers,
)
from dask_observe.diagnose.lives import WorkerLives
from dask_observe.units import format_seconds


@rule("killed-worker")
def killed_worker(ctx: Context) -> list[Flag]:
    if not ctx.any_erred:
        return []
    tasks = ctx.tasks
    killed = tasks[
        (tasks["status"] == "erred")
        & tasks["exception"].fillna("").str.contains("KilledWorker|workers died")
    ]
    flags = []
    for row in killed.to_dict("records"):
        text = str(row["exception"])
        found = re.search(
            r"The last worker that attempt\w* to run the task was (\S+?)\.?\s", text
        )
        last = found[1] if found else None
        # The worker that ran it last is the one whose death ended it; failing
        # that, any worker that died in the run (they all ran it once).
        deaths = WorkerLives.of(ctx).deaths
        died = deaths.get(last) if last else None
        if died is None and deaths:
            last, died = next(iter(deaths.items()))
        when = float(row["ended"])
        if died is not None:
            _, cause, line = died
            message = (
                f"Task {row['key']!r} failed with KilledWorker: every worker that ran "
                f"it died. The last, {last}, died because {cause}."
            )
            story = killed_task_story(ctx.run, str(row["key"]), when, ctx.fast_memory)
            if story:
                message += " " + story
            found_evidence = [evidence(died[0], last, line)]
        else:
            message = (
                f"Task {row['key']!r} failed with KilledWorker: the workers that ran "
                "it died, and the recording holds no cause."
            )
            found_evidence = []
        first_line = text.splitlines()[0] if text else ""
        found_evidence.append(evidence(when, None, first_line))
        flags.append(
            Flag(
                "killed-worker",
                "error",
                when,
                last,
                message,
                killed_advice(died[1] if died else ""),
                found_evidence,
            )
        )
    return flags


def killed_advice(cause: str) -> str:
    if "memory" in cause:
        return (
            "The task needs more memory than a worker has: give workers more memory, "
            "or make the task's input smaller (smaller chunks or partitions)."
        )
    if "signal" in cause or "exited" in cause:
        return (
            "Something outside Dask ended the worker process (the kernel's OOM "
            "killer, a job scheduler, a crash in native code): check the system log."
        )
    return "Check the network and the worker's logs around the time it vanished."


@rule("worker-lost")
def worker_lost(ctx: Context) -> list[Flag]:
    """A worker that left without being asked: not closed, retired (scale
    down, adaptive) or restarted (``client.restart()``, ``restart_workers``)."""
    lives = WorkerLives.of(ctx)
    restarted = {w for _, w, _ in lives.memory_restarts}
    flags = []
    for worker, (t, cause, line) in lives.deaths.items():
        if worker in restarted:  # memory-restart says it already
            continue
        flags.append(
            Flag(
                "worker-lost",
                "error",
                t,
                worker,
                f"Worker {worker} left the cluster during the run: {cause}.",
                killed_advice(cause),
                [evidence(t, worker, line)],
            )
        )
    return flags


@rule("version-mismatch")
def version_mismatch(ctx: Context) -> list[Flag]:
    """Processes of the run with different versions of a package they must
    agree on (dask, distributed, cloudpickle, numpy... and Python's minor
    version), as each reported them (``Run.environment``)."""
    found = mismatches(ctx.run.environment())
    if not found:
        return []
    listed = "; ".join(
        f"{name}: " + ", ".join(f"{who} {v}" for who, v in sorted(versions.items()))
        for name, versions in found
    )
    return [
        Flag(
            "version-mismatch",
            "warning",
            ctx.run.started,
            None,
            f"The client, scheduler and workers ran different versions ({listed}): "
            "data and tasks they exchange may be read differently.",
            "Install the same versions everywhere (the workers' image, the "
            "notebook's environment); client.get_versions(check=True) checks.",
            [
                evidence(ctx.run.started, None, f"{name} {versions}")
                for name, versions in found
            ],
        )
    ]


@rule("clock-offset")
def clock_offset(ctx: Context) -> list[Flag]:
    """Workers whose clocks were off the scheduler's by ``clock-offset.min``
    or more, as each measured it from its heartbeats and said with the run's
    last lines (``figures.clock_offsets``), and the recording client's, as it
    measured it when it began recording the cluster. Their lines, samples and
    events (the client's: the run's start and end) were moved onto the
    scheduler's clock; what they stamp themselves (their own log files, what
    a notebook prints) reads that far off."""
    least = ctx.seconds("clock-offset.min")
    clocks = clock_offsets(ctx.run)
    off = sorted(
        ((s, w) for w, s in clocks.items() if abs(s) >= least),
        key=lambda found: -abs(found[0]),
    )
    client = client_clock_offset(ctx.run)
    if client is not None and abs(client) < least:
        client = None
    if not off and client is None:
        return []
    t = ctx.run.started
    said: list[str] = []
    found = [evidence(t, w, f"clock offset {s:+.3f} s") for s, w in off[:MAX_EVIDENCE]]
    if off:
        # The offset is what the worker's times need to be on the scheduler's
        # clock: negative when its clock runs ahead.
        named = "; ".join(
            f"{w} {format_seconds(abs(s))} {_way(s)}" for s, w in off[:MAX_EVIDENCE]
        )
        more = f" and {len(off) - MAX_EVIDENCE} more" if len(off) > MAX_EVIDENCE else ""
        said.append(
            f"Worker clocks were off the scheduler's ({named}{more}): their lines, "
            "samples and events are shown on the scheduler's clock, moved by "
            "that much; their own log files and anything else they stamp read "
            "that far off."
        )
    if client is not None:
        said.append(
            f"The clock of the client that recorded the run was "
            f"{format_seconds(abs(client))} {_way(client, 'ahead of')} the "
            "scheduler's: the run starts and ends on the scheduler's clock, "
            "with its lines and tasks; what the notebook or script stamps by "
            "its own clock reads that far off."
        )
        found.append(evidence(t, None, f"client clock offset {client:+.3f} s"))
    return [
        Flag(
            "clock-offset",
            "info",
            t,
            workers(w for _, w in off),
            " ".join(said),
            "Keep the hosts' clocks in sync (NTP, chrony, the cloud's time "
            "service): a VM resumed from a suspend or a host without time sync "
            "drifts.",
            found,
        )
    ]


def _way(seconds: float, ahead: str = "ahead") -> str:
    """Which way a clock that needs ``seconds`` added to read the
    scheduler's is off: ``ahead`` where they are negative."""
    return ahead if seconds < 0 else "behind"

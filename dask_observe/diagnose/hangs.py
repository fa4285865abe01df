"""A run that stops moving: which task hangs and why nothing finishes.

The scheduler describes a watched run that has finished nothing for
``no-progress.after`` with work remaining (``stall`` events), and a run that
was stopped while tasks ran (``run-stopped``): what each worker runs and for
how long, paused workers, tasks no worker can run. Workers sample the stacks of
tasks running past ``hung-task.after`` (``task-stack``). These rules read the
last picture that still holds (a stall after which nothing finished, or the
stop) and put the cause in words. A stall that ended (a long task that
finished) raises nothing, so a legitimately long task is no hang.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from dask_observe.analysis.native import innermost_named
from dask_observe.capture.events import (
    Frame,
    PictureTask,
    PictureWorker,
    RunPicture,
    TaskNative,
    TaskStack,
)
from dask_observe.diagnose.base import (
    MAX_EVIDENCE,
    Context,
    Facts,
    Flag,
    evidence,
    rule,
)
from dask_observe.units import format_bytes, format_seconds

#: A frame in this file means the task waits on other tasks through
#: distributed's client (``Future.result``, ``Client.gather``...).
_CLIENT_FILES = ("distributed/client.py", "distributed\\client.py")


@dataclass(frozen=True)
class Standing:
    """Where a run stood: ``kind`` is ``stall`` or ``run-stopped``."""

    time: float
    kind: str
    picture: RunPicture

    @property
    def stopped(self) -> bool:
        return self.kind == "run-stopped"


@dataclass(frozen=True)
class Running:
    """A task that was running, with its stack if one was sampled."""

    key: str
    prefix: str
    worker: str
    elapsed: float
    typical: float | None
    frames: list[list[Any]]
    #: The compiled code's frames beneath its Python ones, innermost last
    #: (py-spy on the worker), where they were read.
    native: list[str] = field(default_factory=list)

    @property
    def waits_on_client(self) -> bool:
        return any(str(f[0]).endswith(_CLIENT_FILES) for f in self.frames)

    @property
    def where(self) -> list[Any] | None:
        """The innermost frame of the user's code (else the innermost)."""
        own = [f for f in self.frames if not f[4]] or self.frames
        return own[-1] if own else None

    def where_text(self) -> str:
        frame = self.where
        if frame is None:
            return ""
        code = f": {frame[3]}" if frame[3] else ""
        return f"{frame[2]} at {frame[0]}:{frame[1]}{code}"

    def waits_text(self) -> str:
        """Where it waits: its Python frame, then the compiled code's frame
        beneath it where that was read (py-spy on its worker)."""
        where = self.where_text()
        named = innermost_named(self.native)
        if where and named:
            return f"{where}, in compiled code at {named}"
        return where


class TaskPictures(Facts):
    """What the capture saw of a run's running tasks: where the run last stood
    (a picture the scheduler took), the stacks sampled of long tasks, and
    the compiled frames beneath them."""

    @cached_property
    def standing(self) -> Standing | None:
        """The run's last picture that still holds: the stop, or a stall
        after which none of its tasks ended."""
        ctx = self.ctx
        span = ctx.run.span_id
        found = None
        for t, kind, _, data in ctx.events():
            if kind not in ("stall", "run-stopped"):
                continue
            picture = RunPicture.from_data(data)
            if picture is not None and (span is None or picture.span == span):
                found = Standing(t, kind, picture)
        if found is not None and not found.stopped:
            ended = ctx.tasks["ended"]
            if len(ended) and float(ended.max()) > found.time:
                found = None  # it moved again: a long task, not a hang
        return found

    @cached_property
    def stacks(self) -> dict[str, list[Frame]]:
        """Each task's last sampled stack (key -> frames)."""
        return {
            said.key: said.frames
            for _, _, _, d in self.ctx.events("task-stack")
            if (said := TaskStack.from_data(d)) is not None
        }

    @cached_property
    def natives(self) -> dict[str, list[str]]:
        """Each task's native frames beneath its Python ones (key -> frames)."""
        return {
            said.key: said.native
            for _, _, _, d in self.ctx.events("task-native")
            if (said := TaskNative.from_data(d)) is not None
            and said.key is not None
            and said.native
        }


def running(ctx: Context, found: Standing) -> list[Running]:
    """The tasks processing when the picture was taken, longest first."""
    pictures = TaskPictures.of(ctx)
    stacks, found_native = pictures.stacks, pictures.natives
    tasks = []
    for worker in found.picture.workers:
        for task in worker.processing:
            if task.elapsed is None:
                continue  # assigned, not yet executing
            tasks.append(
                Running(
                    task.key,
                    task.prefix,
                    worker.worker,
                    task.elapsed,
                    task.typical,
                    stacks.get(task.key, []),
                    found_native.get(task.key, []),
                )
            )
    return sorted(tasks, key=lambda r: -r.elapsed)


def hung(ctx: Context, found: Standing) -> list[Running]:
    """Running tasks past ``hung-task.after`` and ``factor`` times their
    prefix's typical duration."""
    after = ctx.seconds("hung-task.after")
    factor = ctx.number("hung-task.factor")
    return [
        r
        for r in running(ctx, found)
        if r.elapsed >= max(after, factor * (r.typical or 0.0))
    ]


def _stack_evidence(found: Standing, task: Running) -> list[dict[str, Any]]:
    """The stack from the innermost frame of the user's code inwards (what
    it called, down to where the thread waits), at most five frames."""
    own = [i for i, f in enumerate(task.frames) if not f[4]]
    frames = task.frames[own[-1] if own else -5 :][:5]
    said = [
        evidence(
            found.time,
            task.worker,
            f"{f[2]} at {f[0]}:{f[1]}" + (f": {f[3]}" if f[3] else ""),
        )
        for f in frames
    ]
    # Then where it waits in compiled code: the innermost native frames.
    return said + [
        evidence(found.time, task.worker, f"in compiled code: {line}")
        for line in task.native[-3:]
    ]


SECEDE_ADVICE = (
    "Call distributed.secede() before waiting on tasks from inside a task (or "
    "submit them with distributed.worker_client()), so the thread is free to "
    "run them."
)
HUNG_ADVICE = (
    "Look at where it waits (run.stacks()): give that call a timeout, or check "
    "what it waits for (a lock, a queue, a remote service)."
)


@rule("hung-task")
def hung_task(ctx: Context) -> list[Flag]:
    """A task running far beyond its peers when the run stopped moving or was
    stopped: its function, worker, how long, and where it waits."""
    found = TaskPictures.of(ctx).standing
    if found is None:
        return []
    flags = []
    for task in hung(ctx, found):
        peers = (
            f", far beyond its peers (typically {format_seconds(task.typical)})"
            if task.typical
            else ""
        )
        where = task.where_text()
        if task.waits_on_client:
            why = (
                f"; it waits, from inside its worker thread, for tasks it "
                f"submitted ({where})"
            )
        else:
            why = f"; it waits in {task.waits_text()}" if where else ""
        flags.append(
            Flag(
                "hung-task",
                "error",
                found.time,
                task.worker,
                f"Task {task.key} ({task.prefix}) had run "
                f"{format_seconds(task.elapsed)} on {task.worker}{peers}{why}.",
                SECEDE_ADVICE if task.waits_on_client else HUNG_ADVICE,
                _stack_evidence(found, task),
            )
        )
    return flags


#: distributed's own words when data cannot be pickled to be sent (a task's
#: result moving to another worker or to the client): distributed.worker
#: logs it, and the tasks that need that data wait for it for good.
_UNSERIALIZABLE = re.compile(r"Could not serialize object of type (\S+)")

UNSERIALIZABLE_ADVICE = (
    "Return and pass only data that pickles: open connections, locks and file "
    "handles inside the task that uses them (or once a worker, in a helper), "
    "not in a task whose result moves between workers."
)


def _unserializable(ctx: Context) -> tuple[str, str, list[dict[str, Any]]] | None:
    """distributed's diagnosis, where it logged one: data it could not
    serialize, so the tasks that need it never get it."""
    said = [
        (t, worker, found)
        for t, worker, message in ctx.logs("Could not serialize object of type")
        if (found := _UNSERIALIZABLE.search(message))
    ]
    if not said:
        return None
    _, worker, found = said[0]
    where = f" on {worker}" if worker else ""
    return (
        f"distributed could not serialize an object of type {found[1]}{where} "
        f'("{found[0]}"): data a task needs could not be sent to it, so it '
        "waits for it",
        UNSERIALIZABLE_ADVICE,
        # The words themselves: a line may hold them deep in a traceback.
        [evidence(t, worker, found[0]) for t, worker, found in said],
    )


def _cause(ctx: Context, found: Standing) -> tuple[str, str, list[dict[str, Any]]]:
    """Why nothing finishes, in plain words; advice; evidence."""
    picture, t = found.picture, found.time
    waiting = picture.waiting
    workers = picture.workers
    if not picture.n_workers:
        return (
            f"there are no workers: {waiting:,} task(s) wait with none to run "
            "them (the cluster was scaled to zero, or adaptive scaling has not "
            "started any)",
            "Add workers (cluster.scale(n)), or check why adaptive scaling "
            "(cluster.adapt) does not start them.",
            [evidence(t, None, f"0 workers, {waiting:,} task(s) waiting")],
        )
    if picture.unrunnable:
        return _unrunnable(picture, t, workers)
    unsent = _unserializable(ctx)
    if unsent is not None:
        return unsent
    paused = [w for w in workers if w.status == "paused" and w.n_processing]
    all_paused = bool(workers) and all(w.status == "paused" for w in workers)
    if paused or (waiting and all_paused):
        return _paused(paused or workers, waiting, t)
    tasks = running(ctx, found)
    waiting_on_client = [r for r in tasks if r.waits_on_client]
    if waiting_on_client:
        task = waiting_on_client[0]
        busy = sum(w.n_executing for w in workers)
        threads = picture.n_threads
        full = (
            f"all {threads} thread(s) of the cluster are busy"
            if busy >= threads
            else f"{busy} of {threads} thread(s) are busy"
        )
        return (
            f"task {task.key} ({task.prefix}) waits for tasks it submitted, from "
            f"inside its worker thread ({task.where_text()}), and {full}: what "
            "it waits for cannot run",
            SECEDE_ADVICE,
            _stack_evidence(found, task),
        )
    stuck = hung(ctx, found)
    if stuck:
        task = stuck[0]
        return (
            f"{len(stuck)} task(s) stuck in their own code: {task.key} "
            f"({task.prefix}) had run {format_seconds(task.elapsed)} on "
            f"{task.worker}, waiting in {task.waits_text() or 'code not sampled'}",
            HUNG_ADVICE,
            _stack_evidence(found, task),
        )
    processing = sum(w.n_processing for w in workers)
    longest = (
        f"; the longest, {tasks[0].key}, for {format_seconds(tasks[0].elapsed)} "
        f"on {tasks[0].worker}"
        if tasks
        else ""
    )
    return (
        f"{processing:,} task(s) processing, {waiting:,} waiting{longest}",
        "Look at what the workers run (run.stacks() once it stopped, the "
        "dashboard's processing page while it runs).",
        [
            evidence(t, w.worker, f"{w.n_processing} task(s) processing")
            for w in workers[:MAX_EVIDENCE]
        ],
    )


def _needs(task: PictureTask) -> str:
    """What an unrunnable task asks for: resources, workers or hosts."""
    return ", ".join(
        [f"{r}={v:g}" for r, v in task.resources.items()]
        + [f"worker {w}" for w in task.workers]
        + [f"host {h}" for h in task.hosts]
    )


def _unrunnable(
    picture: RunPicture, t: float, workers: list[PictureWorker]
) -> tuple[str, str, list[dict[str, Any]]]:
    needs = {need for task in picture.unrunnable for need in _needs(task).split(", ")}
    offered = sorted({f"{r}={v:g}" for w in workers for r, v in w.resources.items()})
    n = picture.n_unrunnable
    return (
        f"{n:,} task(s) ask for what no worker has: {', '.join(sorted(needs))} "
        f"(the workers offer {', '.join(offered) if offered else 'no resources'})",
        'Start workers that offer it (dask worker --resources "NAME=n"), or '
        "drop the resources=/workers= restriction of those tasks.",
        [
            evidence(t, None, f"{task.key} ({task.prefix}) needs {_needs(task)}")
            for task in picture.unrunnable
        ],
    )


def _paused(
    paused: list[PictureWorker], waiting: int, t: float
) -> tuple[str, str, list[dict[str, Any]]]:
    held = sum(w.n_processing for w in paused) + waiting
    unmanaged = sum(w.unmanaged for w in paused)
    managed = sum(w.managed for w in paused)
    names = ", ".join(w.worker for w in paused)
    advice = (
        "Memory that dask does not manage (a leak, objects the code keeps, "
        "fragmentation) holds the worker over its pause threshold: find what "
        "keeps it, restart the workers (client.restart()), or give them more "
        "memory."
        if unmanaged >= managed
        else "The data it holds keeps the worker over its pause threshold: use "
        "smaller chunks or partitions, persist less, or add memory or workers."
    )
    return (
        f"worker(s) {names} paused for memory ({format_bytes(unmanaged)} "
        f"unmanaged, {format_bytes(managed)} managed), with {held:,} task(s) "
        "waiting",
        advice,
        [
            evidence(
                t,
                w.worker,
                f"paused: {format_bytes(w.memory)} of a {format_bytes(w.limit)} "
                f"limit ({format_bytes(w.unmanaged)} unmanaged), "
                f"{w.n_processing} task(s) processing",
            )
            for w in paused[:MAX_EVIDENCE]
        ],
    )


@rule("no-progress")
def no_progress(ctx: Context) -> list[Flag]:
    """Nothing of the run finished for ``no-progress.after`` with work
    remaining (from ``hung-task.after`` when it was stopped), with the cause."""
    found = TaskPictures.of(ctx).standing
    if found is None:
        return []
    stalled = found.picture.stalled_s
    if ctx.run.status == "running":  # still stalled now
        stalled = max(stalled, ctx.run.window_end() - found.picture.since)
    bar = ctx.seconds("hung-task.after" if found.stopped else "no-progress.after")
    if stalled < bar:
        return []
    cause, advice, found_evidence = _cause(ctx, found)
    when = " when the run was stopped" if found.stopped else ""
    return [
        Flag(
            "no-progress",
            "error",
            found.time,
            None,
            f"No progress for {format_seconds(stalled)}{when}: {cause}.",
            advice,
            found_evidence[:MAX_EVIDENCE],
        )
    ]

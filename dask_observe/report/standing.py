"""The report's "Where it stood when it stopped": a run stopped (interrupted,
or raising) while tasks still ran keeps a picture of the cluster at that moment
(the scheduler's ``run-stopped`` event) and the stacks of the running tasks.
Everything shown is untrusted text (keys, worker names, code) and escaped; the
line where a task waits is marked in bold, as text.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any, NamedTuple

from dask_observe.analysis.figures import long_tasks, ran_for
from dask_observe.capture.events import Frame, PictureTask, RunPicture, TaskStack
from dask_observe.plaintext import fold_frames, fold_text, frame_text, is_fold
from dask_observe.store.rundata import format_frames
from dask_observe.units import format_bytes, format_seconds

if TYPE_CHECKING:
    from dask_observe.store import RunData

#: Stacks shown at most (the longest-running tasks first).
MAX_STACKS = 5


class Stopped(NamedTuple):
    """Where a run stood when it was stopped with tasks running."""

    time: float
    #: The scheduler's picture, each running task's ``elapsed`` as
    #: :func:`~dask_observe.analysis.figures.ran_for` says.
    picture: RunPicture
    #: The running tasks' last sampled stacks (key -> shipped frames).
    stacks: dict[str, list[Frame]]
    #: Their compiled code's frames, where read (key -> text).
    native: dict[str, str]
    #: Why those could not be read, if so.
    native_unavailable: str | None


def stopped_state(run: RunData) -> Stopped | None:
    """The scheduler's picture of the run when it was stopped, with the stacks
    of its running tasks; None for a run that finished, or stopped with nothing
    running."""
    span = run.span_id
    found: tuple[float, RunPicture] | None = None
    for t, _, _, data in run.event_rows("run-stopped"):
        picture = RunPicture.from_data(data)
        if picture is not None and (span is None or picture.span == span):
            found = t, picture
    if found is None:
        return None
    at, picture = found
    # The scheduler knows a task's time only from its worker's last heartbeat
    # (none may have come on a loaded host): the worker's own word of when it
    # began counts too (``figures.ran_for``); told by neither, it is still shown.
    began = long_tasks(run)
    workers = [
        worker._replace(
            processing=[
                task._replace(elapsed=ran_for(task, at, began))
                for task in worker.processing
            ]
        )
        for worker in picture.workers
    ]
    native = run.native_stacks()
    return Stopped(
        at,
        picture._replace(workers=workers),
        {
            said.key: said.frames
            for _, _, _, d in run.event_rows("task-stack")
            if (said := TaskStack.from_data(d)) is not None
        },
        {str(key): text for (_, key), text in native.items() if key},
        next((text for (_, key), text in native.items() if key is None), None),
    )


def _stack_html(frames: list[list[Any]], styled: Any) -> str:
    """A traceback with the user's code first: runs of library frames folded
    into a line each, the innermost frame of the user's code in bold, and
    the whole stack a click away."""
    own = [f for f in frames if not f[4]]
    mark = own[-1] if own else frames[-1]
    lines = []
    for item in fold_frames(frames):
        if item is mark:
            lines.append(f"<b>{escape(frame_text(item))}</b>")
        elif is_fold(item):
            lines.append(escape(fold_text(item)))
        else:
            lines.append(escape(frame_text(item)))
    shown = f"<pre{styled('pre')}>" + "\n".join(lines) + "</pre>"
    if len(lines) == len(frames):
        return shown
    return (
        shown + f"<details><summary{styled('p')}>every frame ({len(frames)})"
        f"</summary><pre{styled('pre')}>{escape(format_frames(frames))}</pre>"
        "</details>"
    )


def _running_text(task: PictureTask) -> str:
    """A running task's key, how long it had run and whether its client had
    let go of it (it runs on in its worker's thread: see capture.letgo)."""
    said = ["its client let go"] if task.let_go else []
    if task.elapsed is not None:
        said.append(format_seconds(task.elapsed))
    return escape(task.key) + (f" ({'; '.join(said)})" if said else "")


def render(state: Stopped | None, styled: Any) -> str:
    """The section's HTML; ``styled(name)`` gives a named style attribute."""
    if state is None:
        return ""
    picture = state.picture
    rows = []
    running: list[tuple[float, str, str, str]] = []
    for w in picture.workers:
        memory = (
            f"{format_bytes(w.memory)} of {format_bytes(w.limit)}"
            if w.limit
            else format_bytes(w.memory)
        )
        tasks = [_running_text(t) for t in w.processing]
        for t in w.processing:
            known = t.elapsed if t.elapsed is not None else -1.0
            running.append((known, t.key, t.prefix, w.worker))
        rows.append(
            f"<tr><td{styled('first')}>{escape(w.worker)}</td>"
            f"<td{styled('cell')}>{escape(w.status)}</td>"
            f"<td{styled('cell')}>{memory}</td>"
            f"<td{styled('cell')}>{w.n_processing}</td>"
            f"<td{styled('first')}>{', '.join(tasks) or '-'}</td></tr>"
        )
    head = (
        f"<p{styled('p')}>Stopped {format_seconds(picture.stalled_s)} after "
        f"its last task finished; {picture.n_workers} worker(s), "
        f"{picture.waiting:,} task(s) waiting"
        + (
            f" ({picture.n_unrunnable:,} that no worker can run)"
            if picture.n_unrunnable
            else ""
        )
        + ".</p>"
    )
    table = (
        f"<table{styled('table')}><tr><th{styled('first')}>worker</th>"
        f"<th{styled('th')}>status</th><th{styled('th')}>memory</th>"
        f"<th{styled('th')}>processing</th><th{styled('first')}>running (for)</th>"
        f"</tr>{''.join(rows)}</table>"
        if rows
        else ""
    )
    stacks, native = state.stacks, state.native
    shown = [
        f"<p{styled('p')}><b>{escape(key)}</b> ({escape(prefix)}) on "
        f"{escape(worker)}, running"
        + (f" {format_seconds(elapsed)}" if elapsed >= 0 else "")
        + ":</p>"
        + _stack_html(stacks[key], styled)
        + (
            f"<p{styled('p')}>in compiled code, beneath:</p>"
            f"<pre{styled('pre')}>{escape(native[key])}</pre>"
            if native.get(key)
            else ""
        )
        for elapsed, key, prefix, worker in sorted(running, reverse=True)
        if stacks.get(key)
    ][:MAX_STACKS]
    unavailable = state.native_unavailable
    said = f"<p{styled('p')}>{escape(unavailable)}</p>" if unavailable else ""
    return (
        f"<h4{styled('h4')}>Where it stood when it stopped</h4>"
        + head
        + table
        + "".join(shown)
        + (said if shown else "")
    )

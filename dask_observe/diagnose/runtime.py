"""The event loop and the GIL: processes held up by their own tasks."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from dask_observe.analysis.native import innermost_named, shipped_waits
from dask_observe.capture.events import Held
from dask_observe.diagnose import holdups
from dask_observe.diagnose.base import (
    MAX_EVIDENCE,
    Context,
    Flag,
    evidence,
    rule,
    workers,
)
from dask_observe.diagnose.hangs import TaskPictures
from dask_observe.diagnose.holdups import Holdups
from dask_observe.diagnose.host import HOST_ADVICE, BusyHosts
from dask_observe.plaintext import short_path
from dask_observe.units import format_seconds

if TYPE_CHECKING:
    import pandas as pd


#: What event-loop-blocked advises for stalls while a worker imported modules.
IMPORT_ADVICE = (
    "Import what the tasks need once per worker, before the work: "
    "`dask worker --preload yourmodule`, a WorkerPlugin whose setup imports it "
    "(client.register_plugin), or client.run(importlib.import_module, "
    "'pandas'); and keep task functions in modules that import little."
)

#: What event-loop-blocked advises for stalls its process's own work held.
CODE_ADVICE = (
    "Release the GIL in long-running tasks (NumPy or Numba with nogil), "
    "split them up, or avoid moving very large objects between workers."
)

#: What event-loop-blocked advises for stalls its process hardly ran in.
WAITED_ADVICE = (
    "Look for what waits while it holds the loop or the GIL: blocking calls "
    "on the event loop (file or network I/O in a plugin, preload or callback: "
    "move them to a thread), and tasks' calls into libraries that wait "
    "without releasing the GIL (some HDF5, database or network drivers: run "
    "them in processes); if the host was busy or swapping, run fewer "
    "processes on it or give it memory."
)

#: What event-loop-blocked advises for stalls in full garbage collections.
COLLECTOR_ADVICE = (
    "Hold fewer long-lived Python objects in the process: arrays and "
    "DataFrames rather than lists and dicts of many small objects; "
    "gc.freeze() after loading data that stays; in a threads-only cluster, "
    "the notebook's own objects are walked too, which worker processes "
    "(LocalCluster(processes=True)) keep apart."
)


@rule("event-loop-blocked")
def event_loop_blocked(ctx: Context) -> list[Flag]:
    """Stalls of a worker's event loop of ``event-loop-blocked.tick`` (1 s) or
    more, of the scheduler's of ``scheduler-tick`` (a big graph takes it a
    while to take in); an error when the longest, or all together, reach
    ``error-time``. The flag names the cause of the stalls it counts, first
    found of: the process's own work (the code's), full garbage collections
    (the collector's, finalizers included), modules imported meanwhile
    (a task's module on first use), a host too busy to run the process (the
    host's; told as such, with advice about the host). The others are said as
    counted apart; so are stalls while a worker spilled, which the spilling
    flag tells."""
    split = Holdups.of(ctx).stalls
    causes = (
        ("code", split.code),
        ("waited", [stall for stall, _ in split.waited]),
        ("collected", [stall for stall, _ in split.collected]),
        ("imports", [stall for stall, _ in split.imports]),
        ("host", [stall for stall, _ in split.host]),
    )
    cause, stalls = next(((c, s) for c, s in causes if s), ("", []))
    if not stalls:
        return []
    seconds = [s for _, _, s, _ in stalls if s > 0]
    total = sum(seconds)
    longest = max(seconds, default=0.0)
    who = sorted({w or "the scheduler" for _, w, _, _ in stalls})
    found: list[dict[str, Any]] = [evidence(t, w, text) for t, w, _, text in stalls]
    stalled = (
        f"The event loop of {', '.join(who)} stalled {len(seconds)} time(s), "
        f"up to {format_seconds(longest)} ({format_seconds(total)} in all)"
    )
    severe = max(longest, total) >= ctx.seconds("event-loop-blocked.error-time")
    # What the watchdog saw hold the loop, said first, for the causes it can
    # tell apart (the code's, a wait, a busy host's): its stack as evidence.
    held = ""
    seen: list[dict[str, Any]] = []
    if cause in ("host", "code", "waited"):
        held_by = Holdups.of(ctx).held(stalls)
        holder = _holder(_with_keys(ctx, held_by), TaskPictures.of(ctx).natives)
        if holder is not None:
            where, how, frames = holder
            held = f"{where} held it{how}"
            seen = [evidence(stalls[0].time, stalls[0].worker, f) for f in frames]
    if cause == "host":
        busy = [crowded.busy for _, crowded in split.host]
        found = seen + BusyHosts.of(ctx).evidence(busy) + found
        oversubscribed = (
            f"{stalled}, each while its host was oversubscribed "
            f"({holdups.busiest(busy)})"
        )
        counts = "tick" if stalls[0].worker else "scheduler-tick"
        tick = format_seconds(ctx.seconds(f"event-loop-blocked.{counts}"))
        queued = [(s.seconds, c.queued) for s, c in split.host if c.queued is not None]
        if queued:
            # Filed as the host's by the kernel's count of its loop's waits
            # for a core: what the watchdog saw run meanwhile (its evidence)
            # did not hold the loop for a stall's length, and is not said to.
            waited = format_seconds(sum(q for _, q in queued))
            lasted = format_seconds(sum(s for s, _ in queued))
            message = (
                f"{oversubscribed}: its loop's thread waited for a core "
                f"{waited} of {lasted}, as the kernel counted, and without "
                f"those waits would not have been held as long as a stall "
                f"takes to count ({tick}); the host had more to run than "
                "cores, so heartbeats and transfers waited. A busy host made "
                "it a stall."
            )
        elif not held:
            message = (
                f"{oversubscribed}: the host had more to run than cores, so "
                "heartbeats and transfers waited. A busy host, not the tasks' "
                "code, held it up."
            )
        else:
            # Filed as the host's because its process had less CPU meanwhile
            # than a stall takes to count: what held the loop is still said
            # (a task's regular expression held the GIL 0.94 s of a 1.63 s
            # stall, and the flag said "not the tasks' code").
            message = (
                f"{oversubscribed}: {held}, for less CPU time than a stall "
                f"takes to count ({tick}); the host had more to run than cores "
                "and stretched it, so heartbeats and transfers waited. A busy "
                "host made it a stall."
            )
        return [_loop_flag(stalls, "warning", message, HOST_ADVICE, found)]
    also = "".join(
        f" {len(others)} more came while {why} (not counted here)."
        for name, others, why in (
            ("imports", split.imports, "modules were imported"),
            ("host", split.host, "the host was oversubscribed"),
            ("spilled", split.spilled, "a worker spilled to disk (see spilling)"),
            ("collected", split.collected, "Python's garbage collector ran"),
            ("waited", split.waited, "its process hardly ran"),
            (
                "paused",
                split.paused,
                "a worker paused for memory collected garbage (see memory-pressure)",
            ),
        )
        if others and name != cause
    )
    found = seen + found
    level = "error" if severe else "warning"
    if cause == "imports":
        count = sum(i.modules for _, i in split.imports)
        packages = list(dict.fromkeys(p for _, i in split.imports for p in i.packages))
        named = f": {', '.join(packages[:5])}" if packages else ""
        message = (
            f"{stalled}, each while it imported modules ({count} in all{named}): "
            "a worker unpickles a task on its event loop, importing the module "
            "of its function or data on first use, so heartbeats and transfers "
            f"waited.{also}"
        )
        return [_loop_flag(stalls, level, message, IMPORT_ADVICE, found)]
    if cause == "collected":
        collecting = sum(seconds for _, seconds in split.collected)
        message = (
            f"{stalled}, each while Python's garbage collector ran "
            f"({format_seconds(collecting)} of full collections in all): a full "
            "collection walks every object the process holds with the GIL "
            f"held, so heartbeats and transfers waited.{also}"
        )
        return [_loop_flag(stalls, level, message, COLLECTOR_ADVICE, found)]
    if cause == "waited":
        ran = sum(cpu for _, cpu in split.waited)
        message = (
            f"{stalled}, while its process hardly ran ({format_seconds(ran)} of "
            f"CPU in {format_seconds(total)}):{f' {held}:' if held else ''} not "
            "busy work but a wait, on a blocking call (on the loop, or a task's "
            "that held the GIL while it waited) or for a host or memory (swap) "
            f"that did not run the process, so heartbeats and transfers waited.{also}"
        )
        return [_loop_flag(stalls, level, message, WAITED_ADVICE, found)]
    message = (
        f"{stalled}: {held or 'something held it (or the GIL)'}, so heartbeats "
        f"and transfers waited.{also}"
    )
    return [_loop_flag(stalls, level, message, CODE_ADVICE, found)]


def _with_keys(ctx: Context, held: list[Held]) -> list[Held]:
    """The watchdog's samples, each task thread's task named where only its
    thread was seen (a task that began and ended between two of its looks):
    the run's task that ran on that worker's thread through the stall."""
    if all(h.key or h.thread != "task" for h in held):
        return held
    tasks = ctx.tasks
    named = []
    for sample in held:
        if sample.key or sample.thread != "task":
            named.append(sample)
            continue
        ran = tasks[
            (tasks["thread"] == sample.ident)
            & (tasks["start"] <= sample.until)
            & (tasks["stop"] >= sample.since)
        ]
        key = str(ran["key"].iloc[0]) if len(ran) else None
        named.append(sample._replace(key=key, thread="task" if key else "other"))
    return named


def _holder(
    held: list[Held], native: dict[str, list[str]] | None = None
) -> tuple[str, str, list[str]] | None:
    """The code that held the loop most often, from the watchdog's samples:
    where (the innermost frame of the user's code, else the innermost), how
    (in a task's thread, holding the GIL, in compiled code where py-spy read
    its thread as the watchdog saw it hold the loop: ``native``, by task
    key; or on the loop's own thread), and that stack from there inwards (at
    most five frames, then the innermost compiled ones), as evidence."""
    native = native or {}
    seen: Counter[tuple[str, str, str]] = Counter()
    stacks: dict[tuple[str, str, str], list[str]] = {}
    for sample in held:
        frames = [f for f in sample.frames if len(f) >= 5]
        key = sample.key or ""
        thread = sample.thread
        if not frames:
            # Its thread ran through the stall, and was gone from it before
            # it could be looked at: named by its task, or as a thread.
            if thread == "task":
                where, how = f"task {key!r}", ", holding the GIL"
            elif thread == "other":
                where, how = "another thread of the process", ", holding the GIL"
            else:
                continue
            seen[(where, how, key)] += 1
            stacks.setdefault((where, how, key), [])
            continue
        own = [i for i, f in enumerate(frames) if not f[4]]
        at = own[-1] if own else len(frames) - 1
        file, line, function = frames[at][0], frames[at][1], frames[at][2]
        where = f"{function} ({short_path(str(file))}:{line})"
        compiled = native.get(key, []) if thread == "task" else []
        # Read a moment after the watchdog saw it hold the loop: a thread
        # then waiting (a sleep between two C calls releases the GIL) held
        # nothing there, and is not said to ("holding the GIL in compiled
        # code at clock_nanosleep" was).
        if shipped_waits(compiled):
            compiled = []
        named = innermost_named(compiled)
        how = (
            f", in task {key!r}, holding the GIL"
            + (f" (read a moment later in compiled code at {named})" if named else "")
            if thread == "task"
            else ", on the event loop's own thread"
        )
        seen[(where, how, key)] += 1
        stacks.setdefault(
            (where, how, key),
            [
                f"{f[2]} at {short_path(str(f[0]))}:{f[1]}"
                + (f": {f[3]}" if f[3] else "")
                for f in frames[at:][:5]
            ]
            + [f"in compiled code: {c}" for c in compiled[-3:]],
        )
    if not seen:
        return None
    (where, how, key), _ = seen.most_common(1)[0]
    return where, how, stacks[(where, how, key)]


def _loop_flag(
    stalls: list[holdups.Stall],
    severity: str,
    message: str,
    advice: str,
    found: list[dict[str, Any]],
) -> Flag:
    return Flag(
        "event-loop-blocked",
        severity,
        stalls[0].time,
        workers(s.worker for s in stalls),
        message,
        advice,
        found[:MAX_EVIDENCE],
    )


@rule("gil-contention")
def gil_contention(ctx: Context) -> list[Flag]:
    """Task threads of one worker fighting over the GIL, where distributed
    measures it (with gilknocker installed).

    Only workers with several threads are judged: in a one-thread worker a task
    holding the GIL shows as contention too, but the remedy (and the flag) is
    event-loop-blocked's. High samples on a quiet host count when they are
    most of the worker's computing time there and add up to min-time (one late
    sample may speak for several seconds: see Holdups.contended). Samples
    taken while the worker's host was oversubscribed are the host's (two
    seconds of them make the flag): told as such, with advice about the host,
    when no others make it.
    """
    share = ctx.number("gil-contention.share")
    high = Holdups.of(ctx).contended
    if high.empty:
        return _gil_at_busy_host(ctx, share)
    longest, held, held_up = _held(ctx)
    # The loop held as long as event-loop-blocked calls an error is one here.
    severe = longest >= ctx.seconds("event-loop-blocked.error-time")
    # The stalls (a few) stay beside the samples (one a second) when cut.
    found = held_up + _samples(high)[: MAX_EVIDENCE - len(held_up)]
    return [
        Flag(
            "gil-contention",
            "error" if severe else "warning",
            float(high["time"].min()),
            workers(high["worker"]),
            f"Task threads waited for the GIL more than {share:.0%} of the time "
            f"({len(high)} samples): they took turns instead of running "
            f"together.{held}",
            "Use processes rather than threads (more workers, one thread each), or "
            "code that releases the GIL (NumPy, pandas, Numba with nogil).",
            sorted(found, key=lambda e: e["time"]),
        )
    ]


def _held(ctx: Context) -> tuple[float, str, list[dict[str, Any]]]:
    """The event-loop stalls gil-contention's samples explain: the longest,
    a sentence saying it, and their evidence (at most half the flag's)."""
    stalls = Holdups.of(ctx).stalls.contended
    longest = max((seconds for _, _, seconds, _ in stalls), default=0.0)
    held = (
        f" Their worker's event loop stalled for up to {format_seconds(longest)} "
        "meanwhile, so its heartbeats and transfers waited."
        if longest
        else ""
    )
    held_up = [evidence(t, w, text) for t, w, _, text in stalls][: MAX_EVIDENCE // 2]
    return longest, held, held_up


def _samples(high: pd.DataFrame) -> list[dict[str, Any]]:
    return [
        evidence(float(t), str(w), f"GIL contention {v:.0%}")
        for t, w, v in zip(high["time"], high["worker"], high["value"], strict=True)
    ]


def _gil_at_busy_host(ctx: Context, share: float) -> list[Flag]:
    """gil-contention's flag when all its samples came from busy hosts."""
    high, busy = Holdups.of(ctx).contended_at_host
    if high.empty:
        return []
    _, held, held_up = _held(ctx)
    found = BusyHosts.of(ctx).evidence(busy) + held_up + _samples(high)
    return [
        Flag(
            "gil-contention",
            "warning",
            float(high["time"].min()),
            workers(high["worker"]),
            f"Task threads waited for the GIL more than {share:.0%} of the time "
            f"({len(high)} samples), each while their host was oversubscribed "
            f"({holdups.busiest(busy)}): a thread holding the GIL that the host does "
            f"not run holds the others up.{held} A busy host, not the tasks' "
            "code, is the likely cause.",
            HOST_ADVICE,
            found[:MAX_EVIDENCE],
        )
    ]

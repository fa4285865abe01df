"""Plain-text forms of logs, flags and stacks, shared by the CLI and the magics."""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dask_observe.units import format_seconds, text_or_none

if TYPE_CHECKING:
    import pandas as pd


#: How a report and a cell's live display name the activities of
#: distributed's fine performance metrics (the ``execute`` context); others
#: keep distributed's name.
ACTIVITIES = {
    "thread-cpu": "CPU",
    "thread-noncpu": "waiting (GIL, I/O, sleep)",
    "deserialize": "deserializing",
    "disk-read": "reading spilled data",
    "disk-write": "spilling to disk",
    "executor": "executor overhead",
    "other": "other",
    "idle or other spans": "threads idle",
    "still running at the end": "held by tasks still running at the end",
}

#: Characters that change what a terminal shows rather than show themselves:
#: controls it acts on (escape sequences, carriage returns, the C1 set) and
#: the invisible ones that reorder or hide text (bidirectional overrides and
#: isolates such as U+202E, zero-width marks, the byte-order mark); tab and
#: newline kept where text may span lines.
_INVISIBLE = "\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff"
_CONTROL = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_INVISIBLE}]")
_CONTROL_OR_NEWLINE = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_INVISIBLE}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, *, newlines: bool = True) -> str:
    """``text`` safe to print on a terminal: each control character as a
    visible escape (``\\x1b``, ``\\u202e``), so a log line cannot recolour,
    move the cursor, retitle the window or reorder what it shows; with
    ``newlines=False`` line breaks too (a table cell must not fake rows)."""
    pattern = _CONTROL if newlines else _CONTROL_OR_NEWLINE
    return pattern.sub(_escape, text)


def log_lines(logs: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """One line a record (as ``Run.log_records`` gives them, times in seconds
    since the epoch): time, level, where it came from, logger (and the task
    that wrote it, in brackets), message (and its logging call's extra
    fields)."""
    for row in logs:
        stamp = clock_text(float(row["time"]), "%Y-%m-%d %H:%M:%S.%f")
        worker = text_or_none(row["worker"])
        where = row["source"] if worker is None else f"{row['source']} {worker}"
        task, fields = text_or_none(row.get("task")), text_or_none(row.get("fields"))
        who = row["logger"] if task is None else f"{row['logger']} [{task}]"
        said = row["message"] if fields is None else f"{row['message']}  {fields}"
        yield visible(f"{stamp} {row['level']:<8} {where} {who}: {said}")


def clock_text(seconds: float, form: str) -> str:
    """An epoch time in UTC by ``form``, a ``%f`` in it cut to milliseconds
    (the form ends with it)."""
    text = dt.datetime.fromtimestamp(seconds, dt.UTC).strftime(form)
    return text[:-3] if form.endswith("%f") else text


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Columns of text, each right-aligned to its widest cell under its
    header, a space apart (as pandas prints a frame without its index)."""
    cells = [list(header), *(list(row) for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return [
        " ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
        for row in cells
    ]


def flag_lines(flags: Sequence[Mapping[str, Any]]) -> Iterator[str]:
    """Each flag (as a dict of its fields): its kind and message, the advice,
    and the evidence indented."""
    if not flags:
        yield "No flags: nothing looked wrong."
        return
    for row in flags:
        yield visible(f"[{row['severity']}] {row['kind']}: {row['message']}")
        yield visible(f"    advice: {row['advice']}")
        for e in row["evidence"]:
            stamp = clock_text(float(e["time"]), "%H:%M:%S.%f")
            who = f" {e['worker']}" if text_or_none(e["worker"]) else ""
            yield visible(f"    {stamp}{who}: {e['text']}")


def stack_lines(stacks: pd.DataFrame, *, full: bool = False) -> Iterator[str]:
    """Each sampled stack: its task, worker, when and how often, then the
    frames as a traceback prints them (innermost last): the user's code in
    full and the libraries' frames folded, or every frame (``full``)."""
    if stacks.empty:
        yield "No stacks: no task ran past observe.flags.hung-task.after."
        return
    column = "frames" if full or "folded" not in stacks else "folded"
    for row in stacks.to_dict("records"):
        yield visible(
            f"{row['key']} ({row['prefix']}) on {row['worker']}, first at "
            f"{row['time']:%H:%M:%S}, sampled {row['count']}x:"
        )
        yield visible(str(row[column]))
        if row.get("native"):
            said = str(row["native"])
            if not said.startswith("native stacks unavailable"):
                yield "  in compiled code, beneath:"
                said = "\n".join(f"    {line}" for line in said.splitlines())
            yield visible(said)


#: A library run this long or shorter is shown, not folded: its fold line
#: would be no shorter.
SHOWN_RUN = 2


def fold_frames(frames: Sequence[Sequence[Any]]) -> list[Any]:
    """A stack as a reader wants it (frames as shipped: file, line, function,
    code, library or not; outermost first): every frame of the user's code,
    and the innermost frame (where the thread waits), each as it is; each
    longer run of library frames between them as one list (what a fold
    line stands for). A stack with no frame of the user's keeps its three
    innermost."""
    own = [i for i, f in enumerate(frames) if not f[4]]
    keep = set(own) | {len(frames) - 1}
    if not own:
        keep |= set(range(len(frames) - 3, len(frames)))
    out: list[Any] = []
    run: list[Sequence[Any]] = []
    for i, frame in enumerate(frames):
        if i not in keep:
            run.append(frame)
            continue
        out.extend([run] if len(run) > SHOWN_RUN else run)
        run = []
        out.append(frame)
    out.extend([run] if len(run) > SHOWN_RUN else run)
    return out


def frame_text(frame: Sequence[Any]) -> str:
    """One frame as a traceback prints it."""
    return f'  File "{frame[0]}", line {frame[1]}, in {frame[2]}' + (
        f"\n    {frame[3]}" if frame[3] else ""
    )


def fold_text(run: Sequence[Sequence[Any]]) -> str:
    """The line that stands for a run of library frames: how many, of what."""
    names: list[str] = []
    for frame in run:
        name = package_of(str(frame[0]))
        if name not in names:
            names.append(name)
    shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    return f"  ... {len(run)} library frames ({shown})"


def folded_stack(frames: Sequence[Sequence[Any]]) -> str:
    """:func:`fold_frames` as text, each fold one line."""
    return "\n".join(
        fold_text(item) if is_fold(item) else frame_text(item)
        for item in fold_frames(frames)
    )


def is_fold(item: Sequence[Any]) -> bool:
    """Whether an item of :func:`fold_frames` is a run of frames (else one)."""
    return bool(item) and isinstance(item[0], (list, tuple))


def package_of(filename: str) -> str:
    """The package (or standard-library module) a frame's file belongs to:
    ``distributed`` for ``.../site-packages/distributed/worker.py``,
    ``threading`` for ``/usr/lib/python3.12/threading.py``."""
    if filename.startswith("<frozen "):
        return filename[len("<frozen ") :].rstrip(">").split(".")[0]
    first = re.split(r"[/\\]", short_path(filename))[0]
    return first.removesuffix(".py") or filename


#: Where an installed package's path begins: what comes after is its import path.
_PACKAGE_ROOTS = ("site-packages/", "dist-packages/")
#: The standard library of any Python 3 on any machine (the worker's may not be
#: this process's): ``.../lib/python3.12/``, Windows' ``...\Lib\``.
_STDLIB = re.compile(r"^.*?[/\\](?:lib[/\\]python3\.\d+t?|Lib)[/\\]")
#: What cloudpickle names the code of a function it shipped by value: one the
#: user defined in a notebook or script.
DYNAMIC_CODE = "<dynamic-code>"


def short_path(filename: str) -> str:
    """A code location as a reader wants it: ``.../site-packages/dask/array/core.py``
    as ``dask/array/core.py``, ``/usr/lib/python3.12/threading.py`` as
    ``threading.py``, a function shipped from the notebook as ``(your code)``."""
    for marker in _PACKAGE_ROOTS:
        if marker in filename:
            return filename.rsplit(marker, 1)[1]
    if filename == DYNAMIC_CODE:
        return "(your code)"
    return _STDLIB.sub("", filename, count=1)


def profile_lines(
    profile: pd.DataFrame,
    native: pd.DataFrame,
    *,
    prefix: str = "",
    limit: int = 15,
    unavailable: Mapping[str, Sequence[str]] | None = None,
) -> Iterator[str]:
    """A run's profile as text (``Run.profile``, of ``prefix``: "" for all its
    tasks): the functions with the most self time, compiled ones marked with
    their library; then, of a run recorded with ``native=True``
    (``Run.native``), how much of each prefix's task time was in compiled
    code, and where, and why a worker could not be profiled so
    (``unavailable``: reason -> workers)."""
    rows = profile[profile["prefix"] == prefix]
    whose = f"prefix {prefix!r}" if prefix else "all tasks"
    if rows.empty:
        yield f"No profile of {whose} (a run under half a second of compute has none)."
    else:
        sampled = float(rows["self_s"].sum())
        yield f"Profile of {whose}: {format_seconds(sampled)} sampled"
        top = rows.sort_values("self_s", ascending=False).head(limit)
        yield from table(
            ["self", "with callees", "function", "where"],
            [
                (
                    format_seconds(float(r["self_s"])),
                    format_seconds(float(r["total_s"])),
                    visible(str(r["function"]), newlines=False)[:60],
                    (
                        f"compiled: {library(str(r['filename']))}"
                        if r["native"]
                        else f"{short_path(str(r['filename']))}:{int(r['lineno'])}"
                    ),
                )
                for r in top.to_dict("records")
            ],
        )
    for reason, workers in (unavailable or {}).items():
        many = "s" if len(workers) != 1 else ""
        yield f"Native profile unavailable on {len(workers)} worker{many}: {reason}"
    if native.empty:
        return
    yield ""
    yield "In compiled code (py-spy):"
    yield from table(
        ["prefix", "task time sampled", "compiled", "waiting", "libraries"],
        [
            (
                visible(str(r["prefix"]), newlines=False) or "(all tasks)",
                format_seconds(float(r["sampled_s"])),
                f"{float(r['compiled_share']):.0%}",
                f"{float(r['waiting_s']) / max(float(r['sampled_s']), 1e-9):.0%}",
                str(r["libraries"]) or "-",
            )
            for r in native.to_dict("records")
        ],
    )


#: A shared library's version and platform tags: libc.so.6, the
#: cpython-311-x86_64-linux-gnu of an extension module, a wheel's hash.
_SO_VERSION = re.compile(r"(\.cpython-[^.]*|\.so.*|-[0-9a-f]{8}.*)$")


def library(filename: str) -> str:
    """The library a compiled frame is in: the package it was installed with
    (numpy, pandas, pyarrow...), else the shared library's own name (libc,
    libpython3.11)."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in filename:
            package = filename.split(marker, 1)[1].split("/", 1)[0]
            return package.removesuffix(".libs")
    name = os.path.basename(filename)
    return _SO_VERSION.sub("", name) or "unknown"

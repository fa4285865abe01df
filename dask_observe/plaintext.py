"""Plain-text forms of logs, flags and stacks, shared by the CLI and the magics."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from dask_observe.units import text_or_none

if TYPE_CHECKING:
    import pandas as pd


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


def log_lines(logs: pd.DataFrame) -> Iterator[str]:
    """One line a record: time, level, where it came from, logger (and the
    task that wrote it, in brackets), message (and its logging call's extra
    fields)."""
    stamps = logs["time"].dt.strftime("%Y-%m-%d %H:%M:%S.%f").str[:-3]
    for stamp, row in zip(stamps, logs.to_dict("records"), strict=True):
        worker = text_or_none(row["worker"])
        where = row["source"] if worker is None else f"{row['source']} {worker}"
        task, fields = text_or_none(row.get("task")), text_or_none(row.get("fields"))
        who = row["logger"] if task is None else f"{row['logger']} [{task}]"
        said = row["message"] if fields is None else f"{row['message']}  {fields}"
        yield visible(f"{stamp} {row['level']:<8} {where} {who}: {said}")


def flag_lines(flags: pd.DataFrame) -> Iterator[str]:
    """Each flag: its kind and message, the advice, and the evidence indented."""
    if flags.empty:
        yield "No flags: nothing looked wrong."
        return
    for row in flags.to_dict("records"):
        yield visible(f"[{row['severity']}] {row['kind']}: {row['message']}")
        yield visible(f"    advice: {row['advice']}")
        for e in row["evidence"]:
            stamp = dt.datetime.fromtimestamp(e["time"], dt.UTC).strftime("%H:%M:%S.%f")
            who = f" {e['worker']}" if text_or_none(e["worker"]) else ""
            yield visible(f"    {stamp[:-3]}{who}: {e['text']}")


def stack_lines(stacks: pd.DataFrame) -> Iterator[str]:
    """Each sampled stack: its task, worker, when and how often, then the
    frames as a traceback prints them (innermost last)."""
    if stacks.empty:
        yield "No stacks: no task ran past observe.flags.hung-task.after."
        return
    for row in stacks.to_dict("records"):
        yield visible(
            f"{row['key']} ({row['prefix']}) on {row['worker']}, first at "
            f"{row['time']:%H:%M:%S}, sampled {row['count']}x:"
        )
        yield visible(str(row["frames"]))


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

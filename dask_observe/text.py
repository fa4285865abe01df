"""Plain-text forms of logs and flags, shared by the CLI and the magics."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import TYPE_CHECKING

from dask_observe.units import text_or_none

if TYPE_CHECKING:
    import pandas as pd


def log_lines(logs: pd.DataFrame) -> Iterator[str]:
    """One line a record: time, level, where it came from, logger, message."""
    stamps = logs["time"].dt.strftime("%Y-%m-%d %H:%M:%S.%f").str[:-3]
    for stamp, row in zip(stamps, logs.to_dict("records"), strict=True):
        worker = text_or_none(row["worker"])
        where = row["source"] if worker is None else f"{row['source']} {worker}"
        yield f"{stamp} {row['level']:<8} {where} {row['logger']}: {row['message']}"


def flag_lines(flags: pd.DataFrame) -> Iterator[str]:
    """Each flag: its kind and message, the advice, and the evidence indented."""
    if flags.empty:
        yield "No flags: nothing looked wrong."
        return
    for row in flags.to_dict("records"):
        yield f"[{row['severity']}] {row['kind']}: {row['message']}"
        yield f"    advice: {row['advice']}"
        for e in row["evidence"]:
            stamp = dt.datetime.fromtimestamp(e["time"], dt.UTC).strftime("%H:%M:%S.%f")
            who = f" {e['worker']}" if text_or_none(e["worker"]) else ""
            yield f"    {stamp[:-3]}{who}: {e['text']}"

"""The commands that read: runs, logs, flags, stacks, report, compare,
history, export; and how they open the store (or ``--archive``)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dask_observe import open_store, subcommands
from dask_observe.analysis.compare import compare
from dask_observe.api import Run, Store
from dask_observe.api.archive import ARCHIVE_COLUMNS
from dask_observe.config import default_store_path
from dask_observe.plaintext import (
    clock_text,
    flag_lines,
    log_lines,
    stack_lines,
    table,
    visible,
)
from dask_observe.store import StoreMissing
from dask_observe.store.files import on_read_only_disk
from dask_observe.store.outcome import outcome
from dask_observe.store.rundata import RUN_COLUMNS, epoch

if TYPE_CHECKING:
    from dask_observe.api.archive import Archive

FORCE_HELP = "overwrite files that exist (a symbolic link is never followed)"

#: How often ``logs --follow`` looks for new lines, and how many it reads at once.
FOLLOW_INTERVAL_S = 0.5

FOLLOW_PAGE = 5000


def source_of(args: argparse.Namespace) -> Store | Archive:
    """What a reading command reads: ``--archive``, else the store."""
    return subcommands.open_reading(args, lambda: store_of(args))


def store_of(
    args: argparse.Namespace, create: bool = False, readonly: bool = False
) -> Store:
    """The store; only commands that record may create it (a mistyped --store
    given to a reading command is an error, not a new empty store)."""
    path = args.store or default_store_path()
    # A reading command reads a store it may not write (0400, a read-only
    # disk) rather than refusing it; where it may, it opens as a writer (to
    # migrate an older schema, and store which runs' processes died).
    if not create and os.path.exists(path) and not _writable(Path(path)):
        readonly = True
    if readonly:  # not a byte written, not even the journal's checkpoint
        store = Store(path, create=False, readonly=True)
    else:
        store = open_store(args.store, create=create)
    store.read_deadline_s = getattr(args, "deadline", None)
    return store


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK) and not on_read_only_disk(path)


def cmd_runs(args: argparse.Namespace) -> int:
    hint = "Record one with `dask-observe demo`, or with %%dask_record in a notebook."
    try:
        store = source_of(args)
    except StoreMissing as e:
        if args.store:  # a path the user gave: a typo, not a fresh start
            raise
        print(visible(f"No dask-observe store at {e.path} yet. {hint}"))
        return 0
    with store:
        records = store.run_records(brief=True)
        _say_skipped(store)
        columns = _listed_columns(args)
        if not records:
            print(visible(f"No runs in {store.path} yet. {hint}"))
            return 0
    rows = [[_cell(column, record) for column in columns] for record in records]
    for line in table(columns, rows):
        print(line)
    return 0


def _listed_columns(args: argparse.Namespace) -> tuple[str, ...]:
    """The columns ``runs`` lists: a store's, or an archive's (with who
    recorded each run)."""
    if getattr(args, "archive", None):
        return ARCHIVE_COLUMNS
    return RUN_COLUMNS


def _cell(column: str, record: dict[str, Any]) -> str:
    """One cell of the run list: times in UTC to the second, the duration to
    the hundredth, the status as every surface says it (finished with losses
    is not finished), blank where a run has no value yet (a running run's
    end), and text others chose (a name, a host) never a control sequence."""
    value = outcome(record) if column == "status" else record.get(column)
    if value is None or value != value:  # None, or NaN from an archive
        return ""
    if column in ("started", "ended"):
        return clock_text(float(value), "%Y-%m-%d %H:%M:%S")
    if column == "duration_s":
        return f"{float(value):.2f}"
    return visible(str(value), newlines=False)


def _say_skipped(source: Store | Archive) -> None:
    """A warning when an archive's listing left entries out (not valid runs)."""
    skipped = getattr(source, "skipped", 0)
    if skipped:
        print(
            f"dask-observe: warning: {skipped} entr{'y' if skipped == 1 else 'ies'} "
            "of the archive skipped: not valid runs (not regular files, too "
            "large, or fields that are not what a run's are)",
            file=sys.stderr,
        )


def cmd_logs(args: argparse.Namespace) -> int:
    with source_of(args) as store:
        run = store.run(args.run)
        if args.follow:
            _follow(run, args)
            return 0
        logs = subcommands.logs(run, args, since=args.since)
    for line in log_lines(logs):
        print(line)
    if not logs:  # said apart from the lines, so that a pipe reads none
        print(visible(f"0 lines in run {run.id} {run.name!r}"), file=sys.stderr)
    return 0


def _follow(run: Run, args: argparse.Namespace) -> None:
    """Print the run's lines in the order they were stored, page by page, then
    each new one as it is stored, until the run has ended and all its lines are
    out (or Ctrl-C). Paging by sequence number prints every line exactly once."""
    filters = subcommands.log_filters(args)
    since = epoch(args.since) if args.since else None
    after = 0
    try:
        while True:
            ended = run.refresh().status != "running"
            rows = run.log_page(after, FOLLOW_PAGE, **filters)
            if rows:
                after = rows[-1]["seq"]
                shown = [r for r in rows if since is None or r["time"] >= since]
                for line in log_lines(shown):
                    print(line, flush=True)
            if len(rows) == FOLLOW_PAGE:
                continue  # more stored already: no wait
            if ended:
                return
            time.sleep(FOLLOW_INTERVAL_S)
    except KeyboardInterrupt:
        return


def cmd_flags(args: argparse.Namespace) -> int:
    with source_of(args) as store:
        return _printed(flag_lines(subcommands.flags(store.run(args.run))))


def cmd_stacks(args: argparse.Namespace) -> int:
    with source_of(args) as store:
        return _printed(stack_lines(store.run(args.run).stacks(), full=args.full))


def cmd_profile(args: argparse.Namespace) -> int:
    with source_of(args) as store:
        return _printed(subcommands.profile(store.run(args.run), args.prefix))


def _printed(lines: Iterable[str]) -> int:
    for line in lines:
        print(line)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    with source_of(args) as store:
        run = store.run(args.run)
        label = run.archive_uid or run.id
        output = args.output or f"run-{label}.html"
        path = run.report().save(output, overwrite=args.force)
    print(visible(f"Report of run {label} {run.name!r} written to {path}"))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    with source_of(args) as store:
        comparison = compare(args.a, args.b, threshold=args.threshold, store=store)
    print(visible(comparison.text()))
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    with source_of(args) as store:
        runs = store.history_records(args.name)
        _say_skipped(store)
        names = [] if runs else sorted({str(r["name"]) for r in store.run_records()})
    if not runs:
        known = ", ".join(repr(n) for n in names[:20]) or "none: the store has no runs"
        print(
            visible(f"dask-observe: error: no runs named {args.name!r} in "
                    f"{store.path}; the names there: {known}"),
            file=sys.stderr,
        )  # fmt: skip
        return 1
    print(
        f"{'id':>5}  {'started (UTC)':<19}  {'status':<11} {'wall':>10}  "
        f"{'tasks':>14}  {'judged':<11} changed"
    )
    for row in runs:
        seconds = row["duration_s"]
        wall = "-" if seconds is None or seconds != seconds else f"{seconds:.2f} s"
        prefixes = [f"{p}: {verdict}" for p, verdict in row["prefixes"].items()]
        if row["memory_verdict"]:
            prefixes.append(f"peak memory: {row['memory_verdict']}")
        changed = "; ".join([*prefixes, *row["changed"]])
        print(visible(
            f"{row['id']:>5}  {clock_text(row['started'], '%Y-%m-%d %H:%M:%S')}"
            f"  {outcome(row):<11}"
            f" {wall:>10}  {row['n_tasks']:>8} tasks  {row['verdict'] or '-':<11}"
            f" {changed}"
        ))  # fmt: skip
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    if (args.otlp is None) == (args.format is None):
        raise ValueError("export needs --otlp ENDPOINT or --format with -o PATH")
    if args.format is not None and not args.output:
        raise ValueError(f"--format {args.format} needs -o PATH: where to write")
    with store_of(args) as store:
        run = store.run(args.run)
        what = visible(f"run {run.id} {run.name!r}")
        if args.format == "chrome-trace":
            path = run.to_chrome_trace(args.output, overwrite=args.force)
            print(f"Wrote {what} as a Chrome trace to {visible(str(path))}")
            print("Open it in https://ui.perfetto.dev or chrome://tracing.")
        elif args.format == "parquet":
            paths = run.to_parquet(args.output, overwrite=args.force)
            print(f"Wrote {what} as Parquet to {visible(args.output)}: "
                  f"{', '.join(p.name for p in paths.values())}")  # fmt: skip
        else:
            sent = run.to_otlp(args.otlp or None)
            print(visible(f"Sent {what}: {sent.text(args.otlp or 'the collector')}"))
            return 1 if sent.dropped else 0
    return 0

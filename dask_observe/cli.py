"""The ``dask-observe`` command."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dask_observe import commands
from dask_observe.api import Run, Store
from dask_observe.commands import add_reading
from dask_observe.plaintext import flag_lines, log_lines, stack_lines, visible
from dask_observe.store import StoreError, StoreMissing

if TYPE_CHECKING:
    from dask_observe.archive import Archive

FORCE_HELP = "overwrite files that exist (a symbolic link is never followed)"

#: How often ``logs --follow`` looks for new lines, and how many it reads at once.
FOLLOW_INTERVAL_S = 0.5
FOLLOW_PAGE = 5000


def _read(args: argparse.Namespace) -> Store | Archive:
    """What a reading command reads: ``--archive``, else the store."""
    return commands.open_reading(args, lambda: _open(args))


def _open(
    args: argparse.Namespace, create: bool = False, readonly: bool = False
) -> Store:
    """The store; only commands that record may create it (a mistyped --store
    given to a reading command is an error, not a new empty store)."""
    from dask_observe import open_store
    from dask_observe.config import default_store_path

    path = args.store or default_store_path()
    # A reading command reads a store it may not write (0400, a read-only
    # disk) rather than refusing it; where it may, it opens as a writer (to
    # migrate an older schema, and store which runs' processes died).
    if not create and os.path.exists(path) and not _writable(Path(path)):
        readonly = True
    if readonly:  # not a byte written, not even the journal's checkpoint
        return Store(path, create=False, readonly=True)
    return open_store(args.store, create=create)


def _writable(path: Path) -> bool:
    from dask_observe.store.files import on_read_only_disk

    return os.access(path, os.W_OK) and not on_read_only_disk(path)


def cmd_runs(args: argparse.Namespace) -> int:
    hint = "Record one with `dask-observe demo`, or with %%dask_record in a notebook."
    try:
        store = _read(args)
    except StoreMissing as e:
        print(visible(f"No dask-observe store at {e.path} yet. {hint}"))
        return 0
    with store:
        runs = store.runs()
        if runs.empty:
            print(visible(f"No runs in {store.path} yet. {hint}"))
            return 0
    for column in ("started", "ended"):
        runs[column] = runs[column].dt.tz_convert(None).dt.strftime("%Y-%m-%d %H:%M:%S")
    runs["duration_s"] = runs["duration_s"].round(2)
    for column in ("name", "cluster", "partial"):  # text the cluster or a user chose
        runs[column] = [
            visible(str(v), newlines=False) if v is not None else None
            for v in runs[column]
        ]
    print(runs.fillna("").to_string(index=False))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    with _read(args) as store:
        run = store.run(args.run)
        if args.follow:
            _follow(run, args)
            return 0
        logs = commands.logs(run, args, since=args.since)
    for line in log_lines(logs):
        print(line)
    return 0


def _follow(run: Run, args: argparse.Namespace) -> None:
    """Print the run's lines in the order they were stored, page by page, then
    each new one as it is stored, until the run has ended and all its lines are
    out (or Ctrl-C). Paging by sequence number prints every line exactly once."""
    import pandas as pd

    from dask_observe.store.rundata import epoch

    filters = commands.log_filters(args)
    since = epoch(args.since) if args.since else None
    after = 0
    try:
        while True:
            ended = run.refresh().status != "running"
            rows = run.log_page(after, FOLLOW_PAGE, **filters)
            if rows:
                after = rows[-1]["seq"]
                frame = pd.DataFrame(rows).drop(columns="seq")
                if since is not None:
                    frame = frame[frame["time"] >= since]
                frame["time"] = pd.to_datetime(frame["time"], unit="s", utc=True)
                for line in log_lines(frame):
                    print(line, flush=True)
            if len(rows) == FOLLOW_PAGE:
                continue  # more stored already: no wait
            if ended:
                return
            time.sleep(FOLLOW_INTERVAL_S)
    except KeyboardInterrupt:
        return


def cmd_flags(args: argparse.Namespace) -> int:
    with _read(args) as store:
        flags = store.run(args.run).flags()
    for line in flag_lines(flags):
        print(line)
    return 0


def cmd_stacks(args: argparse.Namespace) -> int:
    with _read(args) as store:
        stacks = store.run(args.run).stacks()
    for line in stack_lines(stacks):
        print(line)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    with _read(args) as store:
        run = store.run(args.run)
        label = run.archive_uid or run.id
        output = args.output or f"run-{label}.html"
        path = run.report().save(output, overwrite=args.force)
    print(visible(f"Report of run {label} {run.name!r} written to {path}"))
    return 0


def _security(args: argparse.Namespace) -> Any:
    """TLS from the options, else from dask config (``distributed.comm.tls``)."""
    from distributed.security import Security

    files = (args.tls_ca_file, args.tls_cert, args.tls_key)
    if not any(files):
        return None  # Client reads dask config
    if not all(files):
        raise ValueError("TLS needs --tls-ca-file, --tls-cert and --tls-key together")
    return Security(
        tls_ca_file=args.tls_ca_file,
        tls_client_cert=args.tls_cert,
        tls_client_key=args.tls_key,
        require_encryption=True,
    )


def cmd_record(args: argparse.Namespace) -> int:
    import signal
    import threading

    from distributed import Client

    from dask_observe.recording.lifecycle import Recording

    try:
        client = Client(args.scheduler, timeout=args.timeout, security=_security(args))
    except OSError as e:
        where = f"cannot reach the scheduler at {args.scheduler}: {e}"
        print(visible(f"dask-observe: error: {where}"), file=sys.stderr)
        return 1
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with client, _open(args, create=True) as store:
        recording = Recording(args.name, client, store, whole_cluster=True)
        run = recording.start()
        print(f"Recording run {run.id} {run.name!r} from {args.scheduler}")
        print(f"into {store.path}")
        print("Stop with Ctrl-C.", flush=True)
        stop.wait()
        run = recording.stop("finished")
        recording.finish_export(timeout=30)
        summary = run.summary()
        print(f"Recorded run {run.id}: {summary['n_tasks']} tasks, {run.status}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from dask_observe.demo import print_summary, run_demo

    with _open(args, create=True) as store:
        runs = run_demo(store, n_workers=args.workers)
        print_summary(runs, store)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from dask_observe.analysis.compare import compare

    with _read(args) as store:
        comparison = compare(args.a, args.b, threshold=args.threshold, store=store)
    print(visible(comparison.text()))
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    with _read(args) as store:
        runs = store.history(args.name)
    if runs.empty:
        print(visible(f"No runs named {args.name!r} in {store.path}."))
        return 0
    for row in runs.to_dict("records"):
        seconds = row["duration_s"]
        wall = "-" if seconds is None or seconds != seconds else f"{seconds:.2f} s"
        prefixes = [f"{p}: {verdict}" for p, verdict in row["prefixes"].items()]
        changed = "; ".join([*prefixes, *row["changed"]])
        print(visible(
            f"{row['id']:>5}  {row['started']:%Y-%m-%d %H:%M:%S}  {row['status']:<11}"
            f" {wall:>10}  {row['n_tasks']:>8} tasks  {row['verdict'] or '':<11}"
            f" {changed}"
        ))  # fmt: skip
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    if (args.otlp is None) == (args.format is None):
        raise ValueError("export needs --otlp ENDPOINT or --format with -o PATH")
    if args.format is not None and not args.output:
        raise ValueError(f"--format {args.format} needs -o PATH: where to write")
    with _open(args) as store:
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


def cmd_redact(args: argparse.Namespace) -> int:
    from dask_observe.redact import configured

    redactor = configured()
    if not redactor.enabled:
        raise ValueError("observe.redact.enabled is false: there is nothing to apply")
    with _open(args, readonly=args.dry_run) as store:
        done = store.redact(redactor, dry_run=args.dry_run)
    if not done.total:
        print(visible(f"Nothing to redact in {store.path}."))
        return 0
    counts = ", ".join(f"{n:,} in {table}" for table, n in done.rows.items() if n)
    if done.dry_run:
        print(
            f"Would redact {done.total:,} rows ({counts}). Nothing changed (--dry-run)."
        )
        return 0
    print(visible(f"Redacted {done.total:,} rows ({counts}) in {store.path}."))
    if not done.log_truncated:
        print(
            "A reader still holds the write-ahead log, which may keep old pages "
            "until it closes: run this again when no notebook or server reads it."
        )
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    from dask_observe.archive import ArchiveError, configured_location, publish
    from dask_observe.archive.location import NO_ARCHIVE
    from dask_observe.units import format_bytes

    if (args.run is None) == (not args.all):
        raise ValueError("publish needs a run id (or last), or --all")
    location = configured_location(args.archive)
    if location is None:
        raise ArchiveError(NO_ARCHIVE.replace("give its URL", "give --archive URL"))
    with _open(args) as store:
        if args.all:
            records = reversed(store.run_records())  # oldest first
            ids = [r["id"] for r in records if r["status"] != "running"]
        else:
            ids = [store.run(args.run).id]
        total = len(ids)
        done = publish(store, ids, location, progress=_progress(total))
    for run_id, uid in done.uids.items():
        print(visible(f"run {run_id} -> {location.url} as {uid}"))
    print(
        visible(f"Published {len(done.uids)} of {total} run(s) to {location.url} "
                f"({format_bytes(done.nbytes)}).")
    )  # fmt: skip
    for run_id, why in done.failed.items():
        print(visible(f"dask-observe: error: run {run_id}: {why}"), file=sys.stderr)
    return 1 if done.failed else 0


def _progress(total: int) -> Any:
    """A line a run on a terminal, for publishing many."""
    if total < 2 or not sys.stderr.isatty():
        return None

    def say(done: int) -> None:
        print(f"\rpublishing {done}/{total}", end="", file=sys.stderr, flush=True)
        if done == total:
            print(file=sys.stderr)

    return say


def cmd_prune(args: argparse.Namespace) -> int:
    from dask_observe.store.retention import Policy
    from dask_observe.units import format_bytes, parse_bytes, parse_seconds

    policy = Policy(
        args.keep_last,
        None if args.older_than is None else parse_seconds(args.older_than),
        None if args.max_size is None else parse_bytes(args.max_size),
    )
    if policy.empty:
        policy = Policy.from_config()
    if policy.empty:
        raise ValueError(
            "say what to keep: --keep-last N, --older-than AGE (e.g. 30d) or "
            "--max-size SIZE (e.g. 2GiB), or set observe.retention"
        )
    if args.archive:
        return _prune_archive(args, policy)
    with _open(args, readonly=args.dry_run) as store:
        pruned = store.prune(policy, dry_run=args.dry_run)
    if not pruned.runs:
        print(visible(f"Nothing to prune in {store.path}."))
        return 0
    ids = ", ".join(str(r["id"]) for r in reversed(pruned.runs))
    runs = f"{len(pruned.runs)} run{'s' if len(pruned.runs) > 1 else ''} ({ids})"
    if pruned.dry_run:
        print(f"Would prune {runs}: {pruned.rows:,} rows. Nothing changed (--dry-run).")
    else:
        before, after = (
            format_bytes(pruned.bytes_before),
            format_bytes(pruned.bytes_after),
        )
        print(f"Pruned {runs}: {pruned.rows:,} rows; the store went from {before}")
        print(f"to {after}.")
    return 0


def _prune_archive(args: argparse.Namespace, policy: Any) -> int:
    from dask_observe.archive import open_archive
    from dask_observe.units import format_bytes

    with open_archive(args.archive) as archive:
        pruned = archive.prune(policy, dry_run=args.dry_run)
    if not pruned.runs and not pruned.orphans:
        print(visible(f"Nothing to prune in {archive.url}."))
        return 0
    ids = ", ".join(str(r["uid"]) for r in pruned.runs)
    what = f"{len(pruned.runs)} run(s) ({ids}; {format_bytes(pruned.nbytes)})"
    if pruned.orphans:
        what += f" and {len(pruned.orphans)} unfinished publish(es)"
    verb = "Would prune" if pruned.dry_run else "Pruned"
    tail = " Nothing changed (--dry-run)." if pruned.dry_run else ""
    print(visible(f"{verb} {what} from {archive.url}.{tail}"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dask-observe",
        description="Read and record what a Dask cluster did.",
    )
    parser.add_argument(
        "--store",
        metavar="PATH",
        default=None,
        help="the store file (default: dask config observe.store, "
        "else ~/.local/share/dask-observe/observe.sqlite)",
    )
    subcommands = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True
    )
    reading = add_reading(subcommands, run_optional=False)
    reading["runs"].set_defaults(func=cmd_runs)
    logs = reading["logs"]
    logs.add_argument("--since", metavar="TIME", help="from this time (UTC)")
    logs.add_argument(
        "--follow", action="store_true",
        help="keep printing new lines until the run ends (or Ctrl-C)",
    )  # fmt: skip
    logs.set_defaults(func=cmd_logs)
    reading["flags"].set_defaults(func=cmd_flags)
    reading["stacks"].set_defaults(func=cmd_stacks)
    report = reading["report"]
    report.add_argument("--force", action="store_true", help=FORCE_HELP)
    report.add_argument(
        "-o", "--output", metavar="FILE", help="where (default: run-ID.html here)"
    )
    report.set_defaults(func=cmd_report)
    reading["compare"].set_defaults(func=cmd_compare)
    reading["history"].set_defaults(func=cmd_history)
    rec = subcommands.add_parser(
        "record", help="record a running cluster that no notebook watches"
    )
    rec.add_argument("--scheduler", required=True, metavar="ADDRESS")
    rec.add_argument("--name", default="recording", help="the run's name")
    rec.add_argument("--timeout", default="5s", help="to reach the scheduler")
    for option, what in (
        ("--tls-ca-file", "the certificate authority"),
        ("--tls-cert", "this client's certificate"),
        ("--tls-key", "this client's private key"),
    ):
        rec.add_argument(
            option, metavar="FILE", help=f"{what}, for a tls:// scheduler "
            "(default: dask config distributed.comm.tls)",
        )  # fmt: skip
    rec.set_defaults(func=cmd_record)
    export = subcommands.add_parser(
        "export", help="a run for other tools: OpenTelemetry, Perfetto, Parquet"
    )
    export.add_argument("run", help="a run id, or last")
    export.add_argument("--force", action="store_true", help=FORCE_HELP)
    export.add_argument(
        "--otlp", metavar="ENDPOINT", nargs="?", const="",
        help="send it to an OpenTelemetry collector over OTLP/HTTP (e.g. "
        "http://localhost:4318; without a value: OTEL_EXPORTER_OTLP_ENDPOINT)",
    )  # fmt: skip
    export.add_argument(
        "--format", choices=["chrome-trace", "parquet"],
        help="chrome-trace: a JSON file for Perfetto; parquet: a directory of "
        "tables for pandas or DuckDB",
    )  # fmt: skip
    export.add_argument("-o", "--output", metavar="PATH", help="the file or directory")
    export.set_defaults(func=cmd_export)
    prune = subcommands.add_parser(
        "prune", help="remove old runs and give the space back (never a running one)"
    )
    prune.add_argument("--keep-last", type=int, metavar="N", help="keep the newest N")
    prune.add_argument(
        "--older-than", metavar="AGE", help="remove runs that ended before (e.g. 30d)"
    )
    prune.add_argument(
        "--max-size", metavar="SIZE", help="remove the oldest runs beyond (e.g. 2GiB)"
    )
    prune.add_argument(
        "--dry-run", action="store_true", help="say what would go; change nothing"
    )
    prune.add_argument(
        "--archive", metavar="URL",
        help="prune the runs published to this archive, not the local store",
    )  # fmt: skip
    prune.set_defaults(func=cmd_prune)
    publish = subcommands.add_parser(
        "publish", help="publish runs to the team's archive (observe.archive)"
    )
    publish.add_argument("run", nargs="?", help="a run id, or last")
    publish.add_argument(
        "--all", action="store_true", help="every ended run of the store"
    )
    publish.add_argument(
        "--archive", metavar="URL",
        help="where (an fsspec URL; default: dask config observe.archive)",
    )  # fmt: skip
    publish.set_defaults(func=cmd_publish)
    redact = subcommands.add_parser(
        "redact",
        help="apply observe.redact to everything the store holds (runs recorded "
        "before this version, or before a pattern was added)",
    )
    redact.add_argument(
        "--dry-run", action="store_true", help="count what would change; change nothing"
    )
    redact.set_defaults(func=cmd_redact)
    demo = subcommands.add_parser(
        "demo",
        help="record runs that go wrong (spilling, a memory death, a hang) and "
        "one that does not, on an embedded LocalCluster",
    )
    demo.add_argument("--workers", type=int, default=2, help="number of workers")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    # Unknown runs and levels, bad patterns, a report path that cannot be written.
    except (StoreError, ValueError, OSError) as e:
        # Errors name runs and paths others chose: never raw to a terminal.
        print(visible(f"dask-observe: error: {e}"), file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())

"""The ``dask-observe`` command line: its parser (the docs' CLI reference is
read from it)."""

from __future__ import annotations

import argparse

from dask_observe.cli.reading import (
    FORCE_HELP,
    cmd_compare,
    cmd_export,
    cmd_flags,
    cmd_history,
    cmd_logs,
    cmd_profile,
    cmd_report,
    cmd_runs,
    cmd_stacks,
)
from dask_observe.cli.record import cmd_demo, cmd_record
from dask_observe.cli.upkeep import cmd_prune, cmd_publish, cmd_redact
from dask_observe.subcommands import add_reading

#: How long one read of the store may take from the command line: a store
#: is a file that may have come from anyone, and a read that cannot end (a
#: crafted file) must not hang the terminal. A year's store answers its
#: largest reads within seconds.
READ_DEADLINE_S = 120.0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"not a number of seconds above 0: {text!r}")
    return value


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
    parser.add_argument(
        "--deadline",
        metavar="SECONDS",
        type=_seconds,
        default=READ_DEADLINE_S,
        help="stop any one read of the store that takes longer, with an error "
        f"(default {READ_DEADLINE_S:g})",
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
    reading["profile"].set_defaults(func=cmd_profile)
    report = reading["report"]
    report.add_argument("--force", action="store_true", help=FORCE_HELP)
    report.add_argument(
        "-o", "--output", metavar="FILE", help="where (default: run-ID.html here)"
    )
    report.set_defaults(func=cmd_report)
    reading["compare"].set_defaults(func=cmd_compare)
    reading["history"].set_defaults(func=cmd_history)
    rec = subcommands.add_parser(
        "record",
        help="record a running cluster that no notebook watches, until Ctrl-C "
        "or the cluster closes (exit 1 if its scheduler was lost; a second "
        "Ctrl-C leaves at once, exit 130)",
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
    _archive_option(
        prune, "prune the runs published to this archive, not the local store"
    )
    prune.set_defaults(func=cmd_prune)
    publish = subcommands.add_parser(
        "publish", help="publish runs to the team's archive (observe.archive)"
    )
    publish.add_argument("run", nargs="?", help="a run id, or last")
    publish.add_argument(
        "--all", action="store_true", help="every ended run of the store"
    )
    _archive_option(
        publish, "where (an fsspec URL; default: dask config observe.archive)"
    )
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


def _archive_option(command: argparse.ArgumentParser, what: str) -> None:
    command.add_argument("--archive", metavar="URL", help=what)

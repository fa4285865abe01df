"""The reading subcommands that ``dask-observe`` and ``%dask_observe`` share,
defined once: their arguments (same names, same meaning, same help) and the
queries behind them. Each front end adds what is its own (the CLI's
``--follow`` and ``--force``, the magics' ``--store`` on each subcommand,
``start`` and ``stop``) and prints in its own way.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from dask_observe.api.archive import open_archive
from dask_observe.diagnose.lead import lead
from dask_observe.plaintext import profile_lines

if TYPE_CHECKING:
    from dask_observe.api import Run, Store
    from dask_observe.api.archive import Archive

#: Helps of the reading subcommands, by name.
HELP = {
    "runs": "list recorded runs, newest first",
    "logs": "log lines of a run, oldest first",
    "flags": "what went wrong in a run, and why",
    "stacks": "where tasks that ran far beyond their peers waited",
    "profile": "where a run's tasks spent their time, by function (and in "
    "compiled code, for a run recorded with --native)",
    "report": "a run's report, as one offline HTML page",
    "compare": "two runs side by side: b against a, with ratios",
    "history": "the runs of one name, each judged against the ones before",
}

#: Who said a line: a process of the cluster, or what its tasks wrote (their
#: workers' lines of the loggers stdout, stderr and py.warnings: see
#: ``store.queries.OUTPUT_SOURCES``).
SOURCES = ("scheduler", "worker", "nanny", "stdout", "stderr", "warning")


def add_run(parser: argparse.ArgumentParser, *, optional: bool) -> None:
    """The run a subcommand reads: an id, or ``last`` (the default where
    ``optional``: a notebook's newest run is the one just recorded)."""
    if optional:
        parser.add_argument("run", nargs="?", default="last", help="a run id, or last")
    else:
        parser.add_argument("run", help="a run id, or last")


def add_log_filters(parser: argparse.ArgumentParser) -> None:
    """What ``logs`` shows: each filter narrows the lines (they combine)."""
    parser.add_argument(
        "--filter", metavar="TEXT", help="lines containing TEXT (any case)"
    )
    parser.add_argument("--regex", action="store_true", help="--filter is a regex")
    parser.add_argument("--worker", metavar="ADDRESS", help="lines about this worker")
    parser.add_argument("--level", help="lowest level: debug, info, warning, error")
    parser.add_argument("--source", choices=SOURCES)
    parser.add_argument("--task", metavar="KEY", help="lines this task wrote")
    parser.add_argument(
        "--prefix", metavar="NAME", help="lines the tasks of this prefix wrote"
    )
    parser.add_argument(
        "--own", action="store_true", help="also lines about dask-observe's plugins"
    )


def log_filters(args: argparse.Namespace) -> dict[str, Any]:
    """The filters of ``add_log_filters`` as ``Run.logs`` and ``Run.log_page``
    take them."""
    return {
        "contains": args.filter,
        "regex": args.regex,
        "level": args.level,
        "worker": args.worker,
        "source": args.source,
        "own": args.own,
        "task": args.task,
        "prefix": args.prefix,
    }


def add_compare(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", help="the earlier run: an id, or last")
    parser.add_argument("b", help="the run compared against it")
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="relative change marked as regression (default 0.1)",
    )


def add_history(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="the runs' name (e.g. of a nightly recording)")


def add_archive(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--archive",
        metavar="URL",
        help="read the runs published to this archive (an fsspec URL: a shared "
        "directory, s3://bucket/path) rather than the local store",
    )


def open_reading(
    args: argparse.Namespace, local: Callable[[], Store]
) -> Store | Archive:
    """What a reading subcommand reads: the archive of ``--archive``, else
    the local store that ``local`` opens."""
    if getattr(args, "archive", None):
        return open_archive(args.archive)
    return local()


def add_reading(
    commands: Any,
    *,
    run_optional: bool,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> dict[str, argparse.ArgumentParser]:
    """Add the reading subcommands to ``commands`` (an argparse subparsers
    action) and return their parsers by name; ``extra`` adds a front end's
    own arguments to each (the magics' ``--store``)."""
    parsers = {
        name: commands.add_parser(name, help=text) for name, text in HELP.items()
    }
    for name in ("logs", "flags", "stacks", "profile", "report"):
        add_run(parsers[name], optional=run_optional)
    parsers["profile"].add_argument(
        "--prefix", default="", help="one task prefix's profile (default: all)"
    )
    add_log_filters(parsers["logs"])
    parsers["stacks"].add_argument(
        "--full", action="store_true",
        help="every frame (by default runs of library frames are one line each)",
    )  # fmt: skip
    add_compare(parsers["compare"])
    add_history(parsers["history"])
    for parser in parsers.values():
        add_archive(parser)
    if extra is not None:
        for parser in parsers.values():
            extra(parser)
    return parsers


def logs(run: Run, args: argparse.Namespace, **more: Any) -> list[dict[str, Any]]:
    """The lines ``logs`` shows of ``run``, as records (``Run.log_records``)."""
    return run.log_records(**log_filters(args), **more)


def flags(run: Run) -> list[dict[str, Any]]:
    """The flags ``flags`` shows of ``run``, as the report tells them: the
    answer first, repeats folded (``diagnose.lead``); each a dict of its
    fields."""
    return [asdict(flag) for flag in lead(run.flag_list())]


def profile(run: Run, prefix: str = "") -> Iterator[str]:
    """The lines ``profile`` shows of ``run`` (``plaintext.profile_lines``)."""
    native = run.native_profile() or {}
    return profile_lines(
        run.profile(),
        run.native(),
        prefix=prefix,
        unavailable=native.get("unavailable"),
    )

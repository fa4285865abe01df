"""The ``dask-observe`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dask_observe.store import Store, StoreError


def _open(args: argparse.Namespace) -> Store:
    from dask_observe import open_store

    return open_store(args.store)


def cmd_runs(args: argparse.Namespace) -> int:
    with _open(args) as store:
        runs = store.runs()
        if runs.empty:
            print(
                f"No runs in {store.path} yet. Record one with `dask-observe demo`, "
                "or with %%dask_record in a notebook."
            )
            return 0
    for column in ("started", "ended"):
        runs[column] = runs[column].dt.tz_convert(None).dt.strftime("%Y-%m-%d %H:%M:%S")
    runs["duration_s"] = runs["duration_s"].round(2)
    print(runs.fillna("").to_string(index=False))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from dask_observe.demo import print_summary, run_demo

    with _open(args) as store:
        run = run_demo(store, n_workers=args.workers)
        print_summary(run, store)
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
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    runs = commands.add_parser("runs", help="list recorded runs, newest first")
    runs.set_defaults(func=cmd_runs)
    demo = commands.add_parser(
        "demo", help="record a sample workload on an embedded LocalCluster"
    )
    demo.add_argument("--workers", type=int, default=2, help="number of workers")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except StoreError as e:
        print(f"dask-observe: error: {e}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())

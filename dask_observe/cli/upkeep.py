"""The commands that change what is kept: redact, publish, prune."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from dask_observe.api.archive import open_archive
from dask_observe.archive import ArchiveError, configured_location, publish
from dask_observe.archive.location import NO_ARCHIVE
from dask_observe.cli.reading import store_of
from dask_observe.plaintext import visible
from dask_observe.redact import configured
from dask_observe.store.retention import Policy
from dask_observe.units import format_bytes, parse_bytes, parse_seconds

if TYPE_CHECKING:
    pass


def cmd_redact(args: argparse.Namespace) -> int:
    redactor = configured()
    if not redactor.enabled:
        raise ValueError("observe.redact.enabled is false: there is nothing to apply")
    with store_of(args, readonly=args.dry_run) as store:
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
    if (args.run is None) == (not args.all):
        raise ValueError("publish needs a run id (or last), or --all")
    location = configured_location(args.archive)
    if location is None:
        raise ArchiveError(NO_ARCHIVE.replace("give its URL", "give --archive URL"))
    with store_of(args) as store:
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
    with store_of(args, readonly=args.dry_run) as store:
        pruned = store.prune(policy, dry_run=args.dry_run)
        running = [r["id"] for r in store.run_records() if r["status"] == "running"]
    ids = ", ".join(str(r["id"]) for r in reversed(pruned.runs))
    runs = f"{len(pruned.runs)} run{'s' if len(pruned.runs) > 1 else ''} ({ids})"
    if not pruned.runs:
        print(visible(f"Nothing to prune in {store.path}."))
    elif pruned.dry_run:
        print(f"Would prune {runs}: {pruned.rows:,} rows. Nothing changed (--dry-run).")
    else:
        before, after = (
            format_bytes(pruned.bytes_before),
            format_bytes(pruned.bytes_after),
        )
        print(f"Pruned {runs}: {pruned.rows:,} rows; the store went from {before}")
        print(f"to {after}.")
    limit = policy.max_bytes
    if limit is not None and not pruned.dry_run and pruned.bytes_after > limit:
        # The size asked for is not met: say so, and why when runs hold it.
        size = format_bytes(pruned.bytes_after)
        still = f"The store is {size}, above {format_bytes(limit)}"
        if running:
            held = ", ".join(map(str, running))
            many = len(running) > 1
            still += (
                f": run{'s' if many else ''} {held}, still running, "
                f"hold{'' if many else 's'} every row stored since "
                f"{'the first' if many else 'it'} began"
            )
        print(f"{still}.")
    return 0


def _prune_archive(args: argparse.Namespace, policy: Any) -> int:
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

"""The commands that record or change the store: record, demo, redact,
publish, prune."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from dask_observe.cli.reading import store_of
from dask_observe.plaintext import visible
from dask_observe.store.outcome import status_line, tasks_text

if TYPE_CHECKING:
    from dask_observe.api import Run


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


#: How often a command waiting for Ctrl-C looks for one (see ``_Until.wait``).
SIGNAL_CHECK_S = 0.2


class _Until:
    """When a headless recording ends: at the first Ctrl-C (or SIGTERM), or
    when its cluster goes; after the first, a second Ctrl-C leaves at once.

    The run's end waits on the scheduler (every worker flushed), which may
    never answer (a frozen process): the second Ctrl-C is the user's way out.
    What is stored stays readable, as after a crash, and the run reads
    'interrupted' once its process is gone.
    """

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.run_id: int | None = None  # named by the way out, once known
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._stopping)

    def _stopping(self, *_: object) -> None:
        signal.signal(signal.SIGINT, self._leave)
        self.stop.set()

    def _leave(self, *_: object) -> None:
        which = "the run" if self.run_id is None else f"run {self.run_id}"
        print(
            f"dask-observe: left at once; {which} is kept as it stood "
            "(it reads 'interrupted').",
            file=sys.stderr,
            flush=True,
        )
        os._exit(130)

    def wait(self, gone: threading.Event) -> None:
        """Until a Ctrl-C or ``gone``: the cluster may end first (a nightly
        job shutting its cluster down), and the recording ends with it."""

        def stop_when_gone() -> None:
            gone.wait()
            self.stop.set()

        threading.Thread(target=stop_when_gone, name="until-gone", daemon=True).start()
        # In turns, not one wait: Python runs a signal's handler in the main
        # thread, between bytecodes. A Ctrl-C the kernel hands to another of
        # this process's threads does not interrupt the main thread's wait,
        # and the suite once waited 120 s for a recorder to say it ends.
        while not self.stop.wait(SIGNAL_CHECK_S):
            pass


def cmd_record(args: argparse.Namespace) -> int:
    import logging

    from distributed import Client

    from dask_observe.recording.lifecycle import Recording

    try:
        client = Client(args.scheduler, timeout=args.timeout, security=_security(args))
    except OSError as e:
        where = f"cannot reach the scheduler at {args.scheduler}: {e}"
        print(visible(f"dask-observe: error: {where}"), file=sys.stderr)
        return 1
    until = _Until()
    with client, store_of(args, create=True) as store:
        recording = Recording(args.name, client, store, whole_cluster=True)
        run = recording.start()
        until.run_id = run.id
        print(f"Recording run {run.id} {run.name!r} from {args.scheduler}")
        print(f"into {store.path}")
        print("Stop with Ctrl-C; it stops by itself when the cluster closes.")
        sys.stdout.flush()
        until.wait(recording.cluster_gone)
        if recording.cluster_gone.is_set():
            why = "closed" if recording.cluster_closed else "stopped answering"
            print(visible(f"The scheduler at {args.scheduler} {why}."), flush=True)
            # The client, still trying to reconnect, logs the attempt's
            # traceback as it is closed: noise once the cluster is gone.
            logging.getLogger("distributed.client").setLevel(logging.CRITICAL)
        print("Ending the run (Ctrl-C again to leave at once)...", flush=True)
        run = recording.stop("finished")
        recording.finish_export(timeout=30)
        print(ended_line(run))
    # A run that failed (its scheduler lost mid-run) says so to a script too.
    return 0 if run.status == "finished" else 1


def ended_line(run: Run) -> str:
    """What a headless run came to, in a line a nightly job's log keeps: its
    tasks, failures and flags, and the command that explains them."""
    summary = run.summary()
    line = f"Recorded run {run.id}: {tasks_text(summary)}, {status_line(summary)}"
    kinds = list(dict.fromkeys(flag.kind for flag in run.flag_list()))
    if kinds:
        line += f"; flags: {', '.join(kinds)} (dask-observe flags {run.id})"
    return visible(line)


def cmd_demo(args: argparse.Namespace) -> int:
    from dask_observe.demo import print_summary, run_demo

    with store_of(args, create=True) as store:
        runs = run_demo(store, n_workers=args.workers)
        print_summary(runs, store)
    return 0


def cmd_redact(args: argparse.Namespace) -> int:
    from dask_observe.redact import configured

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
    from dask_observe.archive import ArchiveError, configured_location, publish
    from dask_observe.archive.location import NO_ARCHIVE
    from dask_observe.units import format_bytes

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
    from dask_observe.api.archive import open_archive
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

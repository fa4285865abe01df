"""The commands that record: record (a cluster, headless, until Ctrl-C or
its close) and demo (four runs on an embedded LocalCluster)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from dask_observe.cli.reading import store_of
from dask_observe.demo import print_summary, run_demo
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
    with store_of(args, create=True) as store:
        runs = run_demo(store, n_workers=args.workers)
        print_summary(runs, store)
    return 0

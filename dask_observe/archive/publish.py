"""A run of a local store published to an archive: one self-describing folder
and, written last, its manifest.

    runs/<uid>/tasks.parquet ... events.parquet   the run's rows as stored
    runs/<uid>/fine_metrics.parquet, profiles.parquet
    runs/<uid>/flags.parquet, transfers.parquet   as run.flags(), run.transfers()
    runs/<uid>/run.json, environment.json, verdict.json
    manifests/<uid>.json                           the run's listing and history

A reader lists manifests only: a run whose publisher died before its
manifest is not there (a retry writes the same folder: the uid is kept in the
local store from the first try). The manifest carries what a listing and a
history need (counts, wall time, each prefix's pace, peak memory, the
environment), so that neither reads a run's tables.
"""

from __future__ import annotations

# Its exit callback registered before ours (at hold_exit_for) runs after it.
import concurrent.futures.thread  # noqa: F401
import getpass
import io
import json
import logging
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from dask_observe import config, diagnose, redact
from dask_observe.analysis.figures import peak_memory
from dask_observe.analysis.history import per_task
from dask_observe.archive.location import (
    FORMAT,
    ArchiveError,
    Location,
    configured,
    new_uid,
)
from dask_observe.diagnose import Flag, flags_frame
from dask_observe.export.parquet import _json_column
from dask_observe.store import BaseStore, slices

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd

    from dask_observe.store import RunData

logger = logging.getLogger("dask_observe.archive")

#: Columns of a run's row that its manifest and run.json carry.
RUN_FIELDS = (
    "name", "status", "started", "ended", "n_tasks", "n_failed", "n_flags", "n_lost",
    "n_running", "cluster", "span_id", "partial", "host", "pid",
)  # fmt: skip


@dataclass
class Published:
    """What a publish did: the runs written (local id -> archive id), the
    bytes, and the runs that failed (local id -> why)."""

    uids: dict[int, str] = field(default_factory=dict)
    nbytes: int = 0
    failed: dict[int, str] = field(default_factory=dict)


def _parquet(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def _json(value: Any) -> bytes:
    return json.dumps(value, default=str, sort_keys=True).encode()


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return None


def publish_run(run: RunData, location: Location) -> tuple[str, int]:
    """Write ``run`` (ended) to ``location``; its archive id and the bytes
    written."""
    store = run.store
    if run.status == "running":
        raise ArchiveError(f"run {run.id} is still running: publish it when it ends")
    # Claimed first: a try that fails from here on is retried, into this folder.
    uid = store.archive_marks.claim_uid(run.id, location.url, new_uid(run.started))
    record, tables = slices.take(store, run.id)
    flags = diagnose.judged_flags(run)
    stored = store.kept.judgement(run.id)
    version = stored[0] if stored is not None else config.version()
    tables.pop("verdict", None)
    redactor = redact.configured()
    record, tables = slices.redacted(record, tables, redactor)
    environment = record.pop("environment", None) or {}
    # What is made of the rows (flags quote log lines and exceptions in their
    # evidence; transfers name keys) is redacted as they are.
    judged = redactor.data([asdict(f) for f in flags])
    derived = {
        "flags": _json_column(flags_frame([Flag(**f) for f in judged]), "evidence"),
        "transfers": slices.redacted_frame(run.transfers(), redactor),
    }
    # Each row says its run: the archive read as one dataset (Dask, DuckDB,
    # Spark over runs/*/tasks.parquet) groups by it.
    files: dict[str, bytes] = {
        f"{name}.parquet": _parquet(frame.assign(run=uid))
        for name, frame in {**tables, **derived}.items()
    }
    ended = record["ended"]
    listing = {
        "format": FORMAT,
        "uid": uid,
        **{k: record.get(k) for k in RUN_FIELDS},
        "duration_s": None if ended is None else ended - record["started"],
        "user": _user(),
        "published": time.time(),
        "version": config.version(),
    }
    # The run's bounds in its store's sequence, which its rows' ``seq`` count in.
    bounds = {k: record[k] for k in ("seq_start", "seq_end")}
    files["run.json"] = _json({**listing, **bounds, "settings": record.get("settings")})
    files["environment.json"] = _json(environment)
    # (verdict.json: the archive's format, read by every version since.)
    files["verdict.json"] = _json({"version": version, "flags": judged})
    for name, data in files.items():
        location.write(location.run_path(uid, name), data)
    manifest = {
        **listing,
        "flags": sorted({f.kind for f in flags}),
        "pace": per_task(run) if record["status"] == "finished" else {},
        "peak_memory": peak_memory(run),
        "environment": environment,
        "files": {name: len(data) for name, data in files.items()},
    }
    data = _json(manifest)
    location.write(location.manifest_path(uid), data)
    store.archive_marks.set_published(run.id, location.url)
    return uid, sum(len(d) for d in files.values()) + len(data)


def publish(
    store: BaseStore,
    run_ids: list[int],
    location: Location,
    *,
    progress: Callable[[int], None] | None = None,
) -> Published:
    """Publish each of ``run_ids`` (ended runs of ``store``) in turn; one that
    fails is said in the result, the others go on. ``progress`` is told how
    many are done after each."""
    done = Published()
    for i, run_id in enumerate(run_ids, 1):
        try:
            uid, nbytes = publish_run(store.run(run_id), location)
        except Exception as e:  # one run's failure is said; the rest go on
            done.failed[run_id] = f"{type(e).__name__}: {e}"
        else:
            done.uids[run_id] = uid
            done.nbytes += nbytes
        if progress is not None:
            progress(i)
    return done


def configured_location(
    url: str | None = None, options: dict[str, Any] | None = None
) -> Location | None:
    """The archive ``url``, else ``observe.archive`` (with ``options``, else
    ``observe.archive-options``); None when no archive is set."""
    url, options = configured(url, options)
    return None if url is None else Location(url, options)


#: One publisher at a time per process: two run ends retrying the same
#: pending runs would write them twice.
_publishing = threading.Lock()

#: How long a process that is exiting waits for its runs' publishing.
EXIT_WAIT_S = 600.0
_exiting: set[threading.Thread] = set()
_exit_lock = threading.Lock()
_exit_registered = False


#: CPython 3.12.0 and 3.12.1 refuse to start a thread once the main thread has
#: finished, even from a thread that still runs or an exit callback
#: (CPython gh-113964, mended in 3.12.2); publishing starts threads (s3fs's
#: IO loop, aiobotocore's pools).
_NO_THREADS_AT_EXIT = (3, 12, 0) <= sys.version_info[:3] < (3, 12, 2)


def _interactive() -> bool:
    """Whether this process goes on after a block (an IPython kernel or shell,
    a REPL), rather than maybe ending with it (a script)."""
    if hasattr(sys, "ps1") or sys.flags.interactive:
        return True
    ipython = sys.modules.get("IPython")
    return ipython is not None and ipython.get_ipython() is not None


def hold_exit_for(thread: threading.Thread) -> None:
    """Make an exiting process wait for ``thread`` (a run's end that
    publishes) before its thread pools stop taking work; on a Python that
    starts no thread at exit, a script waits for it here, as its block ends.

    A script's last block ends just before the interpreter does. Python joins
    a non-daemon thread at exit only after ``concurrent.futures`` has stopped
    taking work, and object-store clients (s3fs, aiobotocore) need their pools:
    every publish of a nightly script failed with "cannot schedule new futures
    after interpreter shutdown". Exit callbacks of ``threading`` run newest
    first, so one registered after ``concurrent.futures`` runs before its own.
    """
    global _exit_registered
    if _NO_THREADS_AT_EXIT and not _interactive():
        # The script may end with this block: publishing then would race the
        # interpreter's end and lose (half the nightly runs' last publishes).
        thread.join(EXIT_WAIT_S)
        return
    with _exit_lock:
        _exiting.add(thread)
        if _exit_registered:
            return
        register = getattr(threading, "_register_atexit", None)
        if register is None:  # another Python: the join at exit is all there is
            return
        try:
            register(_wait_for_publishing)
        except RuntimeError:  # the interpreter is exiting already
            return
        _exit_registered = True


def _wait_for_publishing() -> None:
    deadline = time.monotonic() + EXIT_WAIT_S
    with _exit_lock:
        threads = list(_exiting)
        _exiting.clear()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def publish_at_end(
    store_path: str, run_id: int, url: str, options: dict[str, Any]
) -> None:
    """A run's end (``observe.archive`` set, as read when the block ended):
    publish it, and the runs whose publishing failed before (a retry).
    Failures are one warning."""
    try:
        location = Location(url, options)
    except ArchiveError as e:
        logger.warning("dask-observe: cannot publish run %s: %s", run_id, e)
        return
    with _publishing, BaseStore(store_path) as store:
        pending = [
            r for r in store.archive_marks.unpublished(location.url) if r != run_id
        ]
        done = publish(store, [*pending, run_id], location)
    if done.failed:
        ids = ", ".join(str(r) for r in done.failed)
        why = next(iter(done.failed.values()))
        logger.warning(
            "dask-observe: cannot publish run(s) %s to %s (%s); tried again when "
            "the next run ends",
            ids,
            location.url,
            why,
        )

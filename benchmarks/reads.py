"""What readers of one very large run wait for: the side panel's reads through
the server's store API, the report, and judging the run's flags.

    .venv/bin/python benchmarks/reads.py --copies 50

Recording a million tasks takes a quarter of an hour on two cores (``scale.py``
does it); reading them back does not need a new recording each time. This
records one real run of about 22,000 tasks on a LocalCluster (20,000 mapped
futures and an array sum), then copies its task rows ``--copies`` times into
the same run's slice of the store (keys renamed, numbered after the run's own
rows), so that the run holds ``--copies`` x its tasks, with its real metrics,
logs and events. The run's end is made again on all of them (its verdict, and
its report's task figures where the code has them), as the run's end would
have (timed: the end-of-run cost at that size). ``--store`` keeps the store for
the next try (another version's must read a copy: the newer schema is not
the older code's). Then
it times, in a read-only store as the Jupyter server opens it: the run list,
the run (summary and flags), its report, a page of log lines, and
``run.tasks()`` alone.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import dask.array as da
import dask.config
from distributed import Client, LocalCluster

import dask_observe
from dask_observe.diagnose import flag_list
from dask_observe.recording import finish
from dask_observe.server import routes
from dask_observe.store import BaseStore
from dask_observe.store.retention import file_bytes


def record(path: Path) -> None:
    with (
        dask.config.set({"distributed.scheduler.worker-saturation": float("inf")}),
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as c,
        Client(c) as client,
        dask_observe.record("big", client=client, store=dask_observe.open_store(path)),
    ):
        futures = client.map(abs, range(20_000), pure=False)
        client.gather(futures)
        del futures
        (da.ones((2000,), chunks=1) + 1).sum().compute()


def inflate(path: Path, copies: int) -> int:
    """Copy the last run's task rows ``copies - 1`` times into its slice;
    returns the run's task count."""
    with sqlite3.connect(path) as conn:
        run_id, first, last = conn.execute(
            "SELECT id, seq_start, seq_end FROM runs ORDER BY id DESC LIMIT 1"
        ).fetchone()
        columns = [r[1] for r in conn.execute("PRAGMA table_info(tasks)")][1:]
        top = conn.execute("SELECT value FROM sequence").fetchone()[0]
        span = last - first + 1
        for k in range(1, copies):
            selected = ", ".join(
                f"key || '-copy{k}'" if c == "key" else c for c in columns
            )
            conn.execute(
                f"INSERT INTO tasks (seq, {', '.join(columns)}) "
                f"SELECT seq + ?, {selected} FROM tasks WHERE seq > ? AND seq <= ?",
                (top - first + (k - 1) * span + 1, first, last),
            )
        end = conn.execute("SELECT max(seq) FROM tasks").fetchone()[0]
        conn.execute("UPDATE sequence SET value = ?", (end,))
        n = conn.execute(
            "SELECT count(*) FROM tasks WHERE seq > ? AND seq <= ?", (first, end)
        ).fetchone()[0]
        conn.execute(
            "UPDATE runs SET seq_end = ?, n_tasks = ? WHERE id = ?", (end, n, run_id)
        )
    return int(n)


def timed(what: str, action: Any) -> Any:
    started = time.perf_counter()
    result = action()
    print(f"  {what}: {time.perf_counter() - started:.3f} s", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=50)
    parser.add_argument(
        "--store",
        type=Path,
        help="keep the store here; one there already is read again as it is "
        "(its run already inflated)",
    )
    args = parser.parse_args()

    path = args.store or Path(tempfile.mkdtemp()) / "reads.sqlite"
    if not path.exists():
        record(path)
        inflate(path, args.copies)
    with dask_observe.open_store(path) as store:  # (upgrades an older one)
        n = store.run("last").summary()["n_tasks"]
    print(f"one run of {n:,} tasks; store {file_bytes(path) / 2**20:.0f} MiB")
    with dask_observe.open_store(path) as store:
        run = store.run("last")
        # As the run's end does at that size (in a thread after the block):
        # the verdict its real end stored was of its own 22,000 tasks.
        if hasattr(finish, "judge"):  # with the report's task figures
            flags = timed(
                "the run's end (verdict, task figures)", lambda: finish.judge(run)
            )
        else:
            flags = timed(
                "judging the flags (at the run's end)", lambda: flag_list(run)
            )
            timed("storing the verdict", lambda: run.keep_judged_flags(flags))
        print(f"    {[f.kind for f in flags]}")
    # The side panel's reads, as the server makes them (a read-only store).
    with BaseStore(path, readonly=True) as store:
        timed("panel: the run list", store.run_records)
        timed("panel: the run (summary, flags)", lambda: routes.read_run(store, "last"))
        html = timed("panel: its report", lambda: routes.read_report(store, "last"))
        print(f"    {len(html) / 2**10:.0f} KiB of HTML")
        page: dict[str, Any] = {"after": 0, "limit": 500, "upto": None, "filters": {}}
        timed("panel: log lines", lambda: routes.read_logs(store, "last", page))
    with dask_observe.open_store(path) as store:
        timed("run.tasks()", lambda: store.run("last").tasks())


if __name__ == "__main__":
    main()

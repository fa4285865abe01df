"""What grows with a store's age: the panel's run list, the archive's listing,
pruning one run, and the store's bytes a run, at 10 runs and at 1,000.

    .venv/bin/python benchmarks/growth.py [--sizes 10,1000] [--repeat 5]

One real run is recorded on a LocalCluster of 2 worker processes (200 tasks,
each printing a line); each store of N runs holds N copies of it
(``store.slices``, under new ids, as ``history.py`` does), and each archive N
copies of its published manifest (as ``archive.py`` does). Measured at each
size, the median of ``--repeat``:

- the panel's run list: the server's answer to ``/api/runs?limit=100``
  (``routes.read_runs_page``, then JSON), and its bytes; and to ``/api/runs``
  (every run), as the panel asked before;
- the archive's listing from its compacted listing: by a new reader, and
  again by the same one (as the server does each time the panel asks, which
  keeps what it read while the files are unchanged), and the bytes of the
  page the panel asks for;
- pruning the oldest run, as ``observe.retention``'s ``keep-last`` does when
  a run ends, and as ``dask-observe prune`` does (which always gives the
  space back), each time on a fresh copy of the store;
- the store's bytes a run (its file, the log checkpointed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from distributed import Client, LocalCluster

import dask_observe
from dask_observe.archive import Location, publish
from dask_observe.server.archive_routes import read_archive_runs
from dask_observe.server.routes import read_runs_page
from dask_observe.store import BaseStore, slices
from dask_observe.store.retention import Policy, file_bytes

sys.path.insert(0, str(Path(__file__).parent))

#: The cards the panel shows at first (``RUNS_PAGE`` in ``src/data/polledlist.ts``).
RUNS_PAGE = 100


def chatty(i: int) -> int:
    print(f"row {i} done")
    return i


def record(path: Path) -> None:
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as c,
        Client(c) as client,
        dask_observe.record("nightly", client=client, store=path),
    ):
        client.gather(client.map(chatty, range(200), pure=False))


def grown(source: Path, path: Path, runs: int) -> None:
    """A store of ``runs`` copies of the source's run."""
    shutil.copy(source, path)
    with BaseStore(path) as store:
        taken = slices.take(store, 1)
        for _ in range(runs - 1):
            slices.put(store, *taken)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def archived(source: Path, folder: Path, runs: int) -> str:
    """An archive of ``runs`` copies of the source run's manifest."""
    url = str(folder / f"archive-{runs}")
    with dask_observe.open_store(source) as store:
        done = publish(store, [1], Location(url))
    location = Location(url)
    with dask_observe.open_archive(url) as archive:
        manifest = archive.run_records()[0]
    started = time.time() - 86400 * 400
    for i in range(1, runs):
        uid = f"20260101T{i // 3600 % 24:02d}{i // 60 % 60:02d}{i % 60:02d}Z-{i:012x}"
        copy = {**manifest, "uid": uid, "started": started + i * 3600}
        copy.pop("id", None)
        location.write(location.manifest_path(uid), json.dumps(copy).encode())
    assert done.uids
    with dask_observe.open_archive(url) as archive:
        archive.runs()  # the first listing compacts what later ones read
    return url


def answered(store: BaseStore, limit: int | None) -> str:
    return json.dumps(read_runs_page(store, limit))


def median_s(function: Callable[[], Any], repeat: int) -> float:
    taken = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        taken.append(time.perf_counter() - start)
    return statistics.median(taken)


def measure(source: Path, folder: Path, runs: int, repeat: int) -> dict[str, str]:
    path = folder / f"store-{runs}.sqlite"
    grown(source, path, runs)
    found: dict[str, str] = {}
    with BaseStore(path, readonly=True) as store:
        for what, limit in (("the panel's run list", RUNS_PAGE), ("every run", None)):
            answer = json.dumps(read_runs_page(store, limit))
            taken = median_s(partial(answered, store, limit), repeat)
            size = f"{len(answer) / 1024:.0f} KiB"
            found[f"/api/runs, {what}"] = f"{taken * 1000:.1f} ms ({size})"
    url = archived(source, folder, runs)
    # Files written within the last 2 s are read again whatever their stamp
    # (``location._RACY_NS``): an archive as a server finds it is older.
    time.sleep(2.1)

    def first_listing() -> None:
        with dask_observe.open_archive(url) as archive:
            archive.run_records()

    taken = median_s(first_listing, repeat) * 1000
    found["archive listing, a new reader"] = f"{taken:.1f} ms"
    with dask_observe.open_archive(url) as archive:
        archive.run_records()
        again = median_s(archive.run_records, repeat) * 1000
        found["archive listing, again (the server's each poll)"] = f"{again:.1f} ms"
        answer = json.dumps(read_archive_runs(url, {}, RUNS_PAGE))
        found["archive listing, the panel's page"] = f"{len(answer) / 1024:.0f} KiB"
    for what, compact in (("as a recorder does", False), ("dask-observe prune", True)):
        pruning = []
        for _ in range(repeat):
            copy = folder / "pruned.sqlite"
            shutil.copy(path, copy)
            with BaseStore(copy) as store:
                start = time.perf_counter()
                pruned = store.prune(Policy(keep_last=runs - 1), compact=compact)
                pruning.append(time.perf_counter() - start)
            assert len(pruned.runs) == 1
            for leftover in folder.glob("pruned.sqlite*"):
                leftover.unlink()
        taken = statistics.median(pruning) * 1000
        found[f"prune the oldest run, {what}"] = f"{taken:.1f} ms"
    found["store bytes a run"] = f"{file_bytes(path) / runs / 1024:.0f} KiB"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,1000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        os.chmod(folder, 0o700)
        source = folder / "source.sqlite"
        record(source)
        with sqlite3.connect(source) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        results = {runs: measure(source, folder, runs, args.repeat) for runs in sizes}
    print("| what | " + " | ".join(f"{n:,} runs" for n in sizes) + " |")
    print("| --- |" + " --- |" * len(sizes))
    for what in results[sizes[0]]:
        print(f"| {what} | " + " | ".join(results[n][what] for n in sizes) + " |")


if __name__ == "__main__":
    main()

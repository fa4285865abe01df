"""The team's archive: what publishing a run costs (time and bytes, at 1,000,
100,000 and a million tasks), reading one back, and listing and judging the
history of 10,000 runs, in a local directory and in an S3 server (moto's,
started here on the loopback).

    .venv/bin/python benchmarks/archive.py [--runs 10000] [--sizes 1000,100000,1000000]

One real run of 1,000 tasks is recorded on a LocalCluster; the larger ones
are that run's task rows copied into its slice of the store (as
``benchmarks/reads.py`` does). The 10,000 runs are one published run's
manifest copied under other ids (each a run to list and judge; their folders
are not needed for that).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from distributed import Client, LocalCluster

import dask_observe
from dask_observe.archive import Location, publish
from dask_observe.archive.location import RUN_TABLE_BYTES

sys.path.insert(0, str(Path(__file__).parent))
from reads import inflate


def record(path: Path) -> None:
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as c,
        Client(c) as client,
        dask_observe.record(
            "nightly", client=client, store=dask_observe.open_store(path)
        ),
    ):
        client.gather(client.map(abs, range(1000), pure=False))


def timed(what: str, function: Any, *args: Any) -> Any:
    start = time.perf_counter()
    result = function(*args)
    print(f"  {what}: {time.perf_counter() - start:.2f} s", flush=True)
    return result


def publishing(folder: Path, sizes: list[int]) -> str:
    """Publish the run at each size; return a published run's archive URL."""
    url = str(folder / "sized")
    for size in sizes:
        store_path = folder / f"store-{size}" / "observe.sqlite"
        store_path.parent.mkdir(mode=0o700)
        record(store_path)
        if size > 1000:
            inflate(store_path, size // 1000)
        store = dask_observe.open_store(store_path)
        run = store.run("last")
        flags = run.flag_list()
        store.kept.set_judgement(run.id, [f.__dict__ for f in flags], "bench")
        print(f"{run.summary()['n_tasks']:,} tasks", flush=True)
        location = Location(url)
        done = timed("publish", publish, store, [run.id], location)
        uid = done.uids[run.id]
        print(f"  bytes: {done.nbytes / 2**20:.1f} MiB", flush=True)
        with dask_observe.open_archive(url) as archive:
            timed("read back (archive.run)", archive.run, uid)
        store.close()
    return url


def many(url: str, target: str, options: dict[str, Any], n: int) -> None:
    """``n`` runs in the archive at ``target``: listing and history, cold and warm."""
    source = dask_observe.open_archive(url)
    manifest = source.run_records()[0]
    location = Location(target, options)
    started = time.time() - 86400 * 30
    files = {}
    # The first runs of a history are compared with the one before (fewer
    # than five before them): those few are read whole, so they have folders.
    source_files = {
        name: source.location.read(
            source.location.run_path(manifest["uid"], name), RUN_TABLE_BYTES
        )
        for name in manifest["files"]
    }
    for i in range(n):
        uid = f"20260101T{i // 3600 % 24:02d}{i // 60 % 60:02d}{i % 60:02d}Z-{i:012x}"
        copy = {**manifest, "uid": uid, "started": started + i * 60}
        copy.pop("id", None)
        files[location.manifest_path(uid)] = json.dumps(copy).encode()
        if i < 8:
            for name, data in source_files.items():
                files[location.run_path(uid, name)] = data
    start = time.perf_counter()
    if location.local:
        for path, data in files.items():
            location.write(path, data)
    else:
        location.fs.pipe(files)
    print(f"  writing {n:,} manifests: {time.perf_counter() - start:.1f} s")
    archive = dask_observe.open_archive(target, storage_options=options)
    timed(f"runs(), {n:,} runs, first listing (reads each, compacts)", archive.runs)
    timed(f"runs(), {n:,} runs, from the compacted listing", archive.runs)
    timed(f"history('nightly') of {n:,} runs", archive.history, "nightly")
    timed("history('nightly', last=50)", archive.history, "nightly", 50)


def s3_server() -> tuple[subprocess.Popen[bytes], str]:
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(endpoint, timeout=1)
            break
        except OSError as e:
            if "HTTP Error" in str(e):
                break
            time.sleep(0.1)
    return server, endpoint


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--sizes", default="1000,100000,1000000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o700)
        url = publishing(Path(folder), sizes)
        print(f"local directory, {args.runs:,} runs", flush=True)
        many(url, str(Path(folder) / "many"), {}, args.runs)
        server, endpoint = s3_server()
        try:
            import s3fs

            options = {"client_kwargs": {"endpoint_url": endpoint}}
            s3fs.S3FileSystem(**options).mkdir("bench")
            print(f"S3 (moto on the loopback), {args.runs:,} runs", flush=True)
            many(url, "s3://bench/many", options, args.runs)
        finally:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()

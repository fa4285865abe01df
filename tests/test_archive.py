"""A team's archive: runs published from two "machines" (processes with a
store each) to one shared directory, and to a real S3-compatible server
started here (moto's), then read by a process with no store of its own."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import pandas as pd
import pytest

import dask_observe
from dask_observe.api.archive import Archive
from dask_observe.archive import listing
from dask_observe.archive.location import MANIFESTS, RUNS

from .conftest import DASK_OBSERVE, NO_GIL_MONITOR, wait_until
from .remote import free_port

ROOT = Path(__file__).parent.parent
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class Backend:
    """An archive URL, with what a process needs to reach it."""

    def __init__(self, url: str, options: dict[str, Any], env: dict[str, str]):
        self.url = url
        self.options = options
        self.env = env

    def environment(self, store: Path | None) -> dict[str, str]:
        """A process of its own: its store (None: a path never made), this
        archive as ``observe.archive``."""
        env = {**os.environ, **self.env, "DASK_OBSERVE__ARCHIVE": self.url}
        env["DASK_OBSERVE__STORE"] = str(store or "/nonexistent/observe.sqlite")
        if self.options:
            env["DASK_OBSERVE__ARCHIVE_OPTIONS"] = json.dumps(self.options)
        return env

    def open(self) -> Archive:
        return dask_observe.open_archive(self.url, storage_options=self.options)

    def files(self) -> dict[str, bytes]:
        """Every file under the archive, by its path in the archive."""
        import fsspec

        fs, root = fsspec.core.url_to_fs(self.url, **self.options)
        root = root.rstrip("/") + "/"
        return {p.removeprefix(root): fs.cat_file(p) for p in fs.find(root)}


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    """moto's S3 server on this machine, its endpoint."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **S3_CREDENTIALS},
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        import urllib.request

        def up() -> bool:
            try:
                urllib.request.urlopen(endpoint, timeout=1)
            except OSError as e:
                return "HTTP Error" in str(e)
            return True

        wait_until(up, "the S3 server to answer", timeout=60)
        yield endpoint
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture(params=["directory", "s3"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Backend:
    if request.param == "directory":
        return Backend(str(tmp_path / "team-archive"), {}, {})
    endpoint = request.getfixturevalue("s3_server")
    for key, value in S3_CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    options = {"client_kwargs": {"endpoint_url": endpoint}}
    import s3fs

    bucket = f"team-{request.node.name.replace('[', '-').rstrip(']')}"[:60].lower()
    bucket = "".join(c if c.isalnum() or c == "-" else "-" for c in bucket)
    s3fs.S3FileSystem(**options).mkdir(bucket)
    return Backend(f"s3://{bucket}/runs", options, S3_CREDENTIALS)


#: A task's nap in the machines' runs (8 on 4 threads: a run of ~2 naps). At
#: 0.2 s the runs took ~0.4 s, and the load of the tests beside this one
#: doubled one now and then, which the history rightly took for a regression
#: (it failed 2 runs of the suite in ~8); at 0.5 s that load adds well under
#: a run.
NAP_S = 0.5


def machine(
    backend: Backend, store: Path, runs: int, *extra: str
) -> subprocess.Popen[bytes]:
    arguments = ["nightly", str(runs), str(NAP_S), *extra]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.machine", *arguments],
        cwd=ROOT,
        env={**backend.environment(store), **NO_GIL_MONITOR},
        stderr=subprocess.PIPE,
    )


#: What the team's history and comparison take for a regression here: twice
#: as slow. The last run is five times slower; the others, recorded while the
#: suite runs other tests beside this one, vary by more than the default 10%
#: (a run was judged a regression so). That floor is tested in test_compare.
TWICE_AS_SLOW = 1.0


def test_two_machines_publish_and_a_third_reads_the_teams_history(
    backend: Backend, tmp_path: Path
) -> None:
    # Two processes with a store each record `nightly` runs at the same time,
    # each published at its end by observe.archive; the second's last run,
    # started after the first's are done, is 5x slower.
    first_done = tmp_path / "first-done"
    a_store, b_store = tmp_path / "a" / "observe.sqlite", tmp_path / "b" / "s.sqlite"
    a = machine(backend, a_store, 4, "--done", str(first_done))
    b = machine(backend, b_store, 3, "--slow-last-after", str(first_done))
    for process in (a, b):
        _, err = process.communicate(timeout=180)
        assert process.returncode == 0, err.decode()[-3000:]
        assert b"cannot publish" not in err, err.decode()[-3000:]

    # A third process with no store lists them all, from both machines.
    env = backend.environment(None)
    listed = subprocess.run(
        [DASK_OBSERVE, "runs", "--archive", backend.url],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("nightly") == 7 and "host" in listed.stdout
    assert not Path("/nonexistent").exists()

    archive = backend.open()
    runs = archive.runs()
    assert len(runs) == 7 and runs["id"].is_unique
    assert set(runs["status"]) == {"finished"} and set(runs["n_tasks"]) == {8}
    assert runs["cluster"].nunique() == 2  # two machines' clusters
    mine = {str(c) for c in runs["cluster"]}
    for store_path in (a_store, b_store):
        with dask_observe.open_store(store_path, create=False) as store:
            assert {r["cluster"] for r in store.run_records()} <= mine

    # The history across both: the slow last run is marked, the others not.
    with dask.config.set({"observe.compare.threshold": TWICE_AS_SLOW}):
        history = archive.history("nightly")
    assert list(history["id"]) == list(reversed(runs["id"]))
    assert history["verdict"].iloc[-1] == "regression", history
    assert history["prefixes"].iloc[-1] == {"nap": "regression"}
    assert "regression" not in set(history["verdict"].iloc[:-1]), history

    # A run of one machine against a run of the other, and a report, by CLI.
    slow, earlier = runs["id"].iloc[0], runs["id"].iloc[-1]
    compared = subprocess.run(
        [DASK_OBSERVE, "compare", earlier, slow[:20], "--archive", backend.url],
        env={**env, "DASK_OBSERVE__COMPARE__THRESHOLD": str(TWICE_AS_SLOW)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert compared.returncode == 0, compared.stderr
    wall = next(line for line in compared.stdout.splitlines() if "wall time" in line)
    assert "regression" in wall
    assert f"run {slow}" in compared.stdout  # named as the archive names them
    report = subprocess.run(
        [DASK_OBSERVE, "report", slow, "--archive", backend.url],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    html = (tmp_path / f"run-{slow}.html").read_text()
    assert 'class="dobs-report"' in html and "nightly" in html
    assert f"dask-observe logs {slow} --archive {backend.url}" in html
    run = archive.run(slow)
    assert run.archive_uid == slow and len(run.tasks()) == 8
    assert run.tasks()["compute_s"].min() >= 5 * NAP_S  # as recorded
    archive.close()


def _texts(backend: Backend) -> str:
    """Everything the archive holds as text: JSON as written, every Parquet
    cell (compressed on disk, where a byte search finds nothing)."""
    texts = []
    for path, data in backend.files().items():
        if path.endswith(".parquet"):
            frame = pd.read_parquet(io.BytesIO(data))
            texts.append(frame.astype(str).to_csv())
        else:
            texts.append(data.decode())
    return "\n".join(texts)


def test_a_script_that_ends_with_its_run_has_published_it(
    backend: Backend, tmp_path: Path
) -> None:
    # The script's process ends as its block does (its cluster left for
    # distributed to close at exit), while the run's end publishes in a
    # thread; CPython 3.12.0-3.12.1 start no thread once the main thread has
    # finished, which s3fs needs: the publish failed there, now the block waits.
    store = tmp_path / "observe.sqlite"
    script = machine(backend, store, 1, "--open-cluster")
    _, err = script.communicate(timeout=120)
    assert script.returncode == 0, err.decode()[-3000:]
    assert b"cannot publish" not in err, err.decode()[-3000:]
    runs = backend.open().runs()
    assert list(runs["name"]) == ["nightly"] and list(runs["n_tasks"]) == [8]


def test_the_archive_holds_no_secret_even_from_a_store_that_kept_one(
    backend: Backend, store_path: Path, make_client: Any
) -> None:
    # Recorded with redaction off, the store keeps the secrets; published
    # under the default rules, the archive does not.
    client = make_client(n_workers=1, processes=False)
    secret, key_id = "hunter2-very-secret", "AKIAIOSFODNN7EXAMPLE"

    def leak() -> int:
        import logging

        logging.getLogger("distributed.worker").warning(
            "connecting with password=%s and %s", secret, key_id
        )
        return 1

    def fail() -> None:
        raise RuntimeError(f"login failed: token={secret}")

    with (
        dask.config.set({"observe.redact.enabled": False}),
        pytest.raises(RuntimeError),
        dask_observe.record("leaky", client=client) as run,
    ):
        client.submit(leak, pure=False).result()
        client.submit(fail, pure=False).result()
    assert len(run.logs(contains=secret)) == 2  # the store has it (and the error)
    # ...and so does the flag that quotes the exception.
    assert secret in str(run.flags().to_dict("records"))
    uid = run.publish(backend.url) if not backend.options else None
    if uid is None:  # the S3 endpoint is an option of the archive
        with dask.config.set({"observe.archive-options": backend.options}):
            uid = run.publish(backend.url)
    text = _texts(backend)
    assert "connecting with password=[redacted]" in text
    assert "token=[redacted]" in text  # the exception, in the tasks and the flag
    assert secret not in text and key_id not in text
    archived = backend.open().run(uid)
    assert (
        archived.logs(contains="connecting")["message"]
        .str.contains(r"\[redacted\]")
        .all()
    )


def test_a_publisher_killed_before_its_manifest_leaves_no_visible_run(
    backend: Backend, store_path: Path, make_client: Any, tmp_path: Path
) -> None:
    client = make_client(n_workers=1, processes=False)
    with dask_observe.record("nightly", client=client) as run:
        client.gather(client.map(abs, range(20)))
    # A separate process publishes it and is killed (SIGKILL) once every table
    # is written, just before its manifest: the worst moment.
    ready = tmp_path / "tables-written"
    script = (
        "import os, sys, time\n"
        "from dask_observe.archive import location\n"
        "write = location.Location.write\n"
        "def hold(self, path, data):\n"
        "    if '/manifests/' in path:\n"
        f"        open({str(ready)!r}, 'w').close()\n"
        "        time.sleep(600)\n"
        "    write(self, path, data)\n"
        "location.Location.write = hold\n"
        "import dask_observe\n"
        f"dask_observe.open_store().run({run.id}).publish()\n"
    )
    env = backend.environment(store_path)
    publisher = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        wait_until(lambda: ready.exists() or publisher.poll() is not None, "tables")
        assert publisher.poll() is None, "the publisher ended early"
        publisher.send_signal(signal.SIGKILL)
        publisher.wait(10)
    finally:
        publisher.kill()
    archive = backend.open()
    assert archive.runs().empty  # the tables are there, the run is not
    assert len(backend.files()) >= 10
    # The next try (here the CLI's) finishes the same run in the same folder.
    done = subprocess.run(
        [DASK_OBSERVE, "publish", "last"], env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (uid,) = archive.runs()["id"]
    assert f"as {uid}" in done.stdout
    folders = {p.split("/")[1] for p in backend.files() if p.startswith(f"{RUNS}/")}
    assert folders == {uid}


def test_many_runs_are_listed_from_a_compacted_listing_that_races_cannot_corrupt(
    tmp_path: Path, store_path: Path, make_client: Any
) -> None:
    url = str(tmp_path / "archive")
    client = make_client(n_workers=1, processes=False)
    with dask_observe.record("nightly", client=client) as run:
        client.gather(client.map(abs, range(5)))
    uid = run.publish(url)
    # Copies of its manifest under other ids stand for a busy team's runs.
    manifest = json.loads((Path(url) / MANIFESTS / f"{uid}.json").read_text())
    for i in range(2 * listing.COMPACT_AT):
        other = f"20260101T0000{i:02d}Z-{i:012x}"
        copy = {**manifest, "uid": other, "started": manifest["started"] - 1000 + i}
        (Path(url) / MANIFESTS / f"{other}.json").write_text(json.dumps(copy))
    # Two readers list at once: each may compact; neither loses a run.
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        counts = list(
            pool.map(lambda _: len(dask_observe.open_archive(url).runs()), range(4))
        )
    assert counts == [2 * listing.COMPACT_AT + 1] * 4
    parts = list((Path(url) / "listing").glob("part-*.parquet"))
    assert 1 <= len(parts) <= 2
    # A run pruned after it was compacted is listed no more.
    archive = dask_observe.open_archive(url)
    with pytest.raises(dask_observe.RunNotFound):
        archive.run("no-such-run")
    with pytest.raises(dask_observe.RunNotFound, match="not a run id"):
        archive.run(f"../{MANIFESTS}/{uid}")  # a name is never a path
    (Path(url) / MANIFESTS / f"{uid}.json").unlink()
    assert uid not in set(archive.runs()["id"])
    assert len(archive.runs()) == 2 * listing.COMPACT_AT


def test_a_reader_that_lists_again_sees_each_change_of_the_archive(
    tmp_path: Path, store_path: Path, make_client: Any
) -> None:
    """A server lists its archive each time the panel asks, and keeps what it
    read of each part and manifest while the listing says it is unchanged:
    whatever changes in between (a run published, a manifest written again,
    one removed, parts compacted) is what the next listing says."""
    url = str(tmp_path / "archive")
    client = make_client(n_workers=1, processes=False)
    with dask_observe.record("nightly", client=client) as run:
        client.gather(client.map(abs, range(5)))
    uid = run.publish(url)
    folder = Path(url) / MANIFESTS
    manifest = json.loads((folder / f"{uid}.json").read_text())

    def put(i: int, name: str) -> str:
        other = f"20260101T0000{i:02d}Z-{i:012x}"
        copy = {**manifest, "uid": other, "name": name, "started": i}
        (folder / f"{other}.json").write_text(json.dumps(copy))
        return other

    archive = dask_observe.open_archive(url)
    assert list(archive.runs()["name"]) == ["nightly"]
    first = put(1, "before")
    assert list(archive.runs()["name"]) == ["nightly", "before"]
    put(1, "after!")  # written again: as long, another text
    assert list(archive.runs()["name"]) == ["nightly", "after!"]
    others = [put(i, f"run {i}") for i in range(2, 2 + listing.COMPACT_AT)]
    assert len(archive.runs()) == 2 + listing.COMPACT_AT  # and compacted
    assert list((Path(url) / "listing").glob("part-*.parquet"))
    (folder / f"{first}.json").unlink()
    (folder / f"{others[0]}.json").unlink()  # a run of the part, pruned
    listed = archive.runs()
    assert first not in set(listed["id"]) and others[0] not in set(listed["id"])
    assert len(listed) == listing.COMPACT_AT
    # What a new reader lists, read from scratch, is the same.
    fresh = dask_observe.open_archive(url).runs()
    assert list(fresh["id"]) == list(listed["id"])


def test_prune_on_the_archive_keeps_the_newest_and_clears_dead_publishes(
    tmp_path: Path, store_path: Path, make_client: Any
) -> None:
    url = str(tmp_path / "archive")
    client = make_client(n_workers=1, processes=False)
    uids = []
    for _ in range(3):
        with dask_observe.record("nightly", client=client) as run:
            client.gather(client.map(abs, range(5)))
        uids.append(run.publish(url))
    dead = Path(url) / RUNS / "20200101T000000Z-0123456789ab"
    dead.mkdir()
    (dead / "tasks.parquet").write_bytes(b"half")
    dry = subprocess.run(
        [DASK_OBSERVE, "prune", "--archive", url, "--keep-last", "1", "--dry-run"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert "Would prune 2 run(s)" in dry.stdout and "1 unfinished" in dry.stdout
    assert len(dask_observe.open_archive(url).runs()) == 3
    pruned = subprocess.run(
        [DASK_OBSERVE, "prune", "--archive", url, "--keep-last", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert pruned.returncode == 0, pruned.stderr
    assert list(dask_observe.open_archive(url).runs()["id"]) == [uids[-1]]
    assert sorted(p.name for p in (Path(url) / RUNS).iterdir()) == [uids[-1]]


def test_publish_all_then_read_with_dask_dataframe(
    tmp_path: Path, store_path: Path, make_client: Any
) -> None:
    # Runs recorded before the archive was set go with `publish --all`; the
    # archive is plain Parquet: Dask itself reads every run's tasks at once.
    client = make_client(n_workers=1, processes=False)
    for n in (3, 6):
        with dask_observe.record("nightly", client=client):
            client.gather(client.map(time.sleep, [0.01] * n, pure=False))
    url = str(tmp_path / "archive")
    done = subprocess.run(
        [DASK_OBSERVE, "publish", "--all", "--archive", url],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Published 2 of 2 run(s)" in done.stdout
    import dask.dataframe as dd

    tasks = dd.read_parquet(f"{url}/runs/*/tasks.parquet")
    per_run = tasks.groupby("run")["key"].count().compute()
    assert sorted(per_run) == [3, 6]
    assert set(per_run.index) == set(dask_observe.open_archive(url).runs()["id"])

"""The team archive read as untrusted input: anyone who can write it (a
teammate, a CI job, whoever holds its credentials) chose what is there. Each
attack found in review, on a real archive directory beside a real run: the
real run stays listed, the attacks are skipped and counted, nothing hangs,
fills memory or writes to the terminal."""

from __future__ import annotations

import io
import json
import os
import subprocess
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import dask
import pandas as pd
import pytest
from distributed import Client

import dask_observe
from dask_observe.archive.location import LISTING, MANIFESTS

from .conftest import DASK_OBSERVE, subprocess_env

#: Entries of the hostile archive that are not valid runs: a named pipe, a
#: link out of the archive, a date where a time belongs, a status that is
#: none, a manifest of 2 MiB, a listing part that is not Parquet.
SKIPPED = 6
ESCAPE = "\x1b]0;pwned\x07\x1b[2J"


def uid(i: int) -> str:
    return f"20260101T00000{i}Z-{i:012x}"


@pytest.fixture
def hostile(tmp_path: Path, client: Client, store_path: Path) -> tuple[str, str, str]:
    """An archive with one real run and every attack beside it: its URL, the
    real run's id and the id of a run whose host and user hold control
    sequences (text, valid: listed, and shown escaped)."""
    url = str(tmp_path / "team")
    with dask_observe.record("real", client=client) as run:
        client.gather(client.map(abs, range(4)))
    real = run.publish(url)
    manifests = Path(url) / MANIFESTS
    manifest = json.loads((manifests / f"{real}.json").read_text())

    def plant(i: int, **changes: Any) -> str:
        planted = {**manifest, "uid": uid(i), **changes}
        (manifests / f"{uid(i)}.json").write_text(json.dumps(planted))
        return uid(i)

    os.mkfifo(manifests / f"{uid(1)}.json")  # blocked a reading thread for good
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({**manifest, "uid": uid(2)}))
    (manifests / f"{uid(2)}.json").symlink_to(outside)
    plant(3, started="2030-01-03")  # answered 500 and a CLI traceback
    plant(4, status=f"finished{ESCAPE}")
    plant(5, name="x" * 2**21)
    escaped = plant(6, host=f"evil{ESCAPE}", user=f"me{ESCAPE}")
    (Path(url) / LISTING).mkdir(exist_ok=True)
    (Path(url) / LISTING / "part-junk.parquet").write_bytes(b"PAR1 not parquet PAR1")
    # 6,000 rows of one 25 KB manifest in a part of a few KB: a reader's
    # process went from 91 MB to 7.5 GB decoding it.
    big = json.dumps({**manifest, "name": "y" * 25_000})
    bomb = pd.DataFrame(
        {
            "uid": [real] * 3000 + [uid(9)] * 3000,
            "manifest": [big] * 6000,
            "environment": ["{}"] * 6000,
        }
    )
    buffer = io.BytesIO()
    bomb.to_parquet(buffer, index=False, compression="zstd")
    (Path(url) / LISTING / "part-bomb.parquet").write_bytes(buffer.getvalue())
    return url, real, escaped


def test_a_hostile_archive_lists_its_real_runs_and_counts_the_rest(
    hostile: tuple[str, str, str],
) -> None:
    url, real, escaped = hostile
    archive = dask_observe.open_archive(url)
    listed: list[Any] = []
    tracemalloc.start()
    reader = threading.Thread(target=lambda: listed.append(archive.runs()))
    reader.start()
    reader.join(30)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert not reader.is_alive(), "the listing hung"
    (runs,) = listed
    assert sorted(runs["id"]) == sorted([real, escaped])
    assert archive.skipped == SKIPPED
    assert peak < 100 * 2**20, f"{peak / 2**20:.0f} MiB to list"
    assert archive.run(real).name == "real"


def test_the_command_line_lists_a_hostile_archive_safely(
    hostile: tuple[str, str, str], store_path: Path
) -> None:
    url, real, escaped = hostile
    for command in (["runs"], ["history", "real"]):
        done = subprocess.run(
            [DASK_OBSERVE, *command, "--archive", url],
            env=subprocess_env(store_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "\x1b" not in done.stdout and "\x07" not in done.stdout
        assert f"warning: {SKIPPED} entries of the archive skipped" in done.stderr
        assert "Traceback" not in done.stderr
    listed = subprocess.run(
        [DASK_OBSERVE, "runs", "--archive", url],
        env=subprocess_env(store_path),
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert real in listed and escaped in listed
    assert "evil\\x1b]0;pwned\\x07" in listed  # shown, as text


async def test_the_servers_team_listing_survives_a_hostile_archive(
    jp_fetch: Any, hostile: tuple[str, str, str]
) -> None:
    url, real, escaped = hostile
    with dask.config.set({"observe.archive": url}):
        for _ in range(8):  # each open panel reads it every 30 s
            response = await jp_fetch("dask-observe", "api", "archive", "runs")
            listing = json.loads(response.body)
            assert sorted(r["id"] for r in listing["runs"]) == sorted([real, escaped])
            assert listing["skipped"] == SKIPPED
        runs = await jp_fetch("dask-observe", "api", "runs")
        assert runs.code == 200  # the store's routes were never held up

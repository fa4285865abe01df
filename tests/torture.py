"""Many processes use one store at once, as users do, and some are killed.

``python -m tests.torture STORE --recorders 2 --blocks 3 --seconds 40`` starts:

- recorders: each records ``--blocks`` blocks in turn, each on a LocalCluster
  of its own that it closes afterwards (as a notebook re-running its cells);
- a victim: a recorder killed (SIGKILL) in the middle of a long block;
- short-lived readers, one about every 0.1 s, in turn: the Python API
  (``runs()``, a run's logs, tasks and flags), the command line (``runs``,
  ``logs last``), the read-only view the Jupyter server and its stream use
  (the run list, a follow of new rows from a sequence number), an export to
  Parquet and a prune; one reader in five is killed (SIGKILL) mid-read.

When the recorders are done it prints one JSON line: what each process said
and how it ended. ``check()`` turns that into what must hold (every block ran,
every ended run is whole, no open failed, the file is sound).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TASKS = 50

RECORDER = """
import sys, warnings
warnings.simplefilter("ignore")
from distributed import Client, LocalCluster
import dask_observe
path, tag, blocks, tasks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def inc(x):
    return x + 1
def work(client, tag, i):
    assert client.gather(client.map(inc, range(tasks))) == list(range(1, tasks + 1))
    print("ran", tag, i, flush=True)
for i in range(blocks):
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        # As users write it: without "as run" (the store of the run goes with
        # the block), and with it (kept until the next block's has opened).
        if i % 2 == 0:
            with dask_observe.record(f"{tag}-{i}", client=client, store=path):
                work(client, tag, i)
        else:
            with dask_observe.record(f"{tag}-{i}", client=client, store=path) as run:
                work(client, tag, i)
"""

VICTIM = """
import sys, time, warnings
warnings.simplefilter("ignore")
from distributed import Client, LocalCluster
import dask_observe
def nap(x):
    time.sleep(0.05)
    return x
with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                  dashboard_address=":0") as cluster, Client(cluster) as client:
    with dask_observe.record("victim", client=client, store=sys.argv[1]) as run:
        print("started", run.id, flush=True)
        client.gather(client.map(nap, range(100_000)))
"""

READERS = {
    "api": """
import sys
import dask_observe
store = dask_observe.open_store(sys.argv[1], create=False)
store.runs()
run = store.run("last")
run.logs(); run.tasks(); run.flags()
store.close()
""",
    "server": """
import sys
from dask_observe.store import BaseStore
with BaseStore(sys.argv[1], create=False, readonly=True) as store:
    store.run_records()
    top = store.last_seq()
    store.rows("SELECT seq FROM logs WHERE seq > ? ORDER BY seq LIMIT 500",
               (max(top - 500, 0),))
""",
}

COMMANDS = (["runs"], ["logs", "last"], ["flags", "last"])


def _python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def _cli(path: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "dask_observe.cli", "--store", str(path), *args]


def _reader(path: Path, i: int, scratch: Path) -> list[str]:
    kind = i % 7
    if kind < len(READERS):
        return _python(list(READERS.values())[kind], str(path))
    if kind == 5:
        out = scratch / f"export-{i}"
        return _cli(path, "export", "last", "--format", "parquet", "-o", str(out))
    if kind == 6:
        return _cli(path, "prune", "--keep-last", "1000")
    return _cli(path, *COMMANDS[kind - len(READERS)])


def run(
    path: Path, recorders: int, blocks: int, seconds: float, seed: int
) -> dict[str, Any]:
    """Torture the store at ``path``; what every process said and how it ended."""
    rng = random.Random(seed)
    # distributed's GIL monitor off, as conftest.NO_GIL_MONITOR says why: its
    # native thread can abort a recorder at exit, which is not what is tested.
    env = {
        **os.environ,
        "PYTHONWARNINGS": "ignore",
        "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__GIL__ENABLED": "False",
    }
    scratch = Path(tempfile.mkdtemp(prefix="torture-"))
    started = time.monotonic()
    writers = [
        subprocess.Popen(
            _python(RECORDER, str(path), f"r{n}", str(blocks), str(TASKS)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in range(recorders)
    ]
    victim = subprocess.Popen(
        _python(VICTIM, str(path)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    victim_kill_at = started + rng.uniform(3.0, 6.0)
    readers: list[tuple[subprocess.Popen[str], float | None, list[str]]] = []
    done_readers: list[dict[str, Any]] = []
    i = 0
    while any(w.poll() is None for w in writers):
        now = time.monotonic()
        if now - started > seconds:
            break
        if victim.poll() is None and now > victim_kill_at:
            victim.send_signal(signal.SIGKILL)
        if path.exists() and sum(p.poll() is None for p, _, _ in readers) < 3:
            command = _reader(path, i, scratch)
            kill_at = now + rng.uniform(0.05, 0.6) if i % 5 == 4 else None
            readers.append(
                (
                    subprocess.Popen(
                        command,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE,
                        text=True,
                        env=env,
                    ),
                    kill_at,
                    command,
                )
            )
            i += 1
        for proc, kill_at, _ in readers:
            if kill_at is not None and proc.poll() is None and now > kill_at:
                proc.send_signal(signal.SIGKILL)
        still = []
        for proc, kill_at, command in readers:
            if proc.poll() is None:
                still.append((proc, kill_at, command))
                continue
            _, err = proc.communicate()
            done_readers.append(
                {
                    "command": " ".join(command[-4:])
                    if "-m" in command
                    else "python -c",
                    "code": proc.returncode,
                    "killed": kill_at is not None,
                    "stderr": err[-2000:],
                }
            )
        readers = still
        time.sleep(0.1)
    out: dict[str, Any] = {"seconds": time.monotonic() - started, "recorders": []}
    for proc in writers:
        if proc.poll() is None:
            proc.kill()
        stdout, stderr = proc.communicate()
        out["recorders"].append(
            {"code": proc.returncode, "stdout": stdout, "stderr": stderr[-4000:]}
        )
    if victim.poll() is None:
        victim.kill()
    stdout, _ = victim.communicate()
    out["victim"] = {"code": victim.returncode, "stdout": stdout}
    for proc, kill_at, command in readers:
        _, err = proc.communicate()
        done_readers.append(
            {
                "command": " ".join(command[-4:]),
                "code": proc.returncode,
                "killed": kill_at is not None,
                "stderr": err[-2000:],
            }
        )
    out["readers"] = done_readers
    return out


def check(path: Path, outcome: dict[str, Any], blocks: int) -> list[str]:
    """What did not hold, as sentences (empty: everything held)."""
    from dask_observe.store import BaseStore

    wrong = []
    for n, recorder in enumerate(outcome["recorders"]):
        ran = [
            line for line in recorder["stdout"].splitlines() if line.startswith("ran")
        ]
        if len(ran) != blocks or recorder["code"] != 0:
            wrong.append(
                f"recorder r{n} ran {len(ran)} of {blocks} blocks, exit "
                f"{recorder['code']}: {recorder['stderr'][-1500:]}"
            )
        if "not recorded" in recorder["stderr"] or "cannot open" in recorder["stderr"]:
            wrong.append(
                f"recorder r{n} could not use the store: {recorder['stderr'][-1500:]}"
            )
    for reader in outcome["readers"]:
        if reader["killed"] and reader["code"] == -signal.SIGKILL:
            continue
        if reader["code"] != 0:
            wrong.append(
                f"reader {reader['command']} exited {reader['code']}: "
                f"{reader['stderr']}"
            )
    with BaseStore(path, create=False, readonly=True) as store:
        (check,) = store.frame("PRAGMA integrity_check", (), ("r",))["r"]
        if check != "ok":
            wrong.append(f"integrity_check: {check}")
        for record in store.run_records():
            if record["name"] == "victim":
                if record["status"] != "interrupted":
                    wrong.append(f"the killed run reads {record['status']}")
                continue
            tasks = len(store.run(record["id"]).tasks())
            if record["status"] != "finished" or tasks != TASKS or record["partial"]:
                wrong.append(
                    f"run {record['name']}: {record['status']}, {tasks} "
                    f"task rows, partial {record['partial']!r}"
                )
        names = {r["name"] for r in store.run_records()}
    expected = {
        f"r{n}-{i}" for n in range(len(outcome["recorders"])) for i in range(blocks)
    }
    if expected - names:
        wrong.append(f"runs missing from the store: {sorted(expected - names)}")
    return wrong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--recorders", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    outcome = run(args.store, args.recorders, args.blocks, args.seconds, args.seed)
    wrong = check(args.store, outcome, args.blocks)
    print(
        json.dumps(
            {
                "seconds": round(outcome["seconds"], 1),
                "readers": len(outcome["readers"]),
                "readers_killed": sum(r["killed"] for r in outcome["readers"]),
                "wrong": wrong,
            }
        )
    )


if __name__ == "__main__":
    main()

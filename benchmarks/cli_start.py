"""How long the reading commands take as whole processes, on a small store:
``runs``, ``flags``, ``logs`` and ``history``, against ``python -c pass``.

    .venv/bin/python benchmarks/cli_start.py [--variant NAME=PATH ...] [--rounds 5]

Run it with bytecode written (``env -u PYTHONDONTWRITEBYTECODE``), as an
installed package has it: otherwise every process compiles every module.
Each variant (a checkout first on ``PYTHONPATH``; this one alone by default)
records its own store first, in a process of its own and with its own code
(a store's schema is its code's): a LocalCluster of 2 worker processes, three
runs named ``nightly`` of 20 tasks that each print a line, and a fourth whose
task raises (a flag to print). Then, round after round, the variants taking
turns in a rotating order, each command is run as a process
(``python -m dask_observe.cli``) and timed from its start to its exit; the
first ``history`` of each store (which may work out and keep what later ones
read) is timed apart. Medians, and each variant's ratio to the first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from variants import parse

COMMANDS = {
    "python -c pass": None,
    "runs": ("runs",),
    "flags last": ("flags", "last"),
    "logs last": ("logs", "last"),
    "history nightly": ("history", "nightly"),
}


def shout(i: int) -> int:
    print(f"row {i} loaded")
    return i


def fail(_: int) -> int:
    raise ValueError("a bad row")


def record(path: str) -> None:
    """The small store, recorded by this process's dask-observe."""
    from distributed import Client, LocalCluster

    import dask_observe

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as c,
        Client(c) as client,
    ):
        for _ in range(3):
            with dask_observe.record("nightly", client=client, store=path):
                client.gather(client.map(shout, range(20), pure=False))
        with dask_observe.record("broken", client=client, store=path):
            client.gather(client.map(fail, [1], pure=False), errors="skip")


def timed(env: dict[str, str], args: tuple[str, ...] | None) -> float:
    command = [sys.executable, "-c", "pass"]
    if args is not None:
        command = [sys.executable, "-m", "dask_observe.cli", *args]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    taken = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    return taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--record", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.record:
        record(args.record)
        return
    variants = parse(args.variant)
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o700)
        envs = {}
        for name, checkout in variants.items():
            store = str(Path(folder) / f"{name}.sqlite")
            env = {
                **os.environ,
                "PYTHONPATH": str(Path(checkout).resolve()),
                "DASK_OBSERVE__STORE": store,
            }
            subprocess.run(
                [sys.executable, __file__, "--record", store], env=env, check=True
            )
            envs[name] = env
        first = {
            name: timed(env, COMMANDS["history nightly"]) for name, env in envs.items()
        }
        times: dict[tuple[str, str], list[float]] = {}
        order = list(envs)
        for n in range(args.rounds):
            for name in order[n % len(order) :] + order[: n % len(order)]:
                for what, command in COMMANDS.items():
                    taken = timed(envs[name], command)
                    times.setdefault((name, what), []).append(taken)
    base = order[0]
    print(f"{args.rounds} rounds; medians (ms), and the range")
    print("| command | " + " | ".join(order) + " |")
    print("| --- |" + " --- |" * len(order))
    rows = [("history nightly, the store's first", {n: [first[n]] for n in order})]
    rows += [(what, {n: times[(n, what)] for n in order}) for what in COMMANDS]
    for what, found in rows:
        cells = []
        for name in order:
            ms = [t * 1000 for t in found[name]]
            median = statistics.median(ms)
            cell = f"{median:.0f} ({min(ms):.0f}-{max(ms):.0f})"
            if name != base:
                cell += f", x{median / statistics.median(found[base]) / 1000:.2f}"
            cells.append(cell)
        print(f"| {what} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

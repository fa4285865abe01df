"""The fixed cost of recording: what starting and ending a run adds to a block.

    .venv/bin/python benchmarks/fixed_cost.py --sessions 4 --blocks 30
    .venv/bin/python benchmarks/fixed_cost.py --variant new=. --variant old=../old

Each session is a fresh Python process (a kernel, as a user starts one): it
imports dask_observe, starts a cluster (``--cluster local``: a LocalCluster of 2
worker processes in the session's process, the notebook case; ``remote``:
``dask scheduler`` / ``dask worker`` processes from the environment without
dask-observe, ``tests/remote.py``; ``200-threads``: 200 workers in the
session's process, as in ``scale.py``), runs one unrecorded task, then times its
first recorded one-task block (the plugins are shipped then), then ``--blocks``
pairs of one-task blocks, unrecorded and recorded, in an order that alternates
from pair to pair. What a run adds is the recorded block's time minus its
pair's unrecorded one. Each block starts after a pause of ``PAUSE_S``, as a
notebook's cells do: distributed's client batches what it sends for 10 ms after
each message (a future's release included), so a block started right after
another waits up to that long for its task to leave (3-4 ms measured, on
whichever block came second in a pair; ``--pause 0`` shows it).

``--load-ext``: each session first runs two cells in an IPython shell, as a
notebook's first cells: ``%load_ext dask_observe`` and ``import
distributed``, and times them (the extension readies the first recorded
block after the cell that imports distributed).

``--end-pull-ab``: in each session the recorded blocks alternate (two pairs
of each in turn) between a run's end that brings its last records in its own
reply and one that pulls them after it (``Recorder.end_run``; the second is
how a capture without ``end_pulls`` in its hello, an earlier dask-observe's,
is read), each shown as a variant of its own. A capture that cannot bring
them (an older commit's, as a ``--variant``) refuses the first way.

``--closing N``: what recording costs when the user closes up. N fresh
processes each start a LocalCluster of 2 worker processes, run one task
(recorded in every other process) and time ``client.close()`` then
``cluster.close()``.

With several ``--variant NAME=PATH`` (a checkout of
another commit, put first on ``PYTHONPATH``), sessions of each variant
alternate, so that they are measured side by side in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from variants import parse, sessions

HERE = Path(__file__).resolve().parent
#: Idle time before each timed block (``--pause``): longer than the client's
#: 10 ms batching.
PAUSE_S = 0.05


def one_task(client: object, i: int, pause: float = 0.0) -> float:
    time.sleep(pause)
    started = time.perf_counter()
    client.submit(abs, -i, pure=False).result()  # type: ignore[attr-defined]
    return time.perf_counter() - started


def end_pulls(on: bool) -> None:
    """Have every recorder of this process end runs with their last records
    in the end's reply (``on``), or pull them after it (``--end-pull-ab``)."""
    from dask_observe.recording import recorder

    for found in list(recorder._recorders.values()):
        if found.hello is not None:
            found.hello["end_pulls"] = on


def session(
    cluster_kind: str,
    blocks: int,
    pause: float,
    load_ext: bool = False,
    end_pull_ab: bool = False,
) -> dict[str, object]:
    """One fresh process's measurements (printed as JSON by ``--session``)."""
    loading: float | None = None
    cpu = time.process_time()
    if load_ext:  # a notebook's first cells, before its cluster starts
        from IPython.testing.globalipapp import start_ipython

        shell = start_ipython()
        started = time.perf_counter()
        for cell in ("%load_ext dask_observe", "import distributed"):
            shell.run_cell(cell).raise_error()
        loading = time.perf_counter() - started

    from distributed import Client, LocalCluster

    import dask_observe

    ending: list[float] = []
    stops: list[float] = []

    def recorded(client: Client, store: dask_observe.Store, i: int) -> float:
        time.sleep(pause)
        started = time.perf_counter()
        with dask_observe.record(f"tiny {i}", client=client, store=store):
            client.submit(abs, -i, pure=False).result()
            body_done = time.perf_counter()
        took = time.perf_counter() - started
        stops.append(time.perf_counter() - body_done)  # the run's end, in the block
        store.runs()  # waits for the run's end, written after its block
        ending.append(time.perf_counter() - started - took)
        return took

    with ExitStack() as stack:
        if cluster_kind in ("local", "200-threads"):
            shape = (
                {"n_workers": 200, "processes": False, "memory_limit": 0}
                if cluster_kind == "200-threads"
                else {"n_workers": 2}
            )
            cluster = stack.enter_context(
                LocalCluster(threads_per_worker=1, dashboard_address=":0", **shape)
            )
            client = stack.enter_context(Client(cluster))
            client.wait_for_workers(len(cluster.workers))
        else:
            sys.path.insert(0, str(HERE.parent))
            from tests.remote import process_cluster

            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            remote = stack.enter_context(
                process_cluster(workdir / "cluster", memory_limit="2GiB")
            )
            client = stack.enter_context(Client(remote.address, timeout="30s"))
            client.wait_for_workers(2, timeout=60)
        store = dask_observe.open_store(
            stack.enter_context(tempfile.TemporaryDirectory()) + "/s.sqlite"
        )
        one_task(client, 0)  # connections warm, as in a session that computed
        first = recorded(client, store, 0)
        # This process's work (its threads: the scheduler's and the nannies'
        # too) from its first cells to its first recorded block's end: what
        # the extension readies early is moved there, not added.
        worked = None if loading is None else time.process_time() - cpu
        plain, rec, modes = [], [], []
        for i in range(1, blocks + 1):
            if end_pull_ab:  # each mode in both orders of the pair
                modes.append(bool((i // 2) % 2))
                end_pulls(modes[-1])
            if i % 2:
                plain.append(one_task(client, i, pause))
                rec.append(recorded(client, store, i))
            else:
                rec.append(recorded(client, store, i))
                plain.append(one_task(client, i, pause))
        finished = store.runs()  # waits for the ends still being written
        assert (finished["status"] == "finished").all(), finished
    return {
        "first": first, "plain": plain, "recorded": rec, "ending": ending[1:],
        "load_ext": loading, "cpu_to_first": worked, "end_pull": modes,
        "stop": stops[1:],
    }  # fmt: skip


def closing_session(record: bool) -> float:
    """Seconds to close a client and its LocalCluster after one task, recorded
    or not (printed as JSON by ``--closing-session``)."""
    from distributed import Client, LocalCluster

    import dask_observe

    with tempfile.TemporaryDirectory() as folder:
        cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, dashboard_address=":0"
        )
        client = Client(cluster)
        if record:
            with dask_observe.record("one", client=client, store=f"{folder}/s.sqlite"):
                client.submit(abs, -1).result()
        else:
            client.submit(abs, -1).result()
        started = time.perf_counter()
        client.close()
        cluster.close()
        return time.perf_counter() - started


def closing(variants: dict[str, str], processes: int) -> None:
    """Close times, plain and recorded, per variant, processes alternating."""
    found: dict[tuple[str, bool], list[float]] = {}
    for n in range(processes):
        for name, path in variants.items():
            record = bool(n % 2)
            env = {**os.environ, "PYTHONPATH": str(Path(path).resolve())}
            command = [sys.executable, __file__, "--closing-session", str(int(record))]
            out = subprocess.run(
                command, env=env, capture_output=True, text=True, check=True
            )
            seconds = float(out.stdout.strip().splitlines()[-1])
            found.setdefault((name, record), []).append(seconds * 1e3)
    for (name, record), times in sorted(found.items()):
        print(
            f"{name} {'recorded' if record else 'plain'}: close "
            f"{statistics.median(times):.0f} ms (median of {len(times)}; "
            f"{min(times):.0f}-{max(times):.0f})"
        )


def split(found: dict[str, Any], mode: bool) -> dict[str, Any]:
    """A session's pairs whose run's end was in ``mode`` (``--end-pull-ab``)."""
    kept = [m == mode for m in found["end_pull"]]
    return {
        **found,
        "plain": [p for p, k in zip(found["plain"], kept, strict=True) if k],
        "recorded": [r for r, k in zip(found["recorded"], kept, strict=True) if k],
        "stop": [t for t, k in zip(found["stop"], kept, strict=True) if k],
        "ending": [],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--cluster", choices=["local", "remote", "200-threads"], default="local"
    )
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--pause", type=float, default=PAUSE_S)
    parser.add_argument("--closing", type=int, metavar="N", default=0)
    parser.add_argument(
        "--load-ext",
        action="store_true",
        help="each session first runs %%load_ext dask_observe, as a notebook does",
    )
    parser.add_argument(
        "--end-pull-ab",
        action="store_true",
        help="alternate runs whose end brings their last records with runs "
        "that pull them after it",
    )
    parser.add_argument("--session", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--closing-session", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.session:
        measured = session(
            args.cluster, args.blocks, args.pause, args.load_ext, args.end_pull_ab
        )
        print(json.dumps(measured))
        return
    if args.closing_session is not None:
        print(closing_session(bool(args.closing_session)))
        return
    variants = parse(args.variant, str(HERE.parent))
    if args.closing:
        closing(variants, args.closing)
        return
    results: dict[str, list[dict[str, list[float] | float]]] = {v: [] for v in variants}
    command = ["--session", "--cluster", args.cluster, "--blocks", str(args.blocks)]
    command += ["--pause", str(args.pause)]
    command += ["--load-ext"] if args.load_ext else []
    command += ["--end-pull-ab"] if args.end_pull_ab else []
    for n, name, got in sessions(__file__, variants, args.sessions, command):
        results[name].append(got)
        print(f"session {n + 1} {name}: first {float(got['first']) * 1e3:.0f} ms")
    if args.end_pull_ab:
        results = {
            f"{name} {label}": [split(r, mode) for r in found]
            for name, found in results.items()
            for label, mode in (("end brings records", True), ("pull after", False))
        }
    for name, found in results.items():
        firsts = [float(r["first"]) * 1e3 for r in found]  # type: ignore[arg-type]
        plain = [p * 1e3 for r in found for p in r["plain"]]  # type: ignore[union-attr]
        rec = [p * 1e3 for r in found for p in r["recorded"]]  # type: ignore[union-attr]
        added = [r - p for r, p in zip(rec, plain, strict=True)]
        ending = [e * 1e3 for r in found for e in r.get("ending", [])]  # type: ignore[union-attr]
        stops = [t * 1e3 for r in found for t in r.get("stop", [])]  # type: ignore[union-attr]
        loads = [float(r["load_ext"]) * 1e3 for r in found if r.get("load_ext")]  # type: ignore[arg-type]
        cpus = [float(r["cpu_to_first"]) * 1e3 for r in found if r.get("cpu_to_first")]  # type: ignore[arg-type]
        print(
            f"{name}: first recorded block median {statistics.median(firsts):.0f} ms "
            f"({min(firsts):.0f}-{max(firsts):.0f}); after it: one-task block "
            f"{statistics.median(plain):.1f} ms plain, {statistics.median(rec):.1f} ms "
            f"recorded; a run adds {statistics.median(added):.1f} ms (median of "
            f"{len(added)} pairs; quartiles {statistics.quantiles(added)[0]:.1f}-"
            f"{statistics.quantiles(added)[2]:.1f})"
            + (
                f"; the run's end in the block {statistics.median(stops):.1f} ms"
                f" (quartiles {statistics.quantiles(stops)[0]:.1f}-"
                f"{statistics.quantiles(stops)[2]:.1f})"
                if len(stops) > 1
                else ""
            )
            + (
                f"; its end, written after it: {statistics.median(ending):.0f} ms"
                if ending
                else ""
            )
            + (
                f"; %load_ext and import distributed {statistics.median(loads):.0f} ms"
                f" ({min(loads):.0f}-{max(loads):.0f}), the process's CPU from them"
                f" to the first block's end {statistics.median(cpus):.0f} ms"
                if loads and cpus
                else ""
            )
        )


if __name__ == "__main__":
    main()

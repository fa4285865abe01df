"""Diagnosis on workloads nobody here wrote: does each run get the right flags?

Workloads adapted (scaled down to seconds on two cores) from public Dask
benchmark suites and the dask-examples notebooks; each names its source. The
truth of each is stated before it runs (``expect``: flags it must raise;
``allow``: flags true beside the point, each with why; everything else raised
is a false alarm), and
checked against distributed's own signals: bytes the workers' spill buffers
wrote (their own counters) for disk time, and distributed's task stream
(``get_task_stream``) for time spent waiting on transfers, which depends on the
cluster's shape, and distributed's warning that a graph it sent was large
for ``large-graph``. Run on three clusters: two worker processes, four, and
threads only.

    .venv/bin/python benchmarks/diagnosis.py [--clusters 2p,4p,threads] [--only NAME]
        [--repeat N] [--busy N]

``--repeat N`` runs each workload N times in a row: a flag raised on one pass
and not on another is a wrong verdict (``unstable``). ``--busy N`` keeps N
processes spinning outside the cluster meanwhile (a host busy with other
work): the truth is then that ``event-loop-blocked`` and ``gil-contention``,
where raised and not expected, name the busy host rather than the code.

Prints a table (the benchmarks README keeps the results) and exits 1 on any
wrong verdict.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
from distributed import Client, LocalCluster, get_task_stream, get_worker, wait

import dask_observe
from dask_observe.analysis.figures import phase_totals, shuffle_disk, task_table
from dask_observe.diagnose.host import HOST_ADVICE

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.load import burners

MEMORY_LIMIT = "1 GiB"


@dataclass
class Workload:
    name: str
    source: str
    run: Callable[[Client], Any]
    #: Flags the truth calls for.
    expect: frozenset[str] = frozenset()
    #: Flags that are true too, though not the point, and why.
    allow: dict[str, str] = field(default_factory=dict)
    #: Clusters it does not apply to, and why.
    not_on: dict[str, str] = field(default_factory=dict)
    #: dask config while it runs.
    config: dict[str, Any] = field(default_factory=dict)
    #: Why it is not judged on a busy host (``--busy``), if it is not.
    not_busy: str = ""
    #: Whether distributed's task stream can watch it (the truth of
    #: high-transfer): with it, client.restart() on a second LocalCluster in
    #: one process waits forever for workers (seen without dask-observe too).
    task_stream: bool = True


# -- arrays (coiled/benchmarks tests/benchmarks/test_array.py) -------------------


def anom_mean(client: Client) -> None:
    # test_anom_mean: anomalies from a climatology.
    data = da.random.random((5000, 2000), chunks=(100, 2000))
    clim = data[:1000].reshape((100, 10, 2000)).mean(axis=1)
    (data[:1000].reshape((100, 10, 2000)) - clim[:, None]).mean().compute()


def double_diff(client: Client) -> None:
    # test_double_diff
    a = da.random.random((6000, 6000), chunks=(1000, 1000))
    b = da.random.random((6000, 6000), chunks=(1000, 1000))
    (da.diff(a, axis=1)[:-1, :] - da.diff(b, axis=0)[:, :-1]).sum().compute()


def smooth(x: np.ndarray, steps: int = 25) -> np.ndarray:
    """Jacobi smoothing: each step, every cell the mean of its four neighbours."""
    for _ in range(steps):
        inner = (x[:-2, 1:-1] + x[2:, 1:-1] + x[1:-1, :-2] + x[1:-1, 2:]) / 4
        x = x.copy()
        x[1:-1, 1:-1] = inner
    return x


def stencil(client: Client) -> None:
    # test_array.py::test_map_overlap_sample: a stencil over many chunks (its
    # median task is a sub-millisecond slice of a halo; its mean, real compute).
    a = da.random.random((4000, 4000), chunks=(250, 250))
    a.map_overlap(smooth, depth=1).sum().compute()


def rechunk(client: Client) -> None:
    # test_rechunk.py: tiles to rows, by P2P.
    with dask.config.set({"array.rechunk.method": "p2p"}):
        a = da.random.random((8000, 8000), chunks=(500, 500))
        a.rechunk((40, 8000)).sum().compute()


def dot_product(client: Client) -> None:
    # test_array.py::test_dot_product
    a = da.random.random((4000, 4000), chunks=(1000, 1000))
    (a @ a.T).sum().compute()


# -- dataframes (coiled/benchmarks test_dataframe.py, test_join.py) -------------


def frame(n: int = 2_000_000, partitions: int = 20, seed: int = 0) -> dd.DataFrame:
    rng = np.random.default_rng(seed)
    pdf = pd.DataFrame(
        {
            "id": rng.integers(0, 200_000, n),
            "x": rng.random(n),
            "k": rng.integers(0, 100, n),
        }
    )
    found: dd.DataFrame = dd.from_pandas(pdf, npartitions=partitions)
    return found


def align(client: Client) -> None:
    # test_dataframe.py::test_dataframe_align: two frames of different
    # partitions added together.
    a = frame(partitions=20)
    b = frame(partitions=13, seed=1)
    (a["x"] + b["x"]).sum().compute()


def set_index(client: Client) -> None:
    # test_join.py::test_set_index (P2P shuffle)
    frame().set_index("id").x.sum().compute()


def p2p_merge(client: Client) -> None:
    # test_join.py::test_join_big (shuffle="p2p")
    left = frame(partitions=20)
    right = frame(partitions=20, seed=1)
    left.merge(right, on="id", shuffle_method="p2p").x_x.sum().compute()


def groupby(client: Client) -> None:
    # h2o groupby q1 (test_h2o.py): sum by a low-cardinality key.
    frame().groupby("k").x.sum().compute()


def merge_with_restarts(client: Client) -> None:
    # test_join.py merges in a loop, with client.restart() between them as
    # long-running notebooks do to free memory (stability tests restart too).
    for seed in range(3):
        frame(n=500_000, seed=seed).merge(
            frame(n=500_000, seed=seed + 1), on="id", shuffle_method="p2p"
        ).x_x.sum().compute()
        client.restart()


# -- futures (coiled/benchmarks test_futures.py, test_work_stealing.py) ---------


def inc(x: int) -> int:
    return x + 1


def large_map(client: Client) -> None:
    # test_futures.py::test_large_map: many trivial futures.
    client.gather(client.map(inc, range(6000)))


def slowinc(x: int, delay: float = 0.05) -> int:
    time.sleep(delay)
    return x + 1


def straggler(client: Client) -> None:
    # test_work_stealing.py::test_work_stealing_on_straggling_worker: one
    # worker's tasks take longer; stealing evens the load.
    def slow_on_first(x: int) -> int:
        return slowinc(x, 0.2 if get_worker().name in (0, "0") else 0.02)

    client.gather(client.map(slow_on_first, range(200)))


# -- trouble, provoked (distributed's docs and stability tests) ------------------


def spill(client: Client) -> None:
    # test_spill.py::test_spilling: persist more than the workers hold.
    n = len(client.nthreads())
    a = da.random.random((n * 12_000, 12_500), chunks=(2000, 12_500)).persist()
    wait(a)
    a.sum().compute()
    del a


def leak(client: Client) -> None:
    # A leak held at ~72% of the memory limit (past spill, short of pause),
    # as in the memory-leak stability tests: unmanaged memory.
    def hold() -> int:
        import psutil

        limit = get_worker().memory_manager.memory_limit or 0
        need = int(0.72 * limit) - psutil.Process().memory_info().rss
        blocks = [b"\x01" * (32 * 2**20) for _ in range(max(need, 0) // (32 * 2**20))]
        time.sleep(5)
        return len(blocks)

    client.submit(hold, pure=False).result()


def stall_loop(client: Client) -> None:
    # A worker whose event loop is held 2 s every 3 s (a blocking call in a
    # worker handler, as run by client.run), four times.
    first = sorted(client.nthreads())[0]
    for _ in range(4):
        client.run(time.sleep, 2.0, workers=[first])
        time.sleep(1.0)


def grow(n: int) -> int:
    import psutil

    limit = get_worker().memory_manager.memory_limit or 0
    blocks = []
    while psutil.Process().memory_info().rss < 1.2 * limit:
        blocks.append(b"\x01" * (64 * 2**20))
    return len(blocks)


def killed(client: Client) -> None:
    # distributed's docs (worker memory management): a task that outgrows the
    # worker is restarted by its nanny until it is KilledWorker.
    future = client.submit(grow, 1, pure=False, retries=0)
    with contextlib.suppress(Exception):  # KilledWorker: the point
        future.result()


def errors(client: Client) -> None:
    def parse(i: int) -> int:
        if i % 10 == 3:
            raise ValueError(f"bad row {i}")
        return i

    futures = client.map(parse, range(40))
    wait(futures)


# -- dask-examples notebooks (github.com/dask/dask-examples), scaled down ---------


def ex_array(client: Client) -> None:
    # array.ipynb: a random array, its transpose added, a slice's mean.
    x = da.random.random((16000, 16000), chunks=(1000, 1000))
    y = x + x.T
    y[::2, 8000:].mean(axis=1).compute()


def ex_dataframe(client: Client) -> None:
    # dataframe.ipynb: the timeseries dataset filtered, grouped, rolled.
    df = dask.datasets.timeseries(start="2000-01-01", end="2000-02-15", freq="1s")
    df[df.y > 0].groupby("name").x.std().compute()
    df.x.rolling("1min").mean().sum().compute()


def ex_bag(client: Client) -> None:
    # bag.ipynb: JSON-like records (make_people's shape, without mimesis)
    # filtered, mapped, plucked and counted.
    import dask.bag as db

    def person(i: int) -> dict[str, Any]:
        return {
            "age": 18 + i % 60,
            "name": [f"first{i % 97}", f"last{i % 89}"],
            "occupation": f"job{i % 23}",
        }

    people = db.from_sequence(range(600_000), npartitions=20).map(person)
    people.filter(lambda r: r["age"] > 30).map(
        lambda r: {"name": " ".join(r["name"]), "age": r["age"]}
    ).count().compute()
    people.pluck("occupation").frequencies().topk(10, key=lambda t: t[1]).compute()


def ex_delayed(client: Client) -> None:
    # delayed.ipynb: inc and add of random delays, summed.
    import random

    from dask.delayed import delayed

    def inc(x: int) -> int:
        time.sleep(random.random() / 10)
        return x + 1

    def add(x: int, y: int) -> int:
        time.sleep(random.random() / 10)
        return x + y

    zs = []
    for i in range(64):
        x = delayed(inc)(i)
        y = delayed(inc)(x)
        zs.append(delayed(add)(x, y))
    delayed(sum)(zs).compute()


EXAMPLES = "dask-examples "
WORKLOADS = [
    Workload("ex_array", EXAMPLES + "array.ipynb", ex_array),
    Workload("ex_dataframe", EXAMPLES + "dataframe.ipynb", ex_dataframe),
    Workload("ex_bag", EXAMPLES + "bag.ipynb", ex_bag),
    Workload("ex_delayed", EXAMPLES + "delayed.ipynb", ex_delayed),
    Workload("anom_mean", "coiled/benchmarks test_array.py::test_anom_mean", anom_mean),
    Workload(
        "double_diff",
        "coiled/benchmarks test_array.py::test_double_diff",
        double_diff,
        allow={
            "tiny-tasks": "a diff across chunks cuts ~1,270 rechunk and slicing "
            "tasks of ~0.2 ms (slivers of 8 KB) from the 8 MB chunks; on two "
            "single-thread workers each waits ~1.5 ms on its thread for its "
            "next task, over a third of the threads' time (measured 2026-12-02)"
        },
    ),
    Workload(
        "stencil", "coiled/benchmarks test_array.py::test_map_overlap_sample", stencil
    ),
    Workload(
        "rechunk_p2p", "coiled/benchmarks test_rechunk.py (tiles to rows)", rechunk
    ),
    Workload(
        "dot_product", "coiled/benchmarks test_array.py::test_dot_product", dot_product
    ),
    Workload(
        "align", "coiled/benchmarks test_dataframe.py::test_dataframe_align", align
    ),
    Workload("set_index", "coiled/benchmarks test_join.py::test_set_index", set_index),
    Workload("p2p_merge", "coiled/benchmarks test_join.py::test_join_big", p2p_merge),
    Workload("groupby", "coiled/benchmarks test_h2o.py (groupby q1)", groupby),
    Workload(
        "merge_restart",
        "coiled/benchmarks test_join.py, merges with client.restart()",
        merge_with_restarts,
        not_on={"threads": "client.restart() needs nannies"},
        task_stream=False,
    ),
    Workload(
        "large_map",
        "coiled/benchmarks test_futures.py::test_large_map",
        large_map,
        expect=frozenset({"tiny-tasks"}),
    ),
    Workload(
        "straggler",
        "coiled/benchmarks test_work_stealing.py"
        "::test_work_stealing_on_straggling_worker",
        straggler,
    ),
    Workload(
        "spill",
        "coiled/benchmarks test_spill.py::test_spilling",
        spill,
        expect=frozenset({"spilling"}),
        allow={
            "event-loop-blocked": "distributed's memory monitor spills on the "
            "worker's event loop: gigabytes written hold it for seconds"
        },
        not_on={"threads": "one process: its memory limit is the whole cluster's"},
    ),
    Workload(
        "leak",
        "distributed docs: unmanaged memory; stability memory-leak tests",
        leak,
        expect=frozenset({"unmanaged-memory"}),
        not_on={"threads": "one process: a leak is everyone's"},
    ),
    Workload(
        "stalled_loop",
        "distributed docs: 'Event loop was unresponsive'",
        stall_loop,
        expect=frozenset({"event-loop-blocked"}),
        not_busy="a loop held by a blocking call (not the CPU) while the host "
        "is oversubscribed reads as the host's",
    ),
    Workload(
        "killed_worker",
        "distributed docs: memory management, KilledWorker",
        killed,
        expect=frozenset({"memory-restart", "killed-worker"}),
        allow={
            "memory-pressure": "the worker passes its pause threshold (80%) "
            "on its way to the terminate one (95%)"
        },
        not_on={"threads": "no nanny to restart a thread"},
    ),
    Workload(
        "task_errors",
        "dask-examples: futures that raise",
        errors,
        expect=frozenset({"task-errors"}),
    ),
]


CLUSTERS: dict[str, dict[str, Any]] = {
    "2p": {"n_workers": 2, "threads_per_worker": 1},
    "4p": {"n_workers": 4, "threads_per_worker": 1},
    "threads": {"n_workers": 1, "threads_per_worker": 4, "processes": False},
}


def spilled_bytes(client: Client) -> float:
    """Bytes the workers' spill buffers wrote, by their own counters."""

    def written(dask_worker: Any) -> float:
        metrics = getattr(dask_worker.data, "cumulative_metrics", {})
        return float(metrics.get(("disk-write", "bytes"), 0.0))

    return float(sum(client.run(written).values()))


def transfer_share(stream: list[dict[str, Any]]) -> tuple[float, float]:
    """Seconds tasks waited for data from other workers, and their share of
    transfer and compute time, from distributed's own task stream."""
    seconds = Counter[str]()
    for task in stream:
        for phase in task.get("startstops", ()):
            seconds[phase["action"]] += phase["stop"] - phase["start"]
    busy = seconds["transfer"] + seconds["compute"]
    return seconds["transfer"], seconds["transfer"] / busy if busy else 0.0


#: The flags a busy host can raise (naming it).
HOST_KINDS = ("event-loop-blocked", "gil-contention")


def judge(
    workload: Workload, cluster: str, store: Path, busy: bool = False
) -> dict[str, Any]:
    options = CLUSTERS[cluster]
    memory = MEMORY_LIMIT if options.get("processes", True) else "4 GiB"
    with (
        dask.config.set({"observe.store": str(store), **workload.config}),
        LocalCluster(memory_limit=memory, dashboard_address=":0", **options) as lc,
        Client(lc) as client,
    ):
        before = spilled_bytes(client)
        began = time.perf_counter()
        watch = (
            get_task_stream(client=client)
            if workload.task_stream
            else contextlib.nullcontext()
        )
        # distributed's own warnings, heard beneath the run's listener (made
        # inside this): a graph it called large is the truth of large-graph.
        with (
            warnings.catch_warnings(record=True) as heard,
            dask_observe.record(workload.name, client=client) as run,
            watch as stream,
        ):
            workload.run(client)
        took = time.perf_counter() - began
        spilled = spilled_bytes(client) - before if cluster != "threads" else None
    flags = run.flags()
    raised = frozenset(flags["kind"])
    phases = phase_totals(task_table(run, run.started))
    # A flag naming a busy host says so in the table ("warning, host").
    severities = [
        f"{severity}, host" if advice == HOST_ADVICE else str(severity)
        for severity, advice in zip(flags["severity"], flags["advice"], strict=True)
    ]
    # Whether tasks waited on transfers depends on the cluster's shape (four
    # processes on two cores move data slowly): the truth is what distributed's
    # own task stream measured, by the flag's definition.
    transfer, share = transfer_share(stream.data if stream is not None else [])
    expect = set(workload.expect)
    if transfer >= 1.0 and share > 0.3:
        expect.add("high-transfer")
    # The dataframe workloads build their frames with from_pandas (the suites
    # read them from storage): 23-46 MiB embedded in each graph, which
    # distributed warns of, as it would in a user's notebook.
    if any("Sending large graph" in str(w.message) for w in heard):
        expect.add("large-graph")
    wrong = []
    if missing := expect - raised:
        wrong.append(f"missed {sorted(missing)}")
    # On a busy host, time-based flags that name the host are the truth.
    at_host = {
        str(kind)
        for kind, advice in zip(flags["kind"], flags["advice"], strict=True)
        if busy and kind in HOST_KINDS and advice == HOST_ADVICE
    }
    if extra := raised - expect - set(workload.allow) - at_host:
        wrong.append(f"false {sorted(extra)}")
    # Disk time only where the spill buffers wrote (the restarted workers'
    # counters start afresh: a workload that restarts may under-count).
    if phases["disk"] > 0 and spilled == 0:
        wrong.append(f"disk time {phases['disk']:.2f} s with nothing spilled")
    return {
        "workload": workload.name,
        "cluster": cluster,
        "seconds": round(took, 1),
        "tasks": run.summary()["n_tasks"],
        "raised": ", ".join(
            f"{kind} x{n} ({severity})" if n > 1 else f"{kind} ({severity})"
            for (kind, severity), n in Counter(
                zip(flags["kind"], severities, strict=True)
            ).items()
        )
        or "-",
        "shuffle_disk": shuffle_disk(run)["written"],
        "spilled": spilled,
        "transfer": f"{transfer:.1f} s ({share:.0%})",
        "disk_s": round(phases["disk"], 2),
        "stall_s": round(phases["stall"], 2),
        "verdict": "; ".join(wrong) or "right",
    }


def stability(passes: list[dict[str, Any]]) -> dict[str, Any]:
    """One row for the passes of a workload: the first, its verdict made
    ``unstable`` when the passes did not raise the same flags."""
    row = dict(passes[0])
    kinds = [
        sorted({part.split(" ")[0] for part in p.get("raised", "-").split(", ")})
        for p in passes
    ]
    if len(passes) > 1:
        row["passes"] = len(passes)
        if any(k != kinds[0] for k in kinds):
            seen = " / ".join(p.get("raised", "-") for p in passes)
            row["verdict"] = f"unstable: {seen}"
        else:
            row["verdict"] = (
                "; ".join(
                    sorted({p["verdict"] for p in passes if p["verdict"] != "right"})
                )
                or "right"
            )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clusters", default="2p,4p,threads")
    parser.add_argument("--only", help="comma-separated workload names")
    parser.add_argument("--repeat", type=int, default=1, help="passes per workload")
    parser.add_argument(
        "--busy", type=int, default=0, help="processes spinning outside the cluster"
    )
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    rows = []
    with tempfile.TemporaryDirectory() as tmp, burners(args.busy):
        for cluster in args.clusters.split(","):
            for workload in WORKLOADS:
                if only and workload.name not in only:
                    continue
                why = workload.not_on.get(cluster)
                if args.busy and workload.not_busy:
                    why = workload.not_busy
                if why:
                    print(f"{workload.name} on {cluster}: n/a ({why})")
                    continue
                passes = []
                for _ in range(args.repeat):
                    store = Path(tmp) / f"{cluster}.sqlite"
                    try:
                        row = judge(workload, cluster, store, busy=args.busy > 0)
                    except Exception as e:  # the cluster failed (restart timed out)
                        row = {
                            "workload": workload.name,
                            "cluster": cluster,
                            "verdict": f"not run: {type(e).__name__}: {e}"[:160],
                        }
                    passes.append(row)
                    print(row, flush=True)
                rows.append(stability(passes))
    table = pd.DataFrame(rows)
    print(table.to_string(index=False))
    wrong = table[table["verdict"] != "right"]
    print(f"\n{len(table) - len(wrong)} of {len(table)} verdicts right")
    return 1 if len(wrong) else 0


if __name__ == "__main__":
    sys.exit(main())

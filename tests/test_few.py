"""A small run's figures, worked out in plain Python (``analysis.few``), are
the figures pandas works out of the same rows: checked against each other on a
real run and on a written one with what a real run rarely holds at once (a
task killed with its worker, workers removed, a memory restart, "disk"
seconds that touched no disk)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from distributed import Client, LocalCluster

import dask_observe
from dask_observe.analysis import few, figures
from dask_observe.report import model, tasks
from dask_observe.store import rundata

from .synthetic import A, B, SyntheticRun


def both_ways(
    run: dask_observe.Run, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The figures of ``run`` as its report reads them: in plain Python (a
    small run's way), then by pandas (a large run's)."""

    def read() -> dict[str, Any]:
        fast = figures.fast_memory(run)
        return {
            "tasks": tasks.compute(run, run.started, tasks.report_duration(run)),
            "fast": fast,
            "process": figures.process_memory(run, fast),
            "series": model._memory_series(run, run.started),
            "rows": run.tasks(),
        }

    plain = read()
    with monkeypatch.context() as patched:
        patched.setattr(few, "FEW_TASKS", -1)
        patched.setattr(few, "FEW_ROWS", -1)
        patched.setattr(rundata, "_FEW_TASK_ROWS", -1)
        by_pandas = read()
    return plain, by_pandas


def assert_same(plain: dict[str, Any], by_pandas: dict[str, Any]) -> None:
    def same(a: pd.DataFrame, b: pd.DataFrame) -> None:
        pd.testing.assert_frame_equal(
            a, b, check_dtype=False, check_index_type=False, check_names=False
        )

    # The run's own task rows, as users read them: the same types too.
    pd.testing.assert_frame_equal(plain["rows"], by_pandas["rows"])
    mine, theirs = plain["tasks"], by_pandas["tasks"]
    assert (mine.n_tasks, mine.workers, mine.threads) == (
        theirs.n_tasks, theirs.workers, theirs.threads
    )  # fmt: skip
    assert mine.phases == pytest.approx(theirs.phases)
    same(mine.prefixes, theirs.prefixes)
    same(mine.stream, theirs.stream)
    same(mine.failed, theirs.failed)
    same(plain["fast"], by_pandas["fast"])
    same(plain["process"], by_pandas["process"])
    assert plain["series"].keys() == by_pandas["series"].keys()
    for worker, series in plain["series"].items():
        same(series, by_pandas["series"][worker])


def slow_inc(x: int) -> int:
    import time

    time.sleep(0.05)
    return x + 1


def fail(x: int) -> int:
    raise ValueError(f"bad {x}")


def test_a_real_runs_figures_are_pandas_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two workers of two threads: four lanes; three prefixes, one erred task
    # and tasks that fetch their inputs from the other worker.
    path = tmp_path / "observe.sqlite"
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=2, processes=False, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
        dask_observe.record("mixed", client=client, store=path) as run,
    ):
        incs = client.map(slow_inc, range(8), pure=False)
        sums = [client.submit(sum, incs[i : i + 4], pure=False) for i in (0, 4)]
        client.gather(sums)
        broken = client.submit(fail, 1, pure=False)
        with pytest.raises(ValueError, match="bad 1"):
            broken.result()
    plain, by_pandas = both_ways(run, monkeypatch)
    assert plain["tasks"].n_tasks == 11 and len(plain["tasks"].failed) == 1
    assert plain["tasks"].threads >= 2 and len(plain["process"])  # there to compare
    assert_same(plain, by_pandas)


def test_a_written_runs_rare_rows_give_pandas_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with dask_observe.Store(tmp_path / "observe.sqlite") as store:
        written = SyntheticRun(store, "rare").tasks(4, 0.5, "load")
        written.task(0.2, 0.3, "spill", A, disk_read=0.1, disk_write=0.2)
        written.task(0.4, 0.3, "spill", B, disk_write=0.05, status="erred",
                     exception="OSError('disk')")  # fmt: skip
        # A task killed with its worker: no start, no thread; its worker said
        # when it began (task-running).
        key = "('eat-abc', 0)"
        ended = written.start + 2.5
        written.records.append(
            ("task", ended, key, "eat", written.span, None, None, None, None,
             "erred", None, None, None, None, None, None, "KilledWorker", None)
        )  # fmt: skip
        written.event(1.6, "task-running", B, key=key, since=written.start + 0.6)
        for t, rss in ((0.3, 2**28), (0.9, 3 * 2**28), (1.4, 2**29), (1.45, 2**29)):
            written.metrics(t, B, memory_rss=rss)
        written.series((0.5, 1.5, 2.5), A, memory_process=2**27, memory_rss=2**27)
        written.series((0.5, 1.5), B, memory_process=2**28)
        written.metrics(2.0, None, memory_managed=5.0, memory_spilled=0.0)
        for t in (0.5, 1.5):
            written.metrics(t, A, memory_managed=1.0, memory_unmanaged=2.0,
                            memory_limit=2**30)  # fmt: skip
        written.event(1.65, "worker-restart-memory", B, rss=2**30)
        written.event(1.7, "worker-removed", B, stimulus_id="killed")
        run = written.end(3.0)
        plain, by_pandas = both_ways(store.run(run.id), monkeypatch)
    figures_ = plain["tasks"]
    assert figures_.n_tasks == 7 and len(figures_.failed) == 2
    stream = figures_.stream.set_index("prefix")
    assert stream.loc["eat", "worker"] == B  # placed where it ran
    assert stream["stall_s"].sum() == pytest.approx(0.35)  # no byte on disk
    assert_same(plain, by_pandas)

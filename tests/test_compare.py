"""Comparing recorded runs: a slower run shows as a regression, a run against
itself as no change at all."""

from __future__ import annotations

import itertools
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dask.config
import pytest
from distributed import Client, LocalCluster

import dask_observe
from dask_observe.analysis.compare import NothingToCompare
from dask_observe.analysis.verdicts import HOST_BUSIER

from .conftest import dask_observe_cli, dask_observe_loading
from .marks import marks_agree
from .tasks import nap

# Regressions judged from timings of worker processes, which the test
# process's own work does not slow (conftest.cluster).
pytestmark = pytest.mark.worker_processes


@pytest.fixture(scope="module")
def pair_store(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dask_observe.Store]:
    """A store of this module's own with two runs, the second three times as
    slow, that its tests only read (recorded for each, 2-3 s a test, in the
    suite's one-at-a-time part)."""
    path = tmp_path_factory.mktemp("compare") / "observe.sqlite"
    with (
        Client(cluster, set_as_default=False) as client,
        dask_observe.open_store(path) as store,
    ):
        for name, seconds in (("before", 0.05), ("after", 0.15)):
            with dask_observe.record(name, client=client, store=store):
                client.gather(client.map(nap, [seconds] * 20, pure=False))
        yield store


@pytest.fixture
def two_runs(pair_store: dask_observe.Store) -> tuple[dask_observe.Run, ...]:
    return (pair_store.run(1), pair_store.run(2))


def test_a_slower_run_is_marked_as_a_regression(
    two_runs: tuple[dask_observe.Run, ...], pair_store: dask_observe.Store
) -> None:
    before, after = two_runs
    comparison = dask_observe.compare(before, after)
    table = comparison.table.set_index("figure")
    assert table.loc["prefix nap", "ratio"] == pytest.approx(3.0, rel=0.2)
    assert table.loc["prefix nap", "verdict"] == "regression"
    assert table.loc["wall time", "verdict"] == "regression"
    assert table.loc["compute time", "verdict"] == "regression"
    # The tasks sleep: the extra time is waiting, as the workers metered it.
    assert table.loc["waiting time (GIL, I/O)", "ratio"] == pytest.approx(3.0, rel=0.2)
    assert table.loc["waiting time (GIL, I/O)", "verdict"] == "regression"
    assert table.loc["tasks", "ratio"] == 1.0 and table.loc["tasks", "verdict"] == ""
    # Read the other way round, the same change is an improvement.
    back = dask_observe.compare(after.id, before.id, store=pair_store).table
    back = back.set_index("figure")
    assert back.loc["prefix nap", "verdict"] == "improvement"

    html = comparison._repr_html_()
    assert html.count('data-verdict="regression"') == len(comparison.regressions)
    assert '<img src="data:image/svg+xml;base64,' in html and "<script" not in html
    assert "<svg" not in html  # untrusted notebooks would drop it


@pytest.mark.alone  # runs of 0.5 s, told apart by noise
def test_identical_runs_are_unmarked_and_twice_the_work_is_a_regression(
    client: Client, store_path: Path
) -> None:
    runs = []
    for i in range(5):
        n, config = (40, {}) if i < 4 else (80, {"distributed.admin.tick.limit": "4s"})
        with (
            dask.config.set(config),
            dask_observe.record("nightly", client=client) as run,
        ):
            client.gather(client.map(nap, [0.02] * n, pure=False))
        runs.append(run)
    for a, b in itertools.combinations(runs[:4], 2):
        table = dask_observe.compare(a, b).table
        marked = table[table["verdict"] != ""]
        assert marked.empty, marked.to_string()
    fifth = dask_observe.compare(runs[3], runs[4])
    table = fifth.table.set_index("figure")
    assert table.loc["wall time", "verdict"] == "regression"
    assert table.loc["prefix nap", "verdict"] == "regression"  # 2x the tasks
    # ... which is said first, and the pace a task did not change.
    assert fifth.work == [("nap", 40, 80)]
    assert table.loc["prefix nap per task", "verdict"] == ""
    assert ("config", "distributed.admin.tick.limit", None, "4s") in fifth.changed
    assert runs[4].environment()["config"]["distributed.admin.tick.limit"] == "4s"

    # The job's history says the same: the fifth run is the regression, and why.
    history = dask_observe.open_store().history("nightly")
    assert list(history["id"]) == [r.id for r in runs]
    assert list(history["verdict"].fillna("")) == ["", "", "", "", "regression"]
    assert "config distributed.admin.tick.limit: None -> 4s" in history["changed"][4]
    assert history["changed"][1] == []
    assert (history["peak_memory"] > 2**20).all()
    # The newest two alone, judged as in the whole history.
    newest = dask_observe.open_store().history("nightly", last=2)
    assert list(newest["id"]) == [r.id for r in runs[3:]]
    assert list(newest["verdict"].fillna("")) == ["", "regression"]
    assert list(newest["changed"]) == list(history["changed"][3:])
    listed = dask_observe_cli(store_path, "history", "nightly")
    assert listed.returncode == 0, listed.stderr
    header, *shown = listed.stdout.splitlines()
    assert "judged" in header
    assert len(shown) == 5 and "regression" in shown[4]
    assert "distributed.admin.tick.limit" in shown[4]
    # The comparisons of its first runs (too few for a band) were kept: the
    # next history reads them, the same, in a process that loads no pandas.
    again, loaded = dask_observe_loading(store_path, "history", "nightly")
    assert again.returncode == 0, again.stderr
    assert again.stdout == listed.stdout
    assert loaded == []


def test_a_run_compared_with_itself_changes_nothing(
    two_runs: tuple[dask_observe.Run, ...],
) -> None:
    before, _ = two_runs
    table = dask_observe.compare(before, before).table
    assert (table["ratio"] == 1.0).all()
    assert (table["verdict"] == "").all()


def test_a_run_without_tasks_cannot_be_compared(
    client: Client, store_path: Path, two_runs: tuple[dask_observe.Run, ...]
) -> None:
    with dask_observe.record("idle", client=client) as idle:
        pass
    with pytest.raises(NothingToCompare, match=f"run {idle.id} 'idle' has no tasks"):
        dask_observe.compare(two_runs[0], idle)


def test_compare_from_the_command_line(pair_store: dask_observe.Store) -> None:
    store_path = pair_store.path
    done = dask_observe_cli(store_path, "compare", "1", "last", "--threshold", "0.5")
    assert done.returncode == 0, done.stderr
    assert "Run 1 'before' -> run 2 'after'" in done.stdout
    line = next(x for x in done.stdout.splitlines() if "prefix nap" in x)
    assert line.rstrip().endswith("regression")

    bad = dask_observe_cli(store_path, "compare", "1", "7")
    assert bad.returncode == 1 and "no run 7" in bad.stderr


def test_a_task_function_ten_times_slower_is_marked_for_one_task_and_many(
    client: Client, store_path: Path
) -> None:
    # One task: a single sample, which no rank test can judge; many: each 10x.
    # Wall time is marked when 2x and JITTER_S (0.25 s) apart: a one-task run
    # of 50 ms then had 0.19 s to spare, and CI's min-deps run read it past
    # that once (11-27; it passed 2 of 2 runs of the alone part there, and 12
    # of 12 such pairs, 63-75 ms each). 0.1 s leaves 0.4 s.
    for seconds in ([0.1], [0.01] * 30):
        runs = []
        for factor in (1, 10):
            with dask_observe.record("ab", client=client) as run:
                slower = [s * factor for s in seconds]
                client.gather(client.map(nap, slower, pure=False))
            runs.append(run)
        table = dask_observe.compare(*runs).table.set_index("figure")
        for figure in ("wall time", "prefix nap", "waiting time (GIL, I/O)"):
            assert table.loc[figure, "verdict"] == "regression", (figure, seconds)
        assert table.loc["prefix nap", "ratio"] == pytest.approx(10, rel=0.3)


def load(x: int) -> int:
    end = time.perf_counter() + 0.02
    while time.perf_counter() < end:  # CPU in this function's own lines
        pass
    return x


def transform(x: int, seconds: float) -> int:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    return x


def two_lines() -> Iterator[int]:
    yield 1
    yield 2


def test_a_function_is_one_row_whichever_of_its_lines_a_worker_sampled_first() -> None:
    # distributed's profiler describes a function's node by the line its first
    # sample was on: two workers (or two runs) whose first samples of a loop
    # fell on different lines made two rows of one function, and a comparison
    # judged one slower and the other faster (CI, the test below, on 3.12).
    from distributed import profile

    from dask_observe.analysis.trees import merge_profiles, profile_table, prune_profile

    on_first, on_second = two_lines(), two_lines()
    next(on_first), next(on_second), next(on_second)
    trees = []
    for paused in (on_first, on_second):  # a worker's sample of each
        assert isinstance(paused, types.GeneratorType) and paused.gi_frame
        state = profile.create()
        profile.process(paused.gi_frame, None, state)
        trees.append(prune_profile(state, 0.01))
    assert {t["root"]["children"][0]["line"] for t in trees} == {
        two_lines.__code__.co_firstlineno
    }
    table = profile_table({"": merge_profiles(trees, 0.01)})
    assert table[["function", "lineno"]].values.tolist() == [
        ["two_lines", two_lines.__code__.co_firstlineno]
    ]
    assert table["self_s"].tolist() == [pytest.approx(0.02)]


def sampled(function: Callable[..., Iterator[int]], samples: int) -> dict[str, Any]:
    """distributed's profile tree of ``samples`` samples taken inside
    ``function`` (a generator paused in it), as a worker keeps one."""
    from distributed import profile

    from dask_observe.analysis.trees import prune_profile

    paused = function()
    next(paused)
    assert isinstance(paused, types.GeneratorType) and paused.gi_frame
    state = profile.create()
    for _ in range(samples):
        profile.process(paused.gi_frame, None, state)
    return prune_profile(state, 0.01)


def test_a_prefix_its_profile_never_sampled_is_not_said_to_have_taken_0_s(
    tmp_path: Path,
) -> None:
    # A short run may fall within one of a worker's profile cycles (1 s) and
    # keep no sample of a prefix that ran: "transform 0 s -> 2 s, a
    # regression" (infinitely slower) was said of a 5x one (CI, 3.13).
    from .synthetic import SyntheticRun

    with dask_observe.Store(tmp_path / "observe.sqlite") as store:
        runs = []
        for transform_samples in (0, 200):
            run = SyntheticRun(store)
            run.tasks(40, 0.05, "load").tasks(40, 0.05, "transform")
            ended = run.end(10.0)
            trees = {"load": sampled(two_lines, 200)}
            if transform_samples:
                trees["transform"] = sampled(two_lines, transform_samples)
            store.set_profiles(ended.id, trees)
            runs.append(store.run(ended.id))
        code = dask_observe.compare(*runs).profile_changes()
    assert list(code["prefix"]) == ["load"]
    assert list(code["verdict"]) == [""]


def test_a_function_made_slower_inside_a_larger_job_is_named_with_file_and_line(
    make_client: Callable[..., Client], store_path: Path
) -> None:
    # A cluster of its own: the session's workers carry every earlier test's
    # samples in their profiles.
    client = make_client(n_workers=2, threads_per_worker=1)
    runs = []
    # transform 5x slower, load unchanged; each run's transform long enough
    # for a loaded worker's profiler to sample (0.4 s once got none of it).
    for seconds in (0.02, 0.1):
        with dask_observe.record("job", client=client) as run:
            loaded = client.map(load, range(40), pure=False)
            client.gather(client.map(transform, loaded, seconds=seconds))
        runs.append(run)
    comparison = dask_observe.compare(*runs)
    code = comparison.profile_changes()
    assert list(code.columns)[:8] == [
        "function", "filename", "lineno", "prefix", "a_s", "b_s", "ratio", "verdict",
    ]  # fmt: skip
    assert code[["a_tasks", "b_tasks"]].iloc[0].tolist() == [40, 40]
    top = code.iloc[0]
    assert (top["function"], top["prefix"], top["verdict"]) == (
        "transform", "transform", "regression",
    )  # fmt: skip
    assert top["filename"].endswith("test_compare.py")
    first = transform.__code__.co_firstlineno
    assert first <= top["lineno"] <= first + 4
    assert top["ratio"] == pytest.approx(5, rel=0.3)
    unchanged = code[code["function"] == "load"]
    assert list(unchanged["verdict"]) == [""]
    # Shown where comparisons are read: text, HTML with b's profile
    # coloured by its change (an image, as untrusted notebooks need).
    assert "Code that changed" in comparison.text()
    assert "transform (" in comparison.text().split("Code that changed")[1]
    html = comparison._repr_html_()
    assert '<table class="dobs-code-changes"' in html
    assert '<p data-figure="profile-diff"><img src="data:image/svg+xml;base64,' in html


def test_more_smaller_tasks_mark_their_totals_and_their_pace_apart(
    make_client: Callable[..., Client], store_path: Path
) -> None:
    """A 7x slowdown was marked "improvement": ``random_sample`` of 4000x4000
    in 16 chunks against 8000x8000 in 256 took 6.5-7.3x the time in all, and
    less a (smaller) task; the mark judged the time a task and sat beside the
    totals. Here: 4 tasks of 0.3 s against 16 of 0.15 s."""
    client = make_client(n_workers=2, threads_per_worker=1)
    runs = []
    for n, seconds in ((4, 0.3), (16, 0.15)):
        with dask_observe.record("chunks", client=client) as run:
            client.gather(client.map(transform, range(n), seconds=seconds, pure=False))
        runs.append(run)
    comparison = dask_observe.compare(*runs)
    code = comparison.profile_changes()
    row = code[code["function"] == "transform"].iloc[0]
    assert (row["a_tasks"], row["b_tasks"]) == (4, 16)
    assert row["ratio"] == pytest.approx(2.0, rel=0.35)
    # The totals beside it doubled: slower, said of the code or, where the
    # suite loaded the host during b (truly: its samples say so), of the host.
    slower = row["verdict"]
    assert slower in ("regression", "slower on a busier host"), slower
    if slower != "regression":
        assert comparison.host[1].waiting - comparison.host[0].waiting >= HOST_BUSIER
    assert row["per_task_ratio"] == pytest.approx(0.5, rel=0.35)
    assert row["per_task_verdict"] == "improvement"  # each task took half
    marks_agree(comparison)
    line = next(
        line
        for line in comparison.text().splitlines()
        if line.startswith("  transform")
    )
    assert f"{slower}; a task (4 -> 16 tasks)" in line
    assert line.endswith("improvement")
    html = comparison._repr_html_()
    assert "a task (4 -&gt; 16 tasks)" in html


@pytest.mark.alone  # it makes the host busy itself
def test_a_short_run_on_a_busy_host_has_its_own_window_measured(
    client: Client, store_path: Path
) -> None:
    """The host's samples come once a second, stamped at its end: a run of
    half a second often had none, and a comparison could not tell a busy host
    from slower code. The scheduler measures each run's own window (from its
    start to its end), and the host's load is read from that."""
    import os

    from dask_observe.analysis.figures import host_load

    from .load import burners

    with burners((os.cpu_count() or 1) + 2):
        time.sleep(0.3)  # the burners running
        with dask_observe.record("short", client=client) as run:
            client.gather(client.map(nap, [0.05] * 8, pure=False))
    wall = float(run.summary()["duration_s"])
    (window,) = [d for _, _, s, d in run.event_rows("host-load") if d.get("run")]
    assert window["seconds"] <= wall + 0.5
    assert window["waiting"] >= 0.5, window  # threads waited for a core
    assert host_load(run, wall).waiting >= 0.5

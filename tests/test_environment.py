"""The environment of every run: what it ran in, what changed since another
run, and processes that disagree on versions."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import dask
import dask.config
from distributed import Client

import dask_observe
from dask_observe.analysis.changes import change_text, code_diff, differences

from .conftest import subprocess_env, wait_until
from .synthetic import SyntheticRun


def work(client: Client) -> int:
    return sum(client.gather(client.map(abs, range(-20, 0))))


def test_a_run_keeps_its_packages_cluster_config_and_what_changed(
    client: Client, store_path: Path
) -> None:
    with dask_observe.record("nightly", client=client) as a:
        work(client)
    with (
        dask.config.set({"distributed.scheduler.work-stealing-interval": "50ms"}),
        dask_observe.record("nightly", client=client) as b,
    ):
        work(client)
    ran_in = b.environment()
    packages = ran_in["packages"]
    # Every process's own versions: the client's, the scheduler's, the workers'.
    assert {"client", "scheduler", "workers"} <= set(packages)
    for who in ("client", "scheduler", "workers"):
        assert packages[who]["dask"] == version("dask")
        assert packages[who]["distributed"] == version("distributed")
        assert packages[who]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert ran_in["cluster"]["workers"] == 2 and ran_in["cluster"]["threads"] == 2
    assert ran_in["config"]["distributed.scheduler.work-stealing-interval"] == "50ms"
    assert (
        "distributed.scheduler.work-stealing-interval" not in a.environment()["config"]
    )
    # The comparison says what changed beside the figures.
    comparison = dask_observe.compare(a, b)
    assert (
        "config", "distributed.scheduler.work-stealing-interval", None, "50ms"
    ) in comparison.changed  # fmt: skip
    assert 'data-changed="config"' in comparison._repr_html_()
    assert "work-stealing-interval: None -> '50ms'" in comparison.text()
    # One environment everywhere: no mismatch. (Not "no flag": the workers are
    # threads of this test's process, whose stalls on a loaded machine are
    # another flag's truth.)
    assert "version-mismatch" not in set(b.flags()["kind"])


def test_the_environment_is_kept_as_the_run_starts_and_completed_at_its_end(
    store_path: Path, make_client: Callable[..., Client]
) -> None:
    client = make_client(n_workers=1, processes=False)
    with dask_observe.record("scaling", client=client) as run:
        # Readable while the run goes on (the panel, a comparison, a crash).
        wait_until(lambda: run.refresh().environment(), "the environment mid-run")
        started = run.environment()
        assert started["packages"]["workers"]["dask"] == version("dask")
        assert client.cluster is not None
        client.cluster.scale(2)
        client.wait_for_workers(2, timeout=30)
        work(client)
    assert started["cluster"]["workers"] == 1
    ended = run.environment()
    # The shape it started in, though a second worker joined meanwhile.
    assert ended["cluster"] == started["cluster"]
    assert ended["packages"] == started["packages"]


def test_a_script_run_keeps_its_path_and_git_commit(tmp_path: Path) -> None:
    repo = tmp_path / "job"
    repo.mkdir()
    script = repo / "etl.py"
    script.write_text(
        "import dask_observe\n"
        "from distributed import Client, LocalCluster\n"
        "if __name__ == '__main__':\n"
        "    with LocalCluster(n_workers=1, processes=False, dashboard_address=':0')"
        " as lc, Client(lc) as client:\n"
        "        with dask_observe.record('etl', client=client) as run:\n"
        "            client.submit(abs, -1).result()\n"
        "        print(run.environment()['code'])\n"
    )
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for command in (["init", "-q"], ["add", "etl.py"], ["commit", "-qm", "etl"]):
        subprocess.run([*git, *command], cwd=repo, check=True)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    # Without distributed's GIL monitor (conftest.NO_GIL_MONITOR): its native
    # thread aborted this script at exit once in a suite run (here 2 of 90
    # runs of it, three at a time, before and after a change alike).
    env = subprocess_env(tmp_path / "s.sqlite")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env,
        timeout=120, check=True,
    )  # fmt: skip
    code: dict[str, Any] = eval(done.stdout.strip().splitlines()[-1])
    assert code == {
        "script": str(script.resolve()), "git_commit": commit, "git_dirty": False,
    }  # fmt: skip


def environment(**workers: dict[str, str]) -> dict[str, Any]:
    base = {"python": "3.11.7", "dask": "2026.8.0", "distributed": "2026.8.0"}
    return {
        "packages": {
            "client": base,
            "scheduler": base,
            **{w: {**base, **v} for w, v in workers.items()},
        },
        "cluster": {"workers": len(workers)},
        "config": {},
        "code": {},
    }


def test_a_worker_with_another_distributed_raises_version_mismatch(
    tmp_path: Path,
) -> None:
    store = dask_observe.open_store(tmp_path / "s.sqlite")
    run = SyntheticRun(store)
    recorded = run.end(
        2.0,
        environment=environment(
            **{"tcp://w1:1": {}, "tcp://w2:1": {"distributed": "2025.1.0"}}
        ),
    )
    flags = recorded.flags()
    assert list(flags["kind"]) == ["version-mismatch"]
    assert "tcp://w2:1 2025.1.0" in flags["message"][0]
    # A patch release of Python is no mismatch; equal versions are none.
    same = SyntheticRun(store).end(
        2.0, environment=environment(**{"tcp://w1:1": {"python": "3.11.9"}})
    )
    assert same.flags().empty


def test_differences_name_packages_config_cluster_and_code() -> None:
    a = environment(workers={})
    b = environment(workers={"dask": "2026.9.0"})
    b["config"] = {"array.chunk-size": "64MiB"}
    a["code"] = {"cell": "import dask\nx = load()\ny = x.sum()\nz = y * 2\nz.compute()"}
    b["code"] = {
        "cell": "import dask\nx = load()\ny = x.mean()\nz = y * 2\nz.compute()"
    }
    assert differences(a, b) == [
        ("packages", "dask (workers)", "2026.8.0", "2026.9.0"),
        ("config", "array.chunk-size", None, "64MiB"),
        ("code", "cell", a["code"]["cell"], b["code"]["cell"]),
    ]
    assert differences(a, {}) == []  # a run recorded before environments
    # The cell is shown as a diff, two lines of context around the change
    # (it read "code cell (source a) (source b)"), and in a history's list.
    assert code_diff(a["code"]["cell"], b["code"]["cell"]) == [
        "@@ -1,5 +1,5 @@",
        " import dask",
        " x = load()",
        "-y = x.sum()",
        "+y = x.mean()",
        " z = y * 2",
        " z.compute()",
    ]
    assert change_text(*differences(a, b)[2]) == "code cell: +1 -1 lines"


def test_the_config_kept_is_each_value_that_differs_from_dasks_defaults() -> None:
    from dask_observe.recording.environment import config_changes

    before = config_changes()  # what this process's config set already
    with dask.config.set(
        {
            "distributed.worker.memory.target": 0.5,  # one leaf of a section
            "distributed.comm.timeouts": {},  # a section emptied
            "distributed.admin.tick": "off",  # a section made a value
            "team.secret-sauce": {"kind": "hot", "level": [1, 2]},  # new keys
            "array.chunk-size": "128MiB",  # its default: unchanged
        }
    ):
        changed = config_changes()
    assert changed == {
        **before,
        "distributed.admin.tick": "off",
        "distributed.comm.timeouts": {},
        "distributed.worker.memory.target": 0.5,
        "team.secret-sauce.kind": "hot",
        "team.secret-sauce.level": [1, 2],
    }
    assert config_changes() == before


def test_package_versions_are_those_importlib_metadata_gives(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A run lists each package's version as ``importlib.metadata`` says it,
    read from the path's folder names where they tell it."""
    import importlib.metadata

    from dask_observe.recording.plugins import PACKAGES, installed_versions

    def metadata(names: tuple[str, ...]) -> dict[str, str]:
        found = {}
        for name in names:
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                found[name] = importlib.metadata.version(name)
        return found

    assert installed_versions(PACKAGES) == metadata(PACKAGES)
    assert {"dask", "distributed", "dask-observe"} <= set(installed_versions(PACKAGES))

    # A folder first on the path: its packages win, as they would on import
    # (an egg's too, whose version comes from its metadata); a name spelled
    # otherwise (dots, capitals) is the same package.
    first, later = tmp_path / "first", tmp_path / "later"
    for folder, entry, name, number in [
        (first, "Team_Tools-2.0.dist-info", "Team.Tools", "2.0"),
        (later, "team_tools-1.0.dist-info", "team-tools", "1.0"),
        (first, "old_thing.egg-info", "old-thing", "0.9"),
        (later, "old_thing-1.1.dist-info", "old-thing", "1.1"),
    ]:
        (folder / entry).mkdir(parents=True)
        (folder / entry / ("PKG-INFO" if "egg" in entry else "METADATA")).write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {number}\n"
        )
    monkeypatch.syspath_prepend(str(later))
    monkeypatch.syspath_prepend(str(first))
    names = ("team-tools", "old-thing", "dask", "not-installed-anywhere")
    assert installed_versions(names) == metadata(names)
    assert installed_versions(names)["team-tools"] == "2.0"
    assert installed_versions(names)["old-thing"] == "0.9"


def test_the_workers_of_one_process_read_its_environment_once(
    monkeypatch: Any,
) -> None:
    """200 in-process workers flushed at a run's end at once ask for their
    process's environment together: one read answers them all."""
    import asyncio
    import time

    from dask_observe.recording import plugins

    reads = []
    real = plugins.process_environment

    def slow_read(holder: Any = None) -> dict[str, Any]:
        reads.append(holder)
        time.sleep(0.05)  # others ask meanwhile
        return real(holder)

    monkeypatch.setattr(plugins, "process_environment", slow_read)

    class Worker:  # the class that in-process workers share
        pass

    async def flush_all() -> list[dict[str, Any]]:
        asked = (plugins._process_environment_off_loop(Worker) for _ in range(50))
        return await asyncio.gather(*asked)

    answers = asyncio.run(flush_all())
    assert reads == [Worker]
    assert answers == [real()] * 50
    assert asyncio.run(flush_all()) == answers and reads == [Worker]  # kept

"""The magics in a real IPython shell, with a real cluster behind them."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from distributed import Client
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import dask_observe

from .conftest import read_in_new_process, wait_until


def run(ip: InteractiveShell, source: str) -> object:
    """Run a cell as the notebook would; return its result or raise its error."""
    result = ip.run_cell(source)
    result.raise_error()
    return result.result


def test_load_ext_registers_the_magics_and_loading_twice_is_harmless(
    ip: InteractiveShell,
) -> None:
    ip.run_line_magic("load_ext", "dask_observe")
    magics = ip.magics_manager.magics
    assert "dask_record" in magics["cell"]
    assert "dask_observe" in magics["line"]


#: A fresh kernel, its cells run as a notebook's: the extension loaded before
#: or after the cell that imports distributed (``argv[1]``), then a
#: threads-only LocalCluster (its scheduler and workers in this process) and
#: a first recorded block, during which every import of a module of ours is
#: noted with the thread that made it. Prints them as JSON.
FIRST_BLOCK_IMPORTS = """
import importlib.abc, json, sys, threading
from IPython.core.interactiveshell import InteractiveShell

seen, block = [], []
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("dask_observe", "pandas"):
            (block if block else seen).append([name, threading.current_thread().name])
        return None

sys.meta_path.insert(0, Watch())
shell = InteractiveShell.instance()
cells = ["%load_ext dask_observe", "from distributed import Client, LocalCluster"]
for cell in cells if sys.argv[1] == "extension first" else cells[::-1]:
    shell.run_cell(cell).raise_error()
shell.run_cell(
    "cluster = LocalCluster(n_workers=1, processes=False, dashboard_address=':0')"
    "; client = Client(cluster); warm = client.submit(abs, -1).result()"
).raise_error()
client = shell.user_ns["client"]
import dask_observe

# What a notebook's pause between cells gives the extension's warm-up.
for thread in threading.enumerate():
    if thread.name == "dask-observe-warm-up":
        thread.join(60)
warmed = [name for name, thread in seen if thread == "dask-observe-warm-up"]
block.append(None)
with dask_observe.record("first", client=client) as run:
    client.submit(abs, -2).result()
run.flags(), run.report().html  # what a recorded cell shows
imported = [e for e in block[1:] if e[1] != "dask-observe-run-end"]
print(json.dumps({"imported": imported, "status": run.status,
                  "warmed": "pandas" in warmed}))
client.close(); shell.user_ns["cluster"].close()
"""


@pytest.mark.parametrize("order", ["extension first", "distributed first"])
def test_load_ext_readies_the_first_recorded_block(
    store_path: Path, order: str
) -> None:
    """Once the extension is loaded and distributed imported (in either
    order), a first recorded block imports nothing of ours: neither the
    modules a run's start and end use nor the capture bundle that the
    cluster's scheduler and workers in this process run (the run's end
    thread, after the block, aside); nor, once the warm-up thread that the
    extension starts then is done (between cells), pandas or anything its
    flags and report need. Its cost is measured by
    ``benchmarks/fixed_cost.py --load-ext`` and ``cell_cost.py``."""
    found = read_in_new_process(store_path, FIRST_BLOCK_IMPORTS, order)
    assert found["status"] == "finished"
    assert found["warmed"]  # pandas, by the warm-up thread
    assert found["imported"] == []


def test_unload_ext_removes_the_magics(ip: InteractiveShell) -> None:
    ip.run_line_magic("unload_ext", "dask_observe")
    magics = ip.magics_manager.magics
    assert "dask_record" not in magics["cell"]
    assert "dask_observe" not in magics["line"]
    ip.run_line_magic("load_ext", "dask_observe")  # for the fixture's teardown


def test_dask_record_records_the_cell_and_returns_its_value(
    ip: InteractiveShell,
    client: Client,
    store_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ip.user_ns["client"] = client
    value = run(
        ip,
        "%%dask_record squares\n"
        "futures = client.map(lambda x: x * x, range(6))\n"
        "sum(client.gather(futures))\n",
    )
    assert value == 55
    assert ip.user_ns["futures"]  # the cell's names land in the user namespace
    out = capsys.readouterr().out
    assert "run 1 'squares' finished: 6 tasks" in out
    row = dask_observe.open_store().runs().iloc[0]
    assert (row["name"], row["status"], row["n_tasks"]) == ("squares", "finished", 6)
    # Where the run came from: the cell, as the user wrote it.
    code = dask_observe.open_store().run("last").environment()["code"]
    assert code == {"cell": "futures = client.map(lambda x: x * x, range(6))\n"
                            "sum(client.gather(futures))\n"}  # fmt: skip
    history = run(ip, "%dask_observe history squares")
    assert isinstance(history, pd.DataFrame)
    assert list(history["n_tasks"]) == [6] and list(history["status"]) == ["finished"]


def test_a_recorded_cells_end_is_whole_once_its_report_was_shown(
    ip: InteractiveShell,
    client: Client,
    store_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A cell's report is shown once its run is judged; what only a history
    # reads (its peak memory, pace) is kept in the run's row after, once the
    # cell says the report was shown. Were it never said, the end would wait
    # SHOWN_WAIT_S (an hour here) and the panel's history, which reads only
    # what is kept, would show the run without them.
    import sqlite3

    from dask_observe.recording import finish

    monkeypatch.setattr(finish, "SHOWN_WAIT_S", 3600.0)
    ip.user_ns["client"] = client
    run(ip, "%%dask_record kept\nclient.submit(sum, [1, 2], pure=False).result()\n")

    def kept() -> tuple[object, ...]:
        with sqlite3.connect(store_path) as raw:
            (row,) = raw.execute("SELECT pace, peak_memory FROM runs").fetchall()
        return tuple(row)

    wait_until(lambda: None not in kept(), "the run's history figures")
    # And a history read then is the run's whole end: its figures kept.
    (peak,) = dask_observe.open_store().history("kept")["peak_memory"]
    assert peak == kept()[1]


def test_dask_record_without_a_name_names_the_run_after_the_cell(
    ip: InteractiveShell, client: Client, store_path: Path
) -> None:
    run(ip, "%%dask_record\nx = 1\n")
    assert dask_observe.open_store().run("last").name.startswith("cell ")


def test_a_cell_that_raises_still_raises_and_its_run_is_failed(
    ip: InteractiveShell,
    client: Client,
    store_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ZeroDivisionError):
        run(ip, "%%dask_record broken\n1 / 0\n")
    assert "run 1 'broken' failed" in capsys.readouterr().out
    assert dask_observe.open_store().run("last").status == "failed"


def test_no_report_suppresses_the_summary(
    ip: InteractiveShell,
    client: Client,
    store_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run(ip, "%%dask_record quiet --no-report\nx = 2\n")
    assert "dask-observe" not in capsys.readouterr().out
    assert dask_observe.open_store().run("last").name == "quiet"


def test_native_records_compiled_code_and_profile_shows_it(
    ip: InteractiveShell,
    client: Client,
    store_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ip.user_ns["client"] = client
    run(
        ip,
        "%%dask_record sorted --native --no-report\n"
        "import numpy as np\n"
        "def sort_some(n):\n"
        "    for _ in range(n):\n"
        "        np.sort(np.random.random(1_000_000))\n"
        "client.submit(sort_some, 80).result()\n",
    )
    capsys.readouterr()
    run(ip, "%dask_observe profile")
    out = capsys.readouterr().out
    assert "In compiled code (py-spy):" in out
    assert re.search(
        r"sort_some +[\d.]+ m?s +[5-9]\d%|sort_some +[\d.]+ m?s +100%", out
    ), out
    assert "numpy" in out


def test_store_option_records_into_that_file(
    ip: InteractiveShell, client: Client, store_path: Path, tmp_path: Path
) -> None:
    other = tmp_path / "elsewhere.sqlite"
    run(ip, f"%%dask_record there --store {other}\nx = 3\n")
    assert dask_observe.open_store(other).run("last").name == "there"
    assert dask_observe.open_store().runs().empty


def test_without_a_client_the_cell_runs_and_a_message_says_how_to_make_one(
    ip: InteractiveShell, store_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(ip, "%%dask_record\ny = 40 + 2\ny\n") == 42
    err = capsys.readouterr().err
    assert "No Dask client found" in err and "client = Client()" in err
    assert "ran without recording" in err
    assert not store_path.exists()


@pytest.mark.parametrize(
    "line",
    ["%dask_observe", "%dask_observe bogus", "%dask_observe runs --nope"],
)
def test_bad_dask_observe_arguments_raise_usage_error_with_the_usage_line(
    ip: InteractiveShell, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = ip.run_cell(line)
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert "usage: %dask_observe" in str(result.error_in_exec)


def test_bad_dask_record_arguments_raise_usage_error_and_do_not_run_the_cell(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    result = ip.run_cell("%%dask_record --colour red\nran = True\n")
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert "usage: %%dask_record" in str(result.error_in_exec)
    assert "ran" not in ip.user_ns


def test_start_stop_status_and_runs(
    ip: InteractiveShell,
    client: Client,
    store_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ip.user_ns["client"] = client
    run(ip, "%dask_observe start across-cells")
    run(ip, "a = client.submit(lambda: 1).result()")
    run(ip, "b = client.submit(lambda: 2).result()")
    run(ip, "%dask_observe status")
    report = run(ip, "%dask_observe stop")
    out = capsys.readouterr().out
    assert "recording run 1 'across-cells'" in out
    assert "run 1 'across-cells' finished: 2 tasks" in out
    # What it recorded, shown under the cell as %%dask_record shows it.
    assert 'data-run-id="1"' in report._repr_html_()  # type: ignore[attr-defined]
    runs = run(ip, "%dask_observe runs")
    assert list(runs["name"]) == ["across-cells"]  # type: ignore[index]


def test_reading_magics_read_the_teams_archive(
    ip: InteractiveShell, client: Client, store_path: Path, tmp_path: Path
) -> None:
    url = tmp_path / "team"
    with dask_observe.record("nightly", client=client) as recorded:
        client.submit(abs, -1).result()
    uid = recorded.publish(str(url))
    runs = run(ip, f"%dask_observe runs --archive {url}")
    assert list(runs["id"]) == [uid] and list(runs["name"]) == ["nightly"]  # type: ignore[index]
    history = run(ip, f"%dask_observe history nightly --archive {url}")
    assert list(history["id"]) == [uid]  # type: ignore[index]
    with pytest.raises(UsageError, match="no run of"):
        ip.run_line_magic("dask_observe", f"flags nothing-like-it --archive {url}")


def test_stop_without_start_and_double_start_are_usage_errors(
    ip: InteractiveShell, client: Client, store_path: Path
) -> None:
    assert type(ip.run_cell("%dask_observe stop").error_in_exec).__name__ == (
        "UsageError"
    )
    run(ip, "%dask_observe start one")
    second = ip.run_cell("%dask_observe start two").error_in_exec
    assert "being recorded already" in str(second)
    run(ip, "%dask_observe stop")


def test_a_store_that_cannot_be_opened_never_stops_the_cell(
    ip: InteractiveShell,
    client: Client,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The cell runs; one line says it was not recorded, and why, naming the path."""
    (tmp_path / "file").write_text("x")
    result = ip.run_cell(
        f"%%dask_record there --store {tmp_path}/file/s.sqlite\nx = 1\n"
    )
    assert result.error_in_exec is None
    assert ip.user_ns["x"] == 1
    said = capsys.readouterr().err
    assert "run 'there' was not recorded (the block ran)" in said
    assert f"{tmp_path}/file is a file, not a directory" in said


def test_an_interrupted_cell_fails_its_run_and_reports_what_ran(
    ip: InteractiveShell,
    client: Client,
    store_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ip.user_ns["client"] = client
    result = ip.run_cell(
        "%%dask_record stopped\n"
        "done = client.gather(client.map(lambda x: x + 1, range(5)))\n"
        "raise KeyboardInterrupt\n"
    )
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    run_ = dask_observe.open_store().run("last")
    assert (run_.status, run_.summary()["n_tasks"]) == ("failed", 5)
    # Without HTML the report shows as its headline.
    assert "run 1 'stopped' failed: 5 tasks" in capsys.readouterr().out


#: A cell of about 3 s on the session's two single-threaded workers.
NAPPING = (
    "import time\nclient.gather(client.map(lambda x: time.sleep(0.3), range(20)))\n"
)


@pytest.mark.parametrize(("options", "shown"), [("", True), ("--no-widget", False)])
def test_a_long_cell_without_widgets_prints_text_progress_unless_told_not_to(
    ip: InteractiveShell,
    client: Client,
    store_path: Path,
    capsys: pytest.CaptureFixture[str],
    options: str,
    shown: bool,
) -> None:
    ip.user_ns["client"] = client
    run(ip, f"%%dask_record napping {options}\n{NAPPING}")
    err = capsys.readouterr().err
    found = re.search(r"\[dask-observe\] napping: \d+/20 tasks, 2 workers", err)
    assert bool(found) == shown
    assert ("[dask-observe]" in err) == shown
    # Once heartbeats have reported some of the naps: their time is waiting.
    assert bool(re.search(r"workers, CPU \d+%, waiting (9\d|100)%", err)) == shown


def test_a_dask_record_cell_inside_a_started_run_nests(
    ip: InteractiveShell, client: Client, store_path: Path
) -> None:
    ip.user_ns["client"] = client
    run(ip, "%dask_observe start outer")
    run(ip, "client.submit(lambda: 1).result()")
    run(ip, "%%dask_record inner\nclient.gather(client.map(str, range(3)))\n")
    run(ip, "%dask_observe stop")
    store = dask_observe.open_store()
    runs = store.runs().set_index("name")
    assert runs.loc["inner", "n_tasks"] == 3
    assert runs.loc["outer", "n_tasks"] == 4  # its own task and the inner cell's
    assert (runs["status"] == "finished").all()


def test_logs_flags_and_report_of_a_run(
    ip: InteractiveShell,
    client: Client,
    store_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ip.user_ns["client"] = client
    # Both tasks end inside the block: gather raises at the first error, and
    # the other task's line, logged after the block, is not the run's (CI on
    # Python 3.12 once: the shared cluster's workers are threads of this
    # process, and loud(1) ran 20 ms after loud(0) had raised).
    ip.run_cell(
        "%%dask_record oops --no-report\n"
        "import logging\n"
        "from distributed import wait\n"
        "def loud(x):\n"
        "    logging.getLogger('distributed.worker').warning('loud %d', x)\n"
        "    return 1 / x\n"
        "futures = client.map(loud, [1, 0])\n"
        "wait(futures)\n"
        "client.gather(futures)\n"
    )
    capsys.readouterr()
    run(ip, "%dask_observe logs --filter '^loud [01]$' --regex --level warning")
    lines = capsys.readouterr().out.splitlines()
    assert sorted(line.split(": ")[-1] for line in lines) == ["loud 0", "loud 1"]
    assert all(" WARNING  worker tcp://" in line for line in lines)

    run(ip, "%dask_observe flags last")
    out = capsys.readouterr().out
    assert (
        "[error] task-errors: 1 task(s) raised an exception: ZeroDivisionError" in out
    )
    assert "advice:" in out

    report = run(ip, "%dask_observe report")
    assert 'data-flag="task-errors"' in report._repr_html_()  # type: ignore[attr-defined]
    target = tmp_path / "oops.html"
    run(ip, f"%dask_observe report 1 -o {target}")
    assert "written to" in capsys.readouterr().out
    assert 'data-run-id="1"' in target.read_text()


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("%dask_observe logs 99", "no run 99"),
        ("%dask_observe flags nope", "'nope' is not a run id"),
        ("%dask_observe logs --level loud", "unknown log level 'loud'"),
        ("%dask_observe logs --filter ( --regex", "missing )"),
        ("%dask_observe report -o /nonexistent/dir/r.html", "cannot write the report"),
    ],
)
def test_reading_commands_turn_bad_input_into_usage_errors(
    ip: InteractiveShell, client: Client, store_path: Path, line: str, says: str
) -> None:
    ip.user_ns["client"] = client
    run(ip, "%%dask_record one --no-report\nclient.submit(abs, -1).result()\n")
    error = ip.run_cell(line).error_in_exec
    assert type(error).__name__ == "UsageError"
    assert says in str(error)


def test_compare_two_runs_in_the_notebook(
    ip: InteractiveShell, client: Client, store_path: Path
) -> None:
    ip.user_ns["client"] = client
    for name in ("a", "b"):
        run(ip, f"%%dask_record {name} --no-report\nclient.submit(abs, -1).result()\n")
    comparison = run(ip, "%dask_observe compare 1 2")
    assert "Run 1 'a' -> run 2 'b'" in repr(comparison)
    error = ip.run_cell("%dask_observe compare 1 3").error_in_exec
    assert type(error).__name__ == "UsageError" and "no run 3" in str(error)


def shown_traceback(
    ip: InteractiveShell, cell: str, capsys: pytest.CaptureFixture[str]
) -> tuple[BaseException | None, str]:
    """Run a cell; its error and the traceback IPython showed for it, as text
    (colours taken out)."""
    capsys.readouterr()
    result = ip.run_cell(cell)
    shown = capsys.readouterr()
    text = re.sub(r"\x1b\[[0-9;]*m", "", shown.out + shown.err)
    start = text.rfind("Traceback (most recent call last)")
    return result.error_in_exec, text[start:] if start >= 0 else text


@pytest.mark.parametrize(
    "body",
    [
        "x = 1\ny = 1 / (x - 1)\n",  # a plain Python error in the cell
        "\ny = 1 / 0\n",  # after a blank line (IPython drops leading ones)
        "future = client.submit(divide, 1, 0, pure=False)\nfuture.result()\n",
    ],
    ids=["cell", "blank-line", "task"],
)
def test_a_recorded_cells_error_reads_as_the_same_cell_unrecorded(
    ip: InteractiveShell,
    client: Client,
    store_path: Path,
    capsys: pytest.CaptureFixture[str],
    body: str,
) -> None:
    """A recorded cell's traceback held two frames of dask-observe, IPython's
    ``run_cell_magic`` and ``File <dask_record>:9`` with no source line, where
    the cell unrecorded shows ``Cell In[8], line 9`` and its code."""
    from .tasks import divide

    ip.user_ns.update(client=client, divide=divide)
    plain, plain_text = shown_traceback(ip, "# unrecorded\n" + body, capsys)
    recorded, text = shown_traceback(
        ip, "%%dask_record oops --no-widget\n" + body, capsys
    )
    assert type(recorded) is type(plain) is ZeroDivisionError
    assert str(recorded) == str(plain)

    def frames(shown: str) -> list[str]:
        # "Cell In[8], line 3" (IPython 8.1 on), "Input In [8], in <module>"
        # (8.0): the cell's frames, whichever way IPython names them.
        return [
            re.sub(r"In ?\[\d+\]", "In[n]", line)
            for line in shown.splitlines()
            if line.startswith(("Cell In[", "Input In ["))
        ]

    # The same frames from the cell on, the same lines with their code (the
    # unrecorded cell had a comment where the magic's line stands).
    assert frames(text) and frames(text) == frames(plain_text)
    if frames(text)[0].startswith("Cell"):  # 8.0's header names no line
        assert frames(text)[0] == "Cell In[n], line 3"
    source = body.splitlines()[1]
    assert f"----> 3 {source}" in text
    for inside in ("magics.py", "run_cell_magic", "dask_record>", "dask_observe"):
        assert inside not in text, inside
    assert text.count("ZeroDivisionError") == plain_text.count("ZeroDivisionError")


def test_a_client_made_in_a_cell_is_listed_live_until_it_closes(
    ip: InteractiveShell, store_path: Path
) -> None:
    """What the panel lists: a cluster a cell made, recorded or not, within
    5 s of the cell (its dashboard too), and gone within 5 s of its close."""

    def cluster_of(address: str) -> dict[str, object] | None:
        with dask_observe.open_store(store_path) as store:
            return next(
                (c for c in store.telemetry.clusters() if c["address"] == address), None
            )

    run(
        ip,
        "from distributed import Client, LocalCluster\n"
        "made = LocalCluster(n_workers=1, processes=False, dashboard_address=':0')\n"
        "found = Client(made)\n",
    )
    address = ip.user_ns["found"].scheduler.address
    wait_until(
        lambda: (c := cluster_of(address)) is not None and c["alive"],
        "the new client's cluster, live",
        timeout=5,
    )
    listed = cluster_of(address)
    assert listed is not None and listed["dashboard"]
    with dask_observe.open_store(store_path) as store:
        assert store.runs().empty  # found, not recorded
    run(ip, "found.close(); made.close()")
    wait_until(
        lambda: not (cluster_of(address) or {}).get("alive"),
        "the closed client's cluster, no longer live",
        timeout=5,
    )

"""A real notebook, executed by nbclient in a real kernel, as a user would run it."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from distributed import LocalCluster
from nbclient import NotebookClient
from nbconvert import HTMLExporter

import dask_observe

# A notebook's LocalCluster, as users make it: worker processes. The live
# display's figures (the naps' time is waiting) are of workers that the test
# process, busy with the suite, does not hold (its threads read 88 %).
pytestmark = pytest.mark.worker_processes


def text_of(cell: nbformat.NotebookNode) -> str:
    """Everything a cell shows: streams and the plain-text form of its results."""
    parts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            parts.append(output.text)
        elif "data" in output:
            parts.append(output.data.get("text/plain", ""))
    return "".join(parts)


def test_a_notebook_records_a_cell_with_dask_record(
    cluster: LocalCluster, store_path: Path, tmp_path: Path
) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext dask_observe"),
        nbformat.v4.new_code_cell("%load_ext dask_observe"),
        nbformat.v4.new_code_cell(
            "from distributed import Client\n"
            f"client = Client({cluster.scheduler_address!r})"
        ),
        nbformat.v4.new_code_cell(
            "%%dask_record notebook-run\n"
            "import dask.array as da\n"
            "da.ones((100, 100), chunks=(10, 10)).sum().compute()"
        ),
        nbformat.v4.new_code_cell("%dask_observe runs"),
    ]
    # The kernel inherits the test's environment, DASK_OBSERVE__STORE included.
    NotebookClient(
        nb,
        kernel_name="python3",
        timeout=120,
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()

    recorded = text_of(nb.cells[3])
    assert "run 1 'notebook-run' finished" in recorded
    assert "10000.0" in recorded  # the cell's value is still its result
    assert "notebook-run" in text_of(nb.cells[4])

    run = dask_observe.open_store().run("last")
    summary = run.summary()
    assert (summary["name"], summary["status"]) == ("notebook-run", "finished")
    # 100 chunks of ones, their partial sums and the final aggregation.
    assert summary["n_tasks"] > 100


Messages = list[tuple[float, dict[str, Any]]]


class RecordingClient(NotebookClient):
    """nbclient as is, keeping every iopub message (with its arrival time)."""

    def __init__(self, nb: nbformat.NotebookNode, **kwargs: Any) -> None:
        super().__init__(nb, **kwargs)
        self.messages: Messages = []

    def process_message(self, msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
        self.messages.append((time.monotonic(), msg))
        return super().process_message(msg, cell, cell_index)


def widget_updates(
    messages: list[tuple[float, dict[str, Any]]],
) -> list[tuple[float, str]]:
    """(arrival, value) of every change to an HTML widget's value."""
    updates = []
    for arrived, msg in messages:
        if msg["msg_type"] == "comm_msg":
            state = msg["content"]["data"].get("state", {})
            if "value" in state:
                updates.append((arrived, state["value"]))
    return updates


def test_dask_record_shows_live_progress_then_leaves_a_static_report(
    cluster: LocalCluster, store_path: Path, tmp_path: Path
) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "%load_ext dask_observe\n"
            "from distributed import Client\n"
            f"client = Client({cluster.scheduler_address!r})"
        ),
        # The cell blocks in .compute(): the progress must move meanwhile.
        nbformat.v4.new_code_cell(
            "%%dask_record live\n"
            "import logging, time, dask\n"
            "def warn(i):\n"
            "    logging.getLogger('user').warning('<b>careful</b> with %d', i)\n"
            "@dask.delayed\n"
            "def nap(i):\n"
            "    time.sleep(0.25)\n"
            "    return i\n"
            # First, so that the line has the naps' 3 s to arrive (dask runs
            # the naps in no set order: one of them could be the last).
            "client.submit(warn, 3).result()\n"
            "sum(dask.compute(*[nap(i) for i in range(24)]))"
        ),
    ]
    executor = RecordingClient(
        nb, kernel_name="python3", timeout=120,
        resources={"metadata": {"path": str(tmp_path)}},
    )  # fmt: skip
    executor.execute()

    updates = widget_updates(executor.messages)
    headers = [v for _, v in updates if "tasks/s" in v]
    done = [int(m[1]) for v in headers if (m := re.search(r"(\d+) / \d+ tasks", v))]
    assert len(done) == len(headers)
    assert done == sorted(done) and len({d for d in done if 0 < d < 24}) >= 3
    # At least two updates a second while the tasks ran (~3 s on 2 workers).
    times = [t for t, v in updates if "tasks/s" in v]
    # On failure, when each arrived beside the time it shows: a display that
    # stopped moving (once in the suite: none for 2.28 s after the first, on
    # a loaded host) or updates that reached the test late.
    shown = [
        (
            round(t - times[0], 2),
            m[1] if (m := re.search(r"· ([0-9.]+ m?s) ·", v)) else v,
        )
        for t, v in updates
        if "tasks/s" in v
    ]
    assert len(times) >= 2 * (times[-1] - times[0]), shown
    assert any("nap" in v and "/ 24" in v for _, v in updates)  # the prefix bar
    assert any("processing" in v for _, v in updates)  # the worker memory bars
    # The tasks sleep: their time so far, as heartbeats report it, is waiting.
    waiting = [int(m[1]) for v in headers if (m := re.search(r"waiting (\d+)%", v))]
    assert waiting and waiting[-1] >= 90, headers[-1]
    # A worker's warning arrives while the cell runs, counted, and as text.
    # (Not necessarily first: a worker's GIL monitor may warn too, under
    # load, "timed out waiting on channel", a line of the worker's stderr.)
    alerts = [v for _, v in updates if "warning/error line" in v]
    assert alerts and "1 warning/error line; newest" in alerts[0]
    assert any("&lt;b&gt;careful&lt;/b&gt; with 3" in v for v in alerts), alerts

    # The widget gave its place to the report, kept in the notebook as HTML.
    outputs = nb.cells[1].outputs
    kinds = [o.output_type for o in outputs]
    assert all("application/vnd.jupyter.widget-view+json" not in o.get("data", {})
               for o in outputs)  # fmt: skip
    report = next(
        o.data["text/html"] for o in outputs if "text/html" in o.get("data", {})
    )
    run = dask_observe.open_store().run("last")
    assert f'data-run-id="{run.id}"' in report
    assert re.search(
        rf'data-figure="n_tasks" data-value="{run.summary()["n_tasks"]}"', report
    )
    assert "execute_result" in kinds  # the cell's value, after the report

    # Exported to HTML (scripts or not), the notebook still shows the report.
    body, _ = HTMLExporter().from_notebook_node(nb)
    assert 'class="dobs-report"' in body and 'alt="task stream"' in body


def test_a_saved_notebooks_outputs_hold_no_secret(
    cluster: LocalCluster, store_path: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    """The issue's seven secrets, placed as users place them: dask config from
    the environment (coiled.token, gateway.auth.kwargs.password), a password
    assigned in the recorded cell, four in a task's log line. The cells keep
    what the user typed; nothing dask-observe adds to the notebook (the
    inline report, the summary) holds any of them."""
    from .planted import SECRETS, found_in

    monkeypatch.setenv("DASK_COILED__TOKEN", SECRETS["coiled.token"])
    monkeypatch.setenv(
        "DASK_GATEWAY__AUTH__KWARGS__PASSWORD",
        SECRETS["gateway.auth.kwargs.password"],
    )
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext dask_observe"),
        nbformat.v4.new_code_cell(
            "from distributed import Client\n"
            f"client = Client({cluster.scheduler_address!r})"
        ),
        nbformat.v4.new_code_cell(
            "%%dask_record secrets\n"
            f"DB_PASSWORD = {SECRETS['DB_PASSWORD']!r}\n"
            "from tests.planted import leak\n"
            "client.submit(leak, pure=False).result()\n"
        ),
    ]
    NotebookClient(
        nb, kernel_name="python3", timeout=120,
        resources={"metadata": {"path": str(Path(__file__).parent.parent)}},
    ).execute()  # fmt: skip
    path = tmp_path / "shared.ipynb"
    nbformat.write(nb, path)
    outputs = [nbformat.writes(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(outputs=cell.outputs)
    ])) for cell in nbformat.read(path, as_version=4).cells]  # fmt: skip
    assert "dobs-report" in outputs[2] or "<img" in outputs[2]  # the report is there
    assert [found_in(o) for o in outputs] == [[], [], []]
    run = dask_observe.open_store().run("last")
    assert run.environment()["config"]["coiled.token"] == "[redacted]"


def test_the_live_workers_show_process_memory_in_the_bar_in_a_steady_order() -> None:
    """As the report and the panel: the bar is the process's memory against
    its limit, spilled bytes said apart (they are on disk); the rows keep
    their order from one refresh to the next (they swapped as memory moved)."""
    from dask_observe.notebook.progress import Snapshot, workers_html

    gib = 2**30
    a, b = "tcp://10.0.0.1:40001", "tcp://10.0.0.2:40002"

    def shown(memory_a: float, memory_b: float) -> str:
        return workers_html(Snapshot(workers={
            b: [memory_b, 0.5 * gib, 2 * gib, 4 * gib, 1],
            a: [memory_a, 0.5 * gib, 0.0, 4 * gib, 2],
        }))  # fmt: skip

    html = shown(1 * gib, 0.5 * gib)
    widths = re.findall(r"width:([\d.]+)%", html)
    # a: 1 GiB managed, 0.5 unmanaged of 4; b: 0.5 and 0.5 of 4, 2 GiB spilled.
    assert widths == ["25.0", "12.5", "12.5", "12.5"], widths
    assert "1.00 GiB / 4.00 GiB, 2.00 GiB spilled, 1 processing" in html
    first = [html.index(a), html.index(b)]
    flipped = shown(0.5 * gib, 3 * gib)
    assert [flipped.index(a), flipped.index(b)] == first and first[0] < first[1]


def test_the_live_split_says_the_largest_other_share_as_the_report_names_it() -> None:
    """The header's split of the tasks' time: CPU, waiting, and what else took
    a twentieth or more (a header that read "CPU 0% · waiting 78%" left a
    fifth of the time unsaid)."""
    from dask_observe.notebook.progress import Snapshot, header_html, split_text

    said = split_text({"thread-cpu": 0.1, "thread-noncpu": 7.7, "executor": 1.5,
                       "other": 0.7})  # fmt: skip
    assert said == " · CPU 1% · waiting 77% · executor overhead 15%", said
    # Under a twentieth, as a quiet host's sleeping tasks spend it: not said.
    assert split_text({"thread-noncpu": 9.7, "executor": 0.2, "other": 0.1}) == (
        " · CPU 0% · waiting 97%"
    )
    assert split_text({}) == ""
    # A task's own label (distributed's context_meter) is the user's text.
    header = header_html(Snapshot(activities={"<b>load</b>\x1b[2J": 1.0}), "x")
    assert "· &lt;b&gt;load&lt;/b&gt;" in header and "<b>load" not in header
    assert "\x1b" not in header, header

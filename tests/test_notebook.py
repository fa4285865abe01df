"""A real notebook, executed by nbclient in a real kernel, as a user would run it."""

from __future__ import annotations

from pathlib import Path

import nbformat
from distributed import LocalCluster
from nbclient import NotebookClient

import dask_observe


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

"""A run as Parquet files, one a table, for pandas, DuckDB, Polars or Spark:
``tasks``, ``logs``, ``metrics``, ``events``, ``flags``, ``fine_metrics``,
``transfers`` and ``run`` (one row: the summary, environment and settings as
JSON). Times are UTC timestamps, as the Python API gives them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dask_observe.diagnose import flags_frame
from dask_observe.export.safefiles import directory_to_write, open_to_write

if TYPE_CHECKING:
    import pandas as pd

    from dask_observe.diagnose import Flag
    from dask_observe.store import RunData

TABLES = (
    "run", "tasks", "logs", "metrics", "events", "flags", "fine_metrics", "transfers",
)  # fmt: skip


def _json_column(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """Free-form values (event data, flag evidence) as JSON text: one column
    type whatever each row holds, and every reader can parse it."""
    frame[column] = [json.dumps(v, default=str) for v in frame[column]]
    return frame


def _run_row(run: RunData) -> pd.DataFrame:
    import pandas as pd

    summary = run.summary()
    row: dict[str, Any] = {
        k: v for k, v in summary.items() if not isinstance(v, dict | list)
    }
    row["environment"] = json.dumps(run.environment(), default=str)
    row["settings"] = json.dumps(run.settings(), default=str)
    frame = pd.DataFrame([row])
    for column in ("started", "ended"):
        if column in frame:
            frame[column] = pd.to_datetime(frame[column], unit="s", utc=True)
    return frame


def tables(run: RunData, flags: list[Flag]) -> dict[str, pd.DataFrame]:
    """The run's tables, by name (see :data:`TABLES`)."""
    return {
        "run": _run_row(run),
        "tasks": run.tasks(),
        "logs": run.logs(),
        "metrics": run.metrics(),
        "events": _json_column(run.events(), "data"),
        "flags": _json_column(flags_frame(flags), "evidence"),
        "fine_metrics": run.fine_metrics(),
        "transfers": run.transfers(),
    }


def write_parquet(
    run: RunData,
    flags: list[Flag],
    directory: str | os.PathLike[str],
    *,
    overwrite: bool = True,
) -> dict[str, Path]:
    """Write each table to ``directory/<table>.parquet`` (the directory is
    created); return the paths by table. Never through a symbolic link; over
    existing files only with ``overwrite``."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ImportError(
            "writing Parquet needs pyarrow: pip install pyarrow"
        ) from None
    target = directory_to_write(Path(directory).expanduser())
    written = {}
    for name, frame in tables(run, flags).items():
        path = written[name] = target / f"{name}.parquet"
        with open_to_write(path, overwrite=overwrite, binary=True) as f:
            frame.to_parquet(f, index=False)
    return written

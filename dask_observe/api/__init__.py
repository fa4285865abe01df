"""The public ``Run`` and ``Store``: a run's recorded data, as the store reads
it, with what is made of it (its flags and its report).

The store only stores; diagnosis and reports read from it. This layer puts them
together for users, the notebook, the CLI and the server, so that nothing in
the store imports what sits above it. :mod:`.archive` reads a team's archive
as such a store.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dask_observe import config, store
from dask_observe.analysis.figures import stalls_apart
from dask_observe.analysis.history import frame_of, history_records
from dask_observe.analysis.native import NATIVE_COLUMNS, graft, native_rows, stored
from dask_observe.analysis.trees import profile_table
from dask_observe.api.ends import PendingEnd, pending_end, wait_ends
from dask_observe.archive import ArchiveError, configured_location, publish
from dask_observe.archive.location import NO_ARCHIVE
from dask_observe.diagnose import flag_list, flags_frame, judged_flags, workers_lost
from dask_observe.export import write_chrome_trace, write_parquet
from dask_observe.export.otlp_run import export_run
from dask_observe.units import parse_seconds

if TYPE_CHECKING:
    import pandas as pd

    from dask_observe.diagnose import Flag
    from dask_observe.export.otlp import Sent
    from dask_observe.report import Report


class Run(store.RunData):
    """One recorded run: a cell, a ``record()`` block, or a headless recording.

    Obtain it with ``store.run(id)`` or ``store.run("last")``. Tasks belong to a run
    by its span; logs, metrics and events by the run's cluster and time window.
    """

    _flags: list[Flag] | None = None
    #: The end of this run this process still writes (None: none).
    _end: PendingEnd | None = None
    #: The run's id in the archive it was read from, and that archive's URL
    #: (None: a run of a local store).
    archive_uid: str | None = None
    archive_url: str | None = None

    def __init__(self, source: store.BaseStore, record: dict[str, Any]) -> None:
        super().__init__(source, record)
        self._end = pending_end(source, self.id)

    def _settle(self) -> None:
        """Wait for the end of this run still being written here, if any, then
        read the run again (its settings, environment, flag count) and take its
        flags. What a run's end writes after its block returned (its status
        and window, its fine metrics and profile) is read through this hook
        (``RunData._settle``): those readers wait for it."""
        end = self._end
        if end is None or not end.wait():
            return
        self._end = None
        super().refresh()
        if end.flags is not None:
            self._flags = end.flags

    def profile_trees(self, native: bool = True) -> dict[str, Any]:
        """distributed's profile of the run as trees, by prefix ("" for the
        whole run): ``interval`` (seconds a sample) and ``root``, whose nodes
        have name, filename, line, count (samples) and children. A run
        recorded with ``native=True`` has the compiled frames py-spy saw
        beneath Python's grafted in (nodes with ``native`` True; see
        :meth:`native`), unless ``native`` is False: Python's frames alone,
        as every run has them (comparisons read those)."""
        trees = super().profile_trees()
        native_profile = self.native_profile() if native else None
        if not native_profile:
            return trees
        found = native_profile.get("prefixes") or {}
        return {p: graft(tree, found.get(p) or {}) for p, tree in trees.items()}

    def native_profile(self) -> dict[str, Any] | None:
        """What py-spy recorded of a run recorded with ``native=True``, as
        stored: ``rate`` (samples a second), ``prefixes`` (by task prefix,
        "" for all: ``sampled_s``, ``compiled_s``, ``libraries`` and the
        heaviest ``paths``), ``unavailable`` (why not, by reason: the
        workers); None for a run recorded without."""
        return stored(self)

    def native(self) -> pd.DataFrame:
        """How much of each task prefix's time ("" for the whole run) was in
        compiled code, from a run recorded with ``native=True``: prefix,
        sampled_s (task time py-spy sampled), compiled_s (working in compiled
        code: its stacks ending in a compiled frame that does not wait),
        compiled_share (of sampled_s), waiting_s (waiting in compiled code:
        for a lock, the GIL, a sleep, I/O), libraries (where it worked, by
        the innermost frame's library: "numpy 61%, libc 12%"). Empty
        without one."""
        import pandas as pd

        rows = native_rows(self.native_profile())
        return pd.DataFrame(rows, columns=list(NATIVE_COLUMNS))

    def summary(self) -> dict[str, Any]:
        summary = super().summary()
        if self.archive_uid is not None:  # named as its archive names it
            summary.update(id=self.archive_uid, archive=self.archive_url)
        return summary

    summary.__doc__ = store.RunData.summary.__doc__

    @classmethod
    def of(cls, source: store.BaseStore, run: int | str = "last") -> Run:
        """The run of that id (or ``"last"``) in any store."""
        return cls(source, source.run_record(run))

    def refresh(self) -> Run:
        """Re-read this run from the store (its status may have changed)."""
        self._settle()
        was = self.status
        super().refresh()
        if was == "running" or self.status != was:
            self._flags = None
        return self

    def tasks(self, *, epoch: bool = False) -> pd.DataFrame:
        """Every task that ran in the run, finished or failed, in the order it ended.

        Columns: key, prefix, worker, start, stop, duration_s, status, nbytes,
        thread, and seconds spent in compute (``compute_s``), transfer
        (``transfer_s``), reading and writing spilled data on disk
        (``disk_read_s``, ``disk_write_s``), deserialisation (``deserialize_s``)
        and ``stall_s``: what distributed times as disk read/write although
        no byte of that task prefix went to disk (waiting to store a result or
        to read an argument held in memory), so that "disk" is only disk;
        exception and traceback for failed tasks; ``ended``, when the
        scheduler learnt that the task ended.
        """
        tasks = super().tasks(epoch=epoch)
        stalls_apart(self, tasks)
        return tasks

    def profile(self) -> pd.DataFrame:
        """Where the run's task threads spent their time, by function, from
        distributed's statistical profile of the run's time window (read when
        it ends; a run with under half a second of compute has none): prefix
        ("" for the whole run), function, filename, lineno (the line the
        function starts on), self_s, total_s, native (a compiled function:
        a run recorded with ``native=True`` has them, beneath the Python
        functions that called them)."""
        return profile_table(self.profile_trees())

    def flag_list(self) -> list[Flag]:
        """The flags the run raises, in time order. A finished run is judged
        once, when it ends, and those flags are stored: its report, its
        listing and ``flags()`` share it, in every process."""
        self._settle()
        if self._flags is not None:
            return self._flags
        if self.status == "running":
            return flag_list(self)
        self._flags = judged_flags(self)
        return self._flags

    def keep_judged_flags(self, flags: list[Flag]) -> None:
        """Store the flags the run raised, judged at its end."""
        self.store.kept.set_judgement(
            self.id,
            [asdict(f) for f in flags],
            config.version(),
            lost=workers_lost(flags),
        )

    def flags(self) -> pd.DataFrame:
        """What went wrong and why: time, kind, severity, worker, message,
        evidence (a list of {time, worker, text}), advice. Judged from what is
        recorded so far, so a running run has the flags raised up to now."""
        return flags_frame(self.flag_list())

    def report(self) -> Report:
        """The run's report: ``.html``, ``.save(path)``, shown inline in Jupyter."""
        from dask_observe.report import Report

        return Report.of(self, self.flag_list())

    def to_parquet(
        self, directory: str | os.PathLike[str], *, overwrite: bool = True
    ) -> dict[str, Path]:
        """Write the run as Parquet files in ``directory`` (created): run,
        tasks, logs, metrics, events, flags, fine_metrics, transfers (one
        file each, ``<table>.parquet``), for pandas or DuckDB. Returns the
        paths by table. Never through a symbolic link; over existing files
        only with ``overwrite``."""
        flags = self.flag_list()
        return write_parquet(self, flags, directory, overwrite=overwrite)

    def publish(self, url: str | None = None) -> str:
        """Publish this run (ended) to the archive at ``url`` (default
        ``observe.archive``) for the team to read from any machine; its id
        there. Publishing it again writes the same folder."""
        location = configured_location(url)
        if location is None:
            raise ArchiveError(NO_ARCHIVE)
        done = publish(self.store, [self.id], location)
        if self.id in done.failed:
            raise ArchiveError(
                f"cannot publish run {self.id} to {location.url}: "
                f"{done.failed[self.id]}"
            )
        return done.uids[self.id]

    def to_chrome_trace(
        self, path: str | os.PathLike[str], *, overwrite: bool = True
    ) -> Path:
        """Write the run as a Chrome trace (JSON) that Perfetto and
        chrome://tracing open: a track per worker thread, a slice per task.
        Never through a symbolic link; over an existing file only with
        ``overwrite``."""
        flags = self.flag_list()
        return write_chrome_trace(self, flags, path, overwrite=overwrite)

    def to_otlp(
        self, endpoint: str | None = None, *, headers: dict[str, str] | None = None
    ) -> Sent:
        """Send the run to an OpenTelemetry collector over OTLP/HTTP (e.g.
        ``http://localhost:4318``; None: ``OTEL_EXPORTER_OTLP_ENDPOINT``):
        log records, metric gauges and a trace with a span per task. Returns
        what was sent and what the collector did not take."""
        return export_run(
            self,
            self.flag_list(),
            endpoint,
            headers=headers or config.get("export.otlp.headers") or None,
            timeout=parse_seconds(config.get("export.otlp.timeout") or 10),
            max_task_spans=int(config.get("export.otlp.max-task-spans") or 20_000),
        )


class Store(store.BaseStore):
    """The store, whose runs are :class:`Run` s (see ``dask_observe.open_store``)."""

    def run(self, run: int | str = "last") -> Run:
        """The run with this id, or the newest one for ``"last"``."""
        return Run.of(self, run)

    def run_records(
        self, limit: int | None = None, *, brief: bool = False
    ) -> list[dict[str, Any]]:
        # A listing shows every run's flag count: wait for those being written.
        wait_ends(self)
        return super().run_records(limit, brief=brief)

    run_records.__doc__ = store.BaseStore.run_records.__doc__

    def history(self, name: str, last: int | None = None) -> pd.DataFrame:
        """The runs of that name, oldest first (``last``: the newest that
        many): id, started, status, duration_s, n_tasks, n_failed, n_flags,
        verdict (the wall time's against the runs before), changed (what
        differs from the previous run's environment), peak_memory (bytes)."""
        return frame_of(self.history_records(name, last=last))

    def history_records(
        self, name: str, last: int | None = None
    ) -> list[dict[str, Any]]:
        """:meth:`history` as dicts (``started`` in seconds since the epoch,
        an unknown peak None): what the command line prints."""
        return history_records(self, name, last=last)


def open_store(
    path: str | os.PathLike[str] | None = None, *, create: bool = True
) -> Store:
    """Open the store at ``path``, creating it if needed (with ``create=False``,
    a missing store raises ``StoreMissing``).

    The default path comes from dask config ``observe.store``
    (``DASK_OBSERVE__STORE``), else ``~/.local/share/dask-observe/observe.sqlite``.
    """
    return Store(config.default_store_path() if path is None else path, create=create)

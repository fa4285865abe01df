"""What a run's end does after its block returned, by a thread of its own:
the *finisher* (:class:`Finisher`). Its stages and who waits for each are
``api.ends``'s (``PendingEnd``). As the block ends, the config the end needs
is taken (:class:`EndSnapshot`: the block's own ``dask.config.set`` ends with
it); then the finisher stores the run's settings and environment (the one it
started in, ``environment.StartedIn``, completed with what its end saw),
judges its flags once, keeps its history figures, ends the live export,
applies retention and publishes to the team's archive. A client's close waits
for the ends' records (:func:`hold_client_close`)."""

from __future__ import annotations

import asyncio
import collections
import copy
import importlib
import json
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dask_observe import config
from dask_observe.analysis.figures import clock_offsets, peak_memory
from dask_observe.analysis.history import per_task
from dask_observe.api import Run, Store
from dask_observe.api.ends import PendingEnd, Stage, wait_stored
from dask_observe.archive.location import configured as configured_archive
from dask_observe.archive.publish import hold_exit_for, publish_at_end
from dask_observe.diagnose import flag_list
from dask_observe.recording import environment
from dask_observe.recording.environment import (
    StartedIn,
    client_environment,
    cluster_environment,
)
from dask_observe.store import RunData
from dask_observe.store.retention import Policy

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd
    from distributed import Client

    from dask_observe.diagnose import Flag
    from dask_observe.export.live import LiveExport
    from dask_observe.redact import Redactor

logger = logging.getLogger("dask_observe.recording.lifecycle")

#: What a run's end imports to judge it (pandas, the rules, the report's
#: task figures, what its name's history reads of it: ~0.4 s the first
#: time). Its thread imports them before the run's records count as closed,
#: which the run's client's close waits for: a scheduler or nanny of this
#: process takes its folder off ``sys.path`` as it closes (distributed's
#: ``Server.close``), and an import walking ``sys.path`` in another thread at
#: that moment skips an entry. pandas, first imported by a script's run end
#: as its cluster closed, failed so ("No module named 'six'") and stayed
#: broken for the process.
END_IMPORTS = (
    "pandas", "dask_observe.diagnose", "dask_observe.report.tasks",
    "dask_observe.analysis.history",
)  # fmt: skip


def import_for_end() -> None:
    """Import :data:`END_IMPORTS` (at once where imported already)."""
    for name in END_IMPORTS:
        importlib.import_module(name)


@dataclass
class EndSnapshot:
    """What a run's end takes from the config as its block ends: the block's
    own ``dask.config.set`` ends as soon as it returns, and the end is
    written after that."""

    #: dask config values that differ from dask's defaults.
    config: dict[str, Any]
    #: ``observe.flags`` (a copy: dask.config.set restores the config's own
    #: dicts in place when its block ends).
    flags: dict[str, Any]
    #: This process's memory thresholds (``plugins.memory_thresholds``).
    memory: dict[str, float | bool]
    retention: Policy | None
    #: ``observe.archive`` and its options (None: no publishing).
    archive: tuple[str | None, dict[str, Any]]

    @classmethod
    def read(cls) -> EndSnapshot:
        from dask_observe.recording import plugins

        try:
            retention: Policy | None = Policy.from_config()
        except Exception as e:  # the run is recorded; pruning waits for the next
            logger.warning("dask-observe: cannot prune the store: %s", e)
            retention = None
        return cls(
            config=environment.config_changes(),
            flags=copy.deepcopy(config.get("flags") or {}),
            memory=plugins.memory_thresholds(),
            retention=retention,
            archive=configured_archive(),
        )


def run_settings(
    thresholds: dict[str, dict[str, float | bool]], closing: EndSnapshot
) -> dict[str, Any]:
    """The settings a run is judged under (``Run.settings``): the memory
    thresholds its workers reported (``thresholds``, by worker; the most common
    as ``memory``, all of them where they differ), else this process's dask
    config; and this process's ``observe.flags`` (both as its block ended)."""
    settings: dict[str, Any] = {"flags": closing.flags}
    if not thresholds:
        return {**settings, "memory": closing.memory, "source": "client"}
    kinds = collections.Counter(
        json.dumps(t, sort_keys=True) for t in thresholds.values()
    )
    settings["memory"] = json.loads(kinds.most_common(1)[0][0])
    if len(kinds) > 1:
        settings["memory_by_worker"] = thresholds
    return {**settings, "source": "workers"}


@dataclass
class Finisher:
    """What is made of a run once its block returned, by a thread of its own
    (``Recording.stop`` starts it with the config as the block ended):
    readers in this process wait for it (``api.ends.PendingEnd``), not the
    block."""

    store_path: str
    run_id: int
    status: str
    ended: float
    #: Redaction as configured when the run started.
    redact: Redactor
    #: What the scheduler's capture said (its environment: see
    #: ``cluster_environment``).
    hello: dict[str, Any] | None
    started_in: StartedIn | None
    #: Where the run came from (None: the script that runs, if any).
    code: dict[str, Any] | None
    export: LiveExport | None
    #: What each worker reported at the end (its versions, memory thresholds).
    workers: dict[str, dict[str, Any]]
    settings: dict[str, Any]
    #: The config as the run's block ended.
    closing: EndSnapshot

    def write(self, end: PendingEnd) -> None:
        """The settings and environment, the judged flags, the export's end and
        retention; then, once readers stopped waiting, the publishing."""
        store: Store | None = None
        try:
            # A connection of its own: whoever opened the run's store may
            # close it as soon as the block returned (a cell does).
            store = Store(self.store_path)
            try:
                ran_in = self.environment()
                # How far each worker's times were moved onto the scheduler's
                # clock, as its last lines said (they are stored by now).
                clocks = clock_offsets(store.run(self.run_id))
                if clocks:
                    ran_in["clocks"] = clocks
                ran_in = self.redact.data(ran_in)
                store.set_settings(self.run_id, self.settings, ran_in)
            except Exception as e:  # readers then judge with the defaults
                logger.warning("dask-observe: cannot record the run's settings: %s", e)
            run = Run.of(store, self.run_id)
            flags, pace = judge(run)
            end.flags = flags
            # Readers of the run go on; what only a history, the export and
            # the store's size need follows, once a cell that shows the
            # report showed it: a one-task cell's report waited ~8 ms more
            # for these (its history figures 7 ms, on the kernel's GIL).
            end.reach(Stage.JUDGED)
            end.wait_shown(SHOWN_WAIT_S)
            if pace is not None:
                keep_history_figures(run, pace)
            if self.export is not None:  # the run's trace ends, with its flags
                self.export.end_run(self.run_id, self.ended, self.status, flags)
            retention = self.closing.retention
            if retention is not None and not retention.empty:
                _retain(store, self.run_id, retention)
        except Exception as e:  # the run's data is stored; only this is lost
            logger.warning("dask-observe: cannot write the run's end: %s", e)
        finally:
            if store is not None:
                store.close()
            end.reach(Stage.DONE)
        url, options = self.closing.archive
        if url:
            try:
                publish_at_end(self.store_path, self.run_id, str(url), options)
            except Exception as e:  # the run is recorded; publishing retries
                logger.warning(
                    "dask-observe: cannot publish run %s: %s", self.run_id, e
                )

    def environment(self) -> dict[str, Any]:
        """The environment the run started in (as stored then), completed
        with what its end saw: workers that joined (their versions), config
        keys set meanwhile. Its shape stays the start's, unless no worker had
        joined yet (an adaptive cluster scaling up)."""
        started = self.started_in
        if started is not None and started.thread is not None:
            started.ended.set()
            started.thread.join(environment.START_WAIT_S)
        before = started.workers if started is not None else {}
        code = started.code if started is not None else None
        if code is None:
            code = self.code if self.code is not None else environment.script_code()
        return environment.assemble(
            client_environment(),
            cluster_environment(self.hello),
            {**self.workers, **before},
            {**self.closing.config, **(started.config if started is not None else {})},
            code,
            shape=before or self.workers,
        )


#: How long the end of a run whose report a cell shows waits for that cell
#: to show it, before its last writes (``PendingEnd.report_follows``).
SHOWN_WAIT_S = 5.0

#: How long a client's close waits for the ends of its runs (their last
#: round trip and write: milliseconds, unless the scheduler stopped answering).
CLOSE_WAIT_S = 30.0


class _WaitForEnds:
    """A client "preload" that only waits, as the client closes (it tears its
    preloads down first thing), until the runs recorded through it whose end
    is still being written here have their last records: those come through
    the client. Its own runs only: another client's run, its end held by a
    scheduler that stopped answering, held each close in the process for
    ``CLOSE_WAIT_S`` (a test's end left unfinished cost 30 s at each of two
    later tests' closes)."""

    name = "dask-observe: runs' ends"

    def __init__(self) -> None:
        self.ends: list[PendingEnd] = []

    def hold(self, end: PendingEnd) -> None:
        """Wait for ``end`` too (those stored already are let go: a client
        that records thousands of runs keeps none of them)."""
        self.ends = [e for e in self.ends if e.stage < Stage.RECORDS_STORED]
        self.ends.append(end)

    async def start(self) -> None:
        """Nothing: it is added to a client already started."""

    async def teardown(self) -> None:
        # Off the client's event loop: the ends' round trips run on it.
        await asyncio.to_thread(wait_stored, list(self.ends), CLOSE_WAIT_S)


def hold_client_close(client: Client, end: PendingEnd) -> bool:
    """Have ``client``'s close wait for ``end``, the end of a run recorded
    through it (:class:`_WaitForEnds` among its preloads), so that a script
    that closes its client right after a block loses nothing; False where the
    client has no such list (a run then ends within its block)."""
    preloads = getattr(getattr(client, "preloads", None), "_preloads", None)
    if not isinstance(preloads, list):
        return False
    waiter = next((p for p in preloads if isinstance(p, _WaitForEnds)), None)
    if waiter is None:
        waiter = _WaitForEnds()
        preloads.append(waiter)
    waiter.hold(end)
    return True


def start_finisher(
    end: PendingEnd, closing: EndSnapshot, target: Callable[..., None], *args: Any
) -> None:
    """Start the run's end thread: not a daemon, so that a script that ends
    with its block still writes it (and publishes it, with an archive)."""
    end.thread = threading.Thread(target=target, args=args, name="dask-observe-run-end")
    end.thread.start()
    if closing.archive[0]:
        hold_exit_for(end.thread)


def stored_tasks(store: Store, run_id: int) -> pd.DataFrame:
    """The run's tasks as stored so far: read as its end is being written (as
    ``RunData``: a ``Run`` would wait for that end)."""
    return RunData(store, store.run_record(run_id)).tasks()


def stored_counts(store: Store, run_id: int) -> dict[str, int]:
    """The run's tasks as stored, by ``memory`` / ``erred``."""
    statuses = stored_tasks(store, run_id)["status"]
    return {
        "memory": int((statuses == "memory").sum()),
        "erred": int((statuses == "erred").sum()),
    }


def not_whole(store: Store, run_id: int, error: str, counts: dict[str, int]) -> str:
    """Why a run whose last records the store refused is not whole, with
    what it holds of it. A pull that failed earlier is no loss: what it
    missed stayed in the scheduler's buffer for the next one (and what
    overflowed that is counted in a ``dropped`` event)."""
    counted = sum(n for state, n in counts.items() if state != "running")
    try:
        stored: int | None = len(stored_tasks(store, run_id))
    except Exception:  # the store may not even read
        stored = None
    held = (
        f"{stored:,} of {counted:,} tasks stored"
        if stored is not None
        else f"{counted:,} tasks ran"
    )
    return (
        f"the store could not take the run's last records ({error}): {held}; "
        "lines, metrics and events of its end may be missing"
    )


def judge(run: Run) -> tuple[list[Flag], dict[str, float] | None]:
    """At a run's end: its flags and what its report shows of its tasks,
    stored for its readers, and each prefix's pace (what its name's history
    reads of its tasks; None where they could not be read), all from one
    read of its task rows."""
    from dask_observe.report import tasks as task_figures

    flags: list[Flag] = []
    try:
        rows = run.tasks(epoch=True)
    except Exception as e:  # the rules read what they can
        logger.warning("dask-observe: cannot read the run's tasks: %s", e)
        rows = None
    if rows is not None:
        try:  # first: the rules may add to the rows they read
            task_figures.keep(run, rows)
        except Exception as e:  # its report computes them again
            logger.warning("dask-observe: cannot keep the run's figures: %s", e)
    pace = None
    if rows is not None:
        try:  # before the rules, which may add to the rows they read
            pace = per_task(run, rows)
        except Exception as e:  # its history works it out when it reads it
            logger.warning("dask-observe: cannot read the run's pace: %s", e)
    try:
        flags = flag_list(run, rows)
        run.keep_judged_flags(flags)
    except Exception as e:  # a rule's bug must not lose the run
        logger.warning("dask-observe: cannot judge the run's flags: %s", e)
    return flags, pace


def keep_history_figures(run: Run, pace: dict[str, float]) -> None:
    """Keep what the run's name's history reads of it (its pace, from the
    judgement's read of its tasks, and its peak memory, read here) in its row:
    a history, the panel's read-only one too, then reads no table of it. A
    history works them out where this failed."""
    try:
        peak = peak_memory(run, kept=False)
        run.store.kept.set_history_figures([(run.id, pace, peak)])
    except Exception as e:
        logger.warning("dask-observe: cannot keep the run's history figures: %s", e)


def _retain(store: Store, run_id: int, policy: Policy) -> None:
    """Prune the store as ``observe.retention`` said (never this run)."""
    try:
        store.prune(policy, keep=[run_id], compact=False)
    except Exception as e:  # the run is recorded; pruning waits for the next
        logger.warning("dask-observe: cannot prune the store: %s", e)

"""The recorder: pulls the cluster's telemetry and writes it to the store.

It runs in its own thread beside the Dask client, so recording goes on while the
kernel's main thread blocks in ``.compute()``. Each batch and the cursor that follows
it are committed in one transaction, so a recorder that dies and starts again resumes
exactly where the store ends: no gap while the scheduler still holds the records,
and no duplicate.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
import warnings
from enum import Enum
from typing import TYPE_CHECKING, Any, NamedTuple

from dask_observe import redact
from dask_observe.capture.clock import CLOCK_HANDLER, offset_within, reads_same_clock
from dask_observe.config import get
from dask_observe.export.live import live_from_config
from dask_observe.recording import link
from dask_observe.recording.copying import Copied, Copier
from dask_observe.recording.describe import Workers
from dask_observe.recording.install import (
    CaptureUnavailable,
    CaptureUnavailableWarning,
    SchedulerSilent,
    dashboard_address,
    install_capture,
)
from dask_observe.recording.liveness import Liveness, this_process
from dask_observe.store import BaseStore
from dask_observe.units import parse_seconds

if TYPE_CHECKING:
    from distributed import Client

    from dask_observe.export.live import LiveExport

logger = logging.getLogger(__name__)

_registry_lock = threading.Lock()
_recorders: dict[tuple[str, str], Recorder] = {}


#: Readings of the scheduler's clock a recorder takes where it reads another
#: clock: the narrowest decides (``clock.offset_within``); a few round trips
#: once per recorder, none beside its scheduler.
CLOCK_READINGS = 3


def clock_offset(client: Client, hello: dict[str, Any]) -> float:
    """Seconds to add to this process's times to put them on the scheduler's
    clock: 0 where the hello found one clock, else measured by bare readings
    of it (``CLOCK_READINGS``) with the hello's own."""
    said = hello["asked_at"], hello.get("clock"), hello["answered_at"]
    if reads_same_clock(*said):
        return 0.0
    readings = [said]

    async def read() -> None:
        for _ in range(CLOCK_READINGS):
            asked = time.time()
            theirs = await getattr(client.scheduler, CLOCK_HANDLER)()
            readings.append((asked, theirs, time.time()))

    try:
        client.sync(read, callback_timeout=link.answer_timeout())
    except Exception as e:  # the hello's reading stands
        logger.debug("dask-observe: cannot read the scheduler's clock: %s", e)
    return offset_within(readings)


def _live_export(cluster: str) -> LiveExport | None:
    """The live OpenTelemetry export of a cluster, if configured; a missing SDK
    or a bad setting is a warning, never a failed recording."""
    try:
        return live_from_config(cluster)
    except (ImportError, ValueError, TypeError) as e:
        logger.warning("dask-observe: no OpenTelemetry export: %s", e)
        return None


def _export_settings() -> Any:
    """``observe.export.otlp`` as configured now (a copy: dask.config.set
    changes the config's dicts in place)."""
    return copy.deepcopy(get("export.otlp"))


class SchedulerState(Enum):
    """What a recorder knows of its scheduler, as its pulls and its runs' ends
    find it. Only ANSWERS and UNANSWERED go back and forth; the scheduler's
    close moves on to the right and stays. Moved by the recorder's thread and
    by runs' ends, under one lock (``Recorder.answered`` and the two below).
    """

    #: The last call got through.
    ANSWERS = "answers"
    #: The last call failed to connect or timed out (it may be gone, or its
    #: loop blocked): nothing is asked of it in passing; a call that gets
    #: through again undoes it.
    UNANSWERED = "unanswered"
    #: It is closing, and a pull stored its last records (it waits, bounded,
    #: for them to be read). Runs' ends still reach it meanwhile.
    LAST_READ = "last-read"
    #: It closed: it answered a run's end as closing, or stopped answering
    #: once its last records were read. Nothing more is asked of it (each call
    #: would wait out distributed's connect timeout).
    CLOSED = "closed"


class Partial(NamedTuple):
    """Why the capture plugins do not run on a cluster: its runs keep what
    distributed itself holds (``dask_observe.recording.fallback``)."""

    reason: str
    #: Because the scheduler did not answer as the recorder started
    #: (``SchedulerSilent``): nothing more is asked of it before the run's
    #: end, each question would wait as long.
    silent: bool


class Recorder:
    """Copies one cluster's telemetry into one store while anyone needs it:
    when to copy, who uses it, and what its scheduler's answers say (the
    copying itself: its :class:`~dask_observe.recording.copying.Copier`)."""

    def __init__(
        self,
        client: Client,
        store: BaseStore,
        interval_s: float = 0.2,
        flush_interval_s: float = 0.1,
        linger_s: float = 0.0,
        owns_store: bool = False,
    ) -> None:
        scheduler = client.scheduler
        assert scheduler is not None
        self.client = client
        self.store = store
        self.cluster = str(scheduler.address)
        self.interval_s = interval_s
        self.linger_s = linger_s
        #: Whether the store is this recorder's own, to close when it stops.
        self.owns_store = owns_store
        #: Whether the cluster is watched and its scheduler answers, told to
        #: the store for the panel (by this thread and a watchdog's).
        self.liveness = Liveness(self.store, self.cluster)
        self.copier = Copier(
            client, store, self.cluster, flush_interval_s, self.liveness
        )
        self.state = SchedulerState.ANSWERS
        self._state_lock = threading.Lock()
        #: Why the capture plugins do not run on the cluster, or None when
        #: they do. Then there is nothing to pull, and runs are marked partial.
        self.partial: Partial | None = None
        #: Since when no run has needed this recorder (monotonic clock), or None
        #: while one does. It then pulls nothing; after ``linger_s`` it stops.
        self._idle_since: float | None = None
        self._users = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Set once there is nothing more to pull: the scheduler closed (its
        #: last records read) or the client did. A headless recording
        #: (``dask-observe record``) ends with it rather than wait for Ctrl-C.
        self.gone = threading.Event()
        #: Seconds to add to this process's clock to read the scheduler's:
        #: its runs start and end on the clock their records are on (a
        #: client 7 s ahead read none of its run's lines). Measured by the
        #: scheduler's hello; 0 where it cannot say.
        self.clock_offset = 0.0
        #: What the cluster's workers say of themselves.
        self.workers = Workers(client, self.cluster)
        #: The ``observe.export.otlp`` settings its export was made with.
        self.export_settings: Any = None
        #: Whether the store was told that the cluster closed (once).
        self._closed_said = False

    @property
    def hello(self) -> dict[str, Any] | None:
        """What the scheduler plugin said of itself, and of the scheduler's
        process (``environment``); None for a cluster without plugins."""
        return self.copier.hello

    # -- what the scheduler's answers say ----------------------------------------
    def answered(self, copied: Copied | None = None) -> None:
        """A call got through (a pull that says whether it is closing)."""
        with self._state_lock:
            if copied is not None and copied.closing:
                if self.state is not SchedulerState.CLOSED:
                    self.state = SchedulerState.LAST_READ
            elif self.state is SchedulerState.UNANSWERED:
                self.state = SchedulerState.ANSWERS
        self._state_lock = threading.Lock()

    def unanswered(self) -> None:
        """A call failed to connect or timed out."""
        with self._state_lock:
            if self.state is SchedulerState.ANSWERS:
                self.state = SchedulerState.UNANSWERED
            elif self.state is SchedulerState.LAST_READ:  # done closing
                self.state = SchedulerState.CLOSED

    def closed_at_end(self) -> None:
        """It answered a run's end as closing: closed as soon as that answer
        left."""
        with self._state_lock:
            self.state = SchedulerState.CLOSED

    @property
    def last_read(self) -> bool:
        """Whether the scheduler closed with its last records stored."""
        return self.state in (SchedulerState.LAST_READ, SchedulerState.CLOSED)

    def reachable(self, *, closing: bool = False) -> bool:
        """Whether the scheduler answered the last call and the client is still
        connected: a scheduler that died is not asked again (each call to it
        would wait out distributed's connect timeout). With ``closing``, a
        client closing counts too: a run's end, which its close waits for
        (``finish.hold_client_close``), still reaches the scheduler through it."""
        statuses = ("running", "closing") if closing else ("running",)
        return self.client.status in statuses and self.state in (
            SchedulerState.ANSWERS,
            SchedulerState.LAST_READ,
        )

    def answers(self) -> bool:
        """Whether the scheduler itself answers (its ``identity``) within
        ``observe.recorder.answer-timeout``: a call that involves its workers
        may wait on one of them instead."""
        if self.copier.answers():
            self.answered()
            return True
        self.unanswered()
        return False

    # -- copying -----------------------------------------------------------------
    def call(self, op: str, **kwargs: Any) -> Any:
        """Call one of the capture plugin's handlers on the scheduler."""
        return self.copier.call(op, **kwargs)

    def pull(
        self,
        pulled: dict[str, Any] | None = None,
        redactor: redact.Redactor | None = None,
    ) -> int:
        """Copy what the scheduler holds beyond the store's cursor (see
        :meth:`.Copier.pull`); the number of records stored. Nothing for a
        partial recording."""
        if self.partial is not None:
            return 0
        copied = self.copier.pull(pulled, redactor)
        self.answered(copied)
        return copied.written

    def end_run(self, span_id: str, *, stopped: bool) -> dict[str, Any]:
        """The scheduler's end of a run's span (see :meth:`.Copier.end_run`)."""
        return self.copier.end_run(span_id, stopped=stopped)

    def settle(self, redactor: redact.Redactor | None = None) -> None:
        """After a worker left, its nanny's last word (:meth:`.Copier.settle`)."""
        copied = self.copier.settle(redactor)
        if copied is not None:
            self.answered(copied)

    # -- shared use --------------------------------------------------------------
    @classmethod
    def acquire(
        cls, client: Client, store: BaseStore, redactor: redact.Redactor | None = None
    ) -> Recorder:
        """The running recorder of this cluster and store, started if need be,
        redacting as ``redactor`` says until :meth:`release` with it.

        A recorder that lingers after its last run (``recorder.linger``) is
        taken up again by its own client: the cluster is not asked again for
        its capture, so a run after the first starts in a millisecond.
        """
        scheduler = client.scheduler
        assert scheduler is not None
        key = (str(scheduler.address), str(store.path))
        with _registry_lock:
            recorder = _recorders.get(key)
            if recorder is not None and not recorder._reusable(client):
                _recorders.pop(key)
                recorder._retire()
                recorder = None
            if recorder is None:
                # A connection of its own: it may linger after the store of
                # the run that started it was closed (a cell's, say).
                recorder = _recorders[key] = cls(
                    client,
                    BaseStore(store.path),
                    interval_s=parse_seconds(get("recorder.pull-interval")),
                    flush_interval_s=parse_seconds(get("capture.flush-interval")),
                    linger_s=parse_seconds(get("recorder.linger") or 0),
                    owns_store=True,
                )
                if redactor is not None:
                    recorder.copier.redactors.append(redactor)
                recorder.start()
            elif redactor is not None:
                recorder.copier.redactors.append(redactor)
            recorder._users += 1
            recorder._idle_since = None
            return recorder

    def _reusable(self, client: Client) -> bool:
        """Whether a run of ``client`` can use this recorder: one in use is
        shared; a lingering one only by its own client, still connected."""
        if self._users > 0:
            return True
        thread_alive = self._thread is not None and self._thread.is_alive()
        return self.client is client and client.status == "running" and thread_alive

    def release(self, redactor: redact.Redactor | None = None) -> None:
        """One user fewer (the one that acquired it with ``redactor``); when
        the last one leaves, the recorder lingers (see ``recorder.linger``), or
        drains the cluster's buffer and stops."""
        with _registry_lock:
            redactors = self.copier.redactors
            if redactor is not None and redactor in redactors:
                redactors.remove(redactor)
            self._users -= 1
            if self._users > 0:
                return
            if self.linger_s > 0 and self._thread is not None and self.reachable():
                self._idle_since = time.monotonic()
                return
            _recorders.pop((self.cluster, str(self.store.path)), None)
        self.stop()

    def _linger_over(self) -> bool:
        """Whether a lingering recorder is done: its client closed, or another
        recorder of its cluster and store took over. It then leaves the
        registry and stops (True). Past ``linger_s`` it leaves the registry (a
        run after that asks the cluster anew) but stays, keeping the cluster
        live in the store while its client is connected (False)."""
        with _registry_lock:
            if self._idle_since is None or self._users > 0:
                return False
            key = (self.cluster, str(self.store.path))
            current = _recorders.get(key)
            done = self.client.status in ("closing", "closed") or (
                current is not None and current is not self
            )
            if not done and time.monotonic() - self._idle_since < self.linger_s:
                return False
            if current is self:
                _recorders.pop(key)
        if not done:
            return False
        self._retire()
        return True

    def _retire(self) -> None:
        """Stop without a last pull: nobody needs one (a lingering recorder).
        Its thread closes the store as it ends, if it still runs."""
        self._stop.set()
        if self.copier.export is not None:  # sends the rest from its own thread
            self.copier.export.close(timeout=0)
        if self._thread is None or not self._thread.is_alive():
            self._close_store()

    # -- running -----------------------------------------------------------------
    def start(self) -> None:
        self.export_settings = _export_settings()
        hello = None
        try:
            hello = install_capture(self.client)
        except CaptureUnavailable as e:
            self.partial = Partial(str(e), silent=isinstance(e, SchedulerSilent))
            warnings.warn(
                f"dask-observe records this cluster partially: {e}. Kept: the "
                "task stream, events and distributed's own recent log lines of "
                "live processes; lost: what tasks print and log, lines of "
                "workers that die, metrics over time.",
                CaptureUnavailableWarning,
                stacklevel=2,
            )
        self.copier.hello = hello
        if hello is not None and "asked_at" in hello:
            self.clock_offset = clock_offset(self.client, hello)
        silent = self.partial is not None and self.partial.silent
        dashboard = None if silent else dashboard_address(self.client, hello)
        self.store.telemetry.register_cluster(
            self.cluster, dashboard, client=this_process()
        )
        if self.partial is not None:
            self.workers.enabled = False
            return
        self.copier.begin_at_recent(hello)
        self.copier.export = _live_export(self.cluster)
        # What the store starts at (up to ``recorder.backlog`` of recent
        # records) is copied now, before the first run begins: copied by the
        # thread during that run, it held the client's GIL and slowed the run.
        try:
            self.pull()
        except Exception as e:  # the thread's pulls retry, and say what fails
            logger.debug("dask-observe: the first pull failed: %s", e)
        self._thread = threading.Thread(
            target=self._run, name="dask-observe-recorder", daemon=True
        )
        self._thread.start()
        threading.Thread(
            target=self.liveness.watch,
            args=(self._stop,),
            name="dask-observe-liveness",
            daemon=True,
        ).start()

    def export_as_configured(self) -> LiveExport | None:
        """The live export for a run starting now, as ``observe.export.otlp``
        says now: a recorder lives on from run to run (it lingers), and the
        settings may have changed since it was made (an endpoint set after a
        first recorded cell). An export it replaces goes on sending what it
        holds and ends the runs still open on it."""
        with _registry_lock:
            settings = _export_settings()
            if self.partial is not None or settings == self.export_settings:
                return self.copier.export
            replaced, self.export_settings = self.copier.export, settings
            self.copier.export = _live_export(self.cluster)
        if replaced is not None:
            replaced.close(timeout=0)
        return self.copier.export

    def _run(self) -> None:
        try:
            self._pull_while_needed()
        finally:
            self._stop.set()  # ended by itself (gone): the watchdog ends too
            self._say_closed()
            if self._idle_since is not None:  # retired: nobody else uses it
                self._close_store()

    def _say_closed(self) -> None:
        """Tell the store, once its client or scheduler closed, that the
        cluster is not live (the panel greys it within its next poll, not
        after the last touch grows old)."""
        if self._closed_said or not threading.main_thread().is_alive():
            # (The interpreter shutting down, its clients closed by atexit:
            # a daemon thread's SQLite write then crashed the process.)
            return
        scheduler_closed = self.last_read
        if not (scheduler_closed or self.client.status in ("closing", "closed")):
            return
        self._closed_said = True
        try:
            # The client alone: another process may still watch the cluster.
            self.store.telemetry.close_cluster(
                self.cluster, client=this_process(), scheduler=scheduler_closed
            )
        except Exception as e:  # a closed or busy store: it ages out instead
            logger.debug("dask-observe: cannot mark the cluster closed: %s", e)

    def _pull_while_needed(self) -> None:
        paused = False
        while not self._stop.wait(self.interval_s):
            if self._idle_since is not None:  # lingering: no run needs a pull
                if self._linger_over():
                    return
                # The cluster is live while the client that recorded it is
                # connected, recorded or not: the panel keeps its workers and
                # dashboard buttons between cells. A local check, no call.
                if self.client.status == "running":
                    self.liveness.watched()
                continue
            try:
                self.pull()
            except Exception as e:  # a closed client or a lost scheduler
                # Only a connection that failed says the scheduler may be gone
                # (a busy store, say, is not that).
                if isinstance(e, OSError | TimeoutError):
                    self.unanswered()
                else:  # it answered: the store, say, failed
                    self.answered()
                if self.client.status in ("closing", "closed"):
                    self.gone.set()
                    return
                if isinstance(e, TimeoutError) and self.client.status == "running":
                    # Not gone: its connection holds, but it does not answer
                    # (a broken connection is an OSError instead).
                    self.liveness.unanswered()
                if not paused:  # once, not every interval while it lasts
                    logger.warning("dask-observe: recording paused: %s", e)
                paused = True
                continue
            self.liveness.answered()
            if self.state is SchedulerState.LAST_READ:  # its last records are stored
                self.gone.set()
                return
            if paused:
                logger.warning("dask-observe: recording resumed")
                paused = False

    def stop(self) -> None:
        """Stop pulling, after one last pull of whatever the cluster still holds."""
        self._stop.set()
        if self._thread is not None:
            # A pull in flight to a scheduler that died may wait out its
            # connect timeout; the thread is a daemon and ends by itself.
            self._thread.join(timeout=None if self.reachable() else 1.0)
        try:
            if self.reachable():
                self.pull()
        except Exception as e:
            logger.warning("dask-observe: could not read the last records: %s", e)
        finally:
            if self.copier.export is not None:  # sends the rest from its own thread
                self.copier.export.close(timeout=0)
            self._say_closed()
            self._close_store()

    def _close_store(self) -> None:
        if self.owns_store:
            self.store.close()

"""Records a run: a span on the cluster, a row in the store, and the recorder
copying the cluster's telemetry while the run lasts; at its end, what it
measured, and what is made of it (settings, environment, judged flags, export,
retention) by a thread of its own after the block returned.

The same machinery serves ``%%dask_record``, ``%dask_observe start/stop``,
``dask_observe.record()`` (:mod:`.block`) and ``dask-observe demo``.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from typing import TYPE_CHECKING, Any

from dask_observe import redact
from dask_observe.api import Run, Store
from dask_observe.api.ends import PendingEnd, Stage, begin_end, wait_records_stored
from dask_observe.capture.shipper import CLOCK_S
from dask_observe.capture.wire import EventRecord
from dask_observe.recording import environment, fallback, graphs, link, nativerun
from dask_observe.recording.environment import (
    StartedIn,
    client_environment,
    cluster_environment,
)
from dask_observe.recording.finish import (
    EndSnapshot,
    Finisher,
    hold_client_close,
    import_for_end,
    not_whole,
    run_settings,
    start_finisher,
    stored_counts,
)
from dask_observe.recording.measures import FineMeter, fine_map, profiles
from dask_observe.recording.recorder import Recorder, SchedulerState
from dask_observe.recording.span import hide_span_annotation_warning, run_span
from dask_observe.store import RunData

if TYPE_CHECKING:
    from concurrent.futures import Future

    from distributed import Client

    from dask_observe.export.live import LiveExport
    from dask_observe.recording.fallback import StreamMark
    from dask_observe.recording.nativerun import NativeRun

logger = logging.getLogger(__name__)

#: A run still going after this long has the environment it started in stored
#: (for a crash to leave): a short cell's block does not share its process
#: with that work (4 ms a run when done at once, measured), its end does it.
START_DELAY_S = 0.5


class Recording:
    """One run in progress.

    Tasks submitted between :meth:`start` and :meth:`stop` carry the run's span, so
    the cluster attributes them to the run even while other clients use it. With
    ``whole_cluster`` (a headless recorder) there is no span: the run holds every
    task the cluster ran meanwhile, whoever submitted it.
    """

    def __init__(
        self,
        name: str,
        client: Client,
        store: Store,
        *,
        whole_cluster: bool = False,
        code: dict[str, Any] | None = None,
        native: bool | None = None,
    ) -> None:
        self.whole_cluster = whole_cluster
        #: Whether py-spy records each worker process for a profile that sees
        #: compiled code (None: as ``observe.profile.native`` says).
        self.native = native
        self._native: NativeRun | None = None
        #: Where the run came from (``{"cell": source}`` for a notebook cell);
        #: None: the script that runs, if any (``environment.script_code``).
        self.code = code
        #: Redaction as configured when the run started (``observe.redact``):
        #: whatever of the run this process writes goes through it first.
        self.redact = redact.configured()
        self.name = self.redact.text(name)
        self.client = client
        self.store = store
        self.run: Run | None = None
        #: Whoever stops the run shows its report right away (a recorded
        #: cell): its end's last writes wait until :meth:`report_shown`.
        self.report_follows = False
        self._pending_end: PendingEnd | None = None
        self._span: contextlib.AbstractContextManager[str | None] | None = None
        self._span_id: str | None = None
        self._recorder: Recorder | None = None
        #: The live OpenTelemetry export this run goes to (its trace's root).
        self._export: LiveExport | None = None
        #: distributed's large-graph warnings heard while the run records.
        self._graphs = graphs.Listener()
        self._graphs_said: list[tuple[float, str, str]] = []
        #: The scheduler's fine metrics totals when the run started: what the
        #: cluster measured meanwhile (all of a whole-cluster run's, and for a
        #: run with a span what its span cannot hold, such as the memory
        #: monitor's spilling) is their difference at the end.
        #: The run's fine performance metrics (its span's, once it has one).
        self._fine = FineMeter(self.scheduler_call, None)
        #: The environment the run started in, stored as it starts.
        self._started_in: StartedIn | None = None
        #: A run without the capture plugins: where the scheduler's task
        #: stream stood as it started (``fallback.begin``).
        self._stream_mark: StreamMark | None = None

    def scheduler_call(self, op: str, **kwargs: Any) -> Any:
        """Call one of the capture plugin's handlers on the scheduler (directly
        on its event loop when it runs in this process: ``Recorder.call``)."""
        if self._recorder is not None:
            return self._recorder.call(op, **kwargs)
        return link.rpc(self.client, op, link.answer_timeout(), **kwargs)

    def scheduler_ask(self, op: str, **kwargs: Any) -> Future[Any]:
        """As :meth:`scheduler_call`, not waited for: the future of the
        answer (:func:`.link.ask`)."""
        recorder = self._recorder
        if recorder is not None:
            return link.ask(recorder.client, recorder.cluster, op, **kwargs)
        scheduler = self.client.scheduler
        assert scheduler is not None
        return link.ask(self.client, str(scheduler.address), op, **kwargs)

    @property
    def cluster_gone(self) -> threading.Event:
        """Set once the recorder has nothing more to pull: the scheduler
        closed (its last records stored) or the client did."""
        assert self._recorder is not None, "the recording has not started"
        return self._recorder.gone

    @property
    def cluster_closed(self) -> bool:
        """Whether the scheduler closed as it should, its last records read
        (else, once ``cluster_gone``, it stopped answering)."""
        return self._recorder is not None and self._recorder.last_read

    @property
    def span_id(self) -> str | None:
        """The run's span on the cluster (None for a whole-cluster recording)."""
        return self._span_id

    def _now(self) -> float:
        """The time on the cluster's clock, which its records are on: a run's
        start and end, and what this process adds to it, are compared with
        them (``Recorder.clock_offset``)."""
        offset = self._recorder.clock_offset if self._recorder is not None else 0.0
        return time.time() + offset

    def start(self) -> Run:
        # A run whose last records are still coming: of this store, it would
        # take this one's first ones into its slice too; of another, its
        # workers' last lines would come in this run's window (a new store
        # copies the cluster's recent lines before its first run: those still
        # on a worker came during the run, 2,000 once the end was slow).
        # Nothing is waited for where no end is being written.
        wait_records_stored(None)
        hide_span_annotation_warning()
        self._recorder = Recorder.acquire(self.client, self.store, self.redact)
        self._span = (
            contextlib.nullcontext(None) if self.whole_cluster else run_span(self.name)
        )
        self._span_id = self._fine.span_id = self._span.__enter__()
        self._graphs = graphs.listen()
        run_id = None
        try:
            scheduler = self.client.scheduler
            run_id = self.store.create_run(
                self.name,
                cluster=scheduler.address if scheduler is not None else None,
                span_id=self._span_id,
                started=self._now(),
            )
            if self._recorder.partial is not None:
                self.store.set_partial(run_id, self._recorder.partial.reason)
                self._begin_partial()
            else:
                self._recorder.workers.ask_early()
                # After the run's row: the run starts with a metrics sample in
                # its slice of the store (watching a span takes one), so even a
                # worker dead within the first sampling interval has its
                # memory limit recorded.
                if self._span_id is not None:  # one round trip for both
                    self._fine.before = fine_map(
                        self.scheduler_call("dask_observe_begin", span_id=self._span_id)
                    )
                else:
                    self.scheduler_call("dask_observe_sample")
                    self._fine.baseline(self._recorder.workers.flush)
        except BaseException:
            self._graphs.close()
            self._span.__exit__(None, None, None)
            self._recorder.release(self.redact)
            if run_id is not None:
                self.store.end_run(run_id, "failed")
            raise
        self.run = self.store.run(run_id)
        self._begin_native()
        self._begin_environment(run_id)
        self._export = self._recorder.export_as_configured()
        if self._export is not None:
            self._export.begin_run(run_id, self.name, self._span_id, self.run.started)
        return self.run

    def _begin_native(self) -> None:
        """Start py-spy on every worker where the run asked for a native
        profile; a failure is a warning, never the run's."""
        import dask.config

        wanted = self.native
        if wanted is None:  # (the module below only where a run asks for it)
            wanted = bool(dask.config.get("observe.profile.native", False))
        if not wanted or self._recorder is None or self._recorder.partial is not None:
            return
        try:
            self._native = nativerun.NativeRun(self.client, nativerun.configured_rate())
        except Exception as e:
            logger.warning("dask-observe: cannot start the native profile: %s", e)

    def _begin_environment(self, run_id: int) -> None:
        """Store the environment the run starts in, so that a process killed
        mid-run leaves it too. The config is read here, before the block can
        change it (0.4 ms); the rest (the workers asked, a script's git
        commit, the write) by a thread of its own once the block has run for
        ``START_DELAY_S``."""
        assert self._recorder is not None
        started = StartedIn(environment.config_changes())
        self._started_in = started
        recorder, path = self._recorder, self.store.path
        code = self.code
        redactor = self.redact

        def store_it() -> None:
            if started.ended.wait(START_DELAY_S):  # its end keeps it whole
                return
            try:
                started.workers = recorder.workers.describe_cluster()
                started.code = code if code is not None else environment.script_code()
                ran_in = environment.assemble(
                    client_environment(),
                    cluster_environment(recorder.hello),
                    started.workers,
                    started.config,
                    started.code,
                )
                with Store(path) as store:
                    store.set_environment(run_id, redactor.data(ran_in))
            except Exception as e:  # the run's end assembles it again
                logger.warning("dask-observe: cannot record the run's start: %s", e)

        started.thread = threading.Thread(
            target=store_it, name="dask-observe-run-start", daemon=True
        )
        started.thread.start()

    def _begin_partial(self) -> None:
        """A run whose cluster has no capture plugins: have distributed keep
        its task stream, to read at the end with the rest it holds."""
        assert self._recorder is not None
        assert self._recorder.partial is not None
        if self._recorder.partial.silent:  # asked at the end, once, by time
            return
        try:
            self._stream_mark = fallback.begin(self.client)
        except TimeoutError:
            logger.warning(
                "dask-observe: cannot start the task stream: the scheduler did not"
                " answer in %g s",
                link.answer_timeout(),
            )
        except Exception as e:
            logger.warning("dask-observe: cannot start the task stream: %s", e)

    def stop(self, status: str = "finished") -> Run:
        """End the run as ``finished`` or ``failed`` and return it.

        The block returns once the run's span is closed: the run's last
        records (every worker flushed: a round trip to the scheduler), its row
        closed and what is made of it are written by a thread of its own
        (``api.ends``, 3-5 ms of the block before: a run should cost what
        its start costs). Readers in this process wait for it, and so do the
        next run of its store and its client's close
        (``finish.hold_client_close``).
        """
        assert self.run is not None and self._span is not None, "not started"
        assert self._recorder is not None
        # The run's wall time ends here, not after the flushes that follow;
        # on its cluster's clock, as its start.
        ended = self._now()
        self._span.__exit__(None, None, None)
        self._graphs_said = self._graphs.close()
        closing = EndSnapshot.read()
        end = begin_end(self.store, self.run.id)
        end.report_follows = self.report_follows
        self._pending_end = end
        held = self._recorder.partial is None and hold_client_close(self.client, end)
        if not held:
            # What distributed holds of a run without the capture is read
            # here; so is all of a run whose client's close could not wait.
            # Store errors raise, as the block's own would.
            try:
                finisher = self._close(self.store, status, ended, closing)
            except BaseException:
                end.reach(Stage.DONE)
                raise
            end.reach(Stage.RECORDS_STORED)
            start_finisher(end, closing, finisher.write, end)
        else:
            if self._span_id is not None:  # a closing scheduler waits for it
                self._recorder.copier.spans_ending.add(self._span_id)
            start_finisher(end, closing, self._finish, status, ended, closing, end)
        self.run._end = end
        return self.run

    def report_shown(self) -> None:
        """The run's report was shown (see ``report_follows``)."""
        if self._pending_end is not None:
            self._pending_end.shown()

    def _finish(
        self, status: str, ended: float, closing: EndSnapshot, end: PendingEnd
    ) -> None:
        """The run's end, by its thread: its last records and row, then what is
        made of them (``Finisher.write``). A store that fails here is a
        warning: what was stored before is kept."""
        finisher = None
        try:
            # A connection of its own: whoever opened the run's store may
            # close it as soon as the block returned (a cell does).
            with Store(self.store.path) as store:
                finisher = self._close(store, status, ended, closing)
        except Exception as e:
            logger.warning(
                "dask-observe: the end of run %r could not be stored (%s); "
                "what was stored before is kept",
                self.name,
                e,
            )
        finally:
            if self._recorder is not None and self._span_id is not None:
                # Its end came, or not: the scheduler waits for it no more.
                self._recorder.copier.spans_ending.discard(self._span_id)
            # A run that will be judged has what judging imports imported
            # before its client's close goes on (and its cluster's, usually
            # closed after it): see ``END_IMPORTS``.
            if finisher is not None:
                try:
                    import_for_end()
                except ImportError as e:  # the rules say what they miss
                    logger.warning(
                        "dask-observe: cannot judge run %r: %s", self.name, e
                    )
            end.reach(Stage.RECORDS_STORED)
        if finisher is None:
            end.reach(Stage.DONE)
        else:
            finisher.write(end)

    def _close(
        self, store: Store, status: str, ended: float, closing: EndSnapshot
    ) -> Finisher:
        """Store the run's last records and close its row, through ``store``."""
        assert self._recorder is not None
        if self._recorder.partial is not None:
            return self._stop_partial(store, status, ended, closing)
        if self._span_id is None and self._recorder.last_read:
            # A whole-cluster recording whose scheduler closed, its last
            # records read as it waited: the run ends with the cluster, and
            # nothing more is asked of it (each call would wait out
            # distributed's connect timeout).
            assert self.run is not None
            self._recorder.release(self.redact)
            return self._end(
                store, status, stored_counts(store, self.run.id), ended, closing
            )
        unanswered = self._recorder.state is SchedulerState.UNANSWERED
        if unanswered and self.client.status == "running":
            # The last pull failed; the scheduler may answer again (a pause
            # of its loop, a process frozen and resumed): a run ended just
            # after must not be called lost for it (a test ended one 0.2 s
            # after its scheduler resumed, before the next pull).
            self._recorder.answers()
        if not self._recorder.reachable(closing=True):
            return self._stop_lost(
                store, ended, closing, "the scheduler stopped answering"
            )
        counts: dict[str, int] = {}
        ended_reply: dict[str, Any] | None = None
        try:  # one round trip: the span's counts, the cluster flushed
            if self._span_id is not None:
                # A run that did not finish keeps where it stood.
                stopped = status != "finished"
                ended_reply = self._recorder.end_run(self._span_id, stopped=stopped)
                counts = ended_reply["counts"]
        except (OSError, TimeoutError) as e:  # connection lost: it is gone
            return self._stop_lost(store, ended, closing, f"{type(e).__name__}: {e}")
        except Exception as e:
            logger.warning("dask-observe: cannot read task counts of the run: %s", e)
        workers: dict[str, dict[str, Any]] = {}
        not_kept: str | None = None
        try:  # the run's last tasks and lines, readable as soon as it has ended
            if ended_reply is None:
                workers = self._recorder.workers.flush()
            else:
                workers = self._recorder.workers.describe(ended_reply["workers"])
            # The end's reply brought them, from a capture that can.
            self._recorder.pull((ended_reply or {}).get("pull"), self.redact)
            if (ended_reply or {}).get("closing"):
                # Closed as soon as this answer left: asked anything more
                # (a nanny's last flush, the profile), it would be waited for
                # to distributed's connect timeout, twice 30 s.
                self._recorder.closed_at_end()
            else:
                self._recorder.settle(self.redact)
        except (OSError, TimeoutError) as e:  # unanswered (answer-timeout)
            # A worker that froze holds the flush as a scheduler that froze
            # does; only the scheduler's own silence makes the run lost.
            unanswered = self._recorder.state is SchedulerState.UNANSWERED
            if unanswered or not self._recorder.answers():
                why = f"{type(e).__name__}: {e}"
                return self._stop_lost(store, ended, closing, why)
            logger.warning("dask-observe: cannot read the run's last records: %s", e)
        except Exception as e:
            logger.warning("dask-observe: cannot read the run's last records: %s", e)
            if isinstance(e, sqlite3.Error):  # the store, not the cluster
                not_kept = str(e)
        assert self.run is not None
        fine: list[tuple[str, str, str, str, float]] = []
        try:  # after the flush: its heartbeats brought the last of them
            fine = self._fine.rows(ended_reply)
            store.set_fine_metrics(
                self.run.id,
                [(c, self.redact.text(p), a, u, v) for c, p, a, u, v in fine],
            )
        except Exception as e:
            logger.warning("dask-observe: cannot read the run's fine metrics: %s", e)
        # Not of a cluster that closed as the run ended: every call would
        # wait out distributed's connect timeout (its workers are gone too).
        closed = self._recorder.state is SchedulerState.CLOSED
        if self._native is not None and not closed:
            try:  # after the last pull: the run's tasks are stored
                # Read through the store this end writes with: the run's
                # own may be closed by now (a recorded cell's).
                run = RunData(store, store.run_record(self.run.id))
                native = self._native.end(self.client, run, self.redact, ended)
                store.telemetry.append(self._recorder.cluster, [native])
            except Exception as e:
                logger.warning("dask-observe: cannot read the native profile: %s", e)
        try:
            # Profiles hold source lines: a secret assigned in a task's code.
            if self._recorder.reachable(closing=True):
                store.set_profiles(
                    self.run.id,
                    self.redact.data(profiles(self.client, self.run.started, fine)),
                )
        except Exception as e:
            logger.warning("dask-observe: cannot read the run's profile: %s", e)
        self._recorder.release(self.redact)
        if self._span_id is None:  # whole cluster: count what was stored
            counts = stored_counts(store, self.run.id)
        return self._end(store, status, counts, ended, closing, workers, not_kept)

    def _stop_lost(
        self, store: Store, ended: float, closing: EndSnapshot, why: str
    ) -> Finisher:
        """The scheduler died during the run: it ends ``failed``, with what was
        pulled before (the scheduler's last lines: a closing scheduler waits
        for its recorder to read them) and an event that says so."""
        assert self._recorder is not None and self.run is not None
        logger.warning("dask-observe: the run's scheduler is gone (%s)", why)
        # Nothing more is asked of it (each call would wait out its bound).
        self._recorder.unanswered()
        event = EventRecord(
            "event", self._now(), "scheduler-lost", None, {"reason": why}
        )
        not_kept = None
        try:
            store.telemetry.append(self._recorder.cluster, [event])
        except sqlite3.Error as e:  # the run's row is closed still
            logger.warning("dask-observe: cannot keep the scheduler's loss: %s", e)
            not_kept = str(e)
        self._recorder.release(self.redact)
        counts = stored_counts(store, self.run.id)
        return self._end(store, "failed", counts, ended, closing, not_kept=not_kept)

    def _stop_partial(
        self, store: Store, status: str, ended: float, closing: EndSnapshot
    ) -> Finisher:
        """End a run whose cluster has no capture plugins with what distributed
        still holds of it (``fallback``)."""
        assert self._recorder is not None and self.run is not None
        silent = None
        try:
            collected = fallback.collect(
                self.client, self.run.started, self._span_id, self._stream_mark
            )
            silent = collected.silent
            redacted = self.redact.records(enumerate(collected.records))
            store.telemetry.append(self._recorder.cluster, [r for _, r in redacted])
        except Exception as e:  # the cluster may be gone; the run still ends
            logger.warning("dask-observe: cannot read what the cluster holds: %s", e)
        if silent is not None:  # as a whole recording's scheduler that froze
            why = f"the scheduler stopped answering: {silent}"
            return self._stop_lost(store, ended, closing, why)
        self._recorder.release(self.redact)
        counts = stored_counts(store, self.run.id)
        return self._end(store, status, counts, ended, closing)

    def _end(
        self,
        store: Store,
        status: str,
        counts: dict[str, int],
        ended: float,
        closing: EndSnapshot,
        workers: dict[str, dict[str, Any]] | None = None,
        not_kept: str | None = None,
    ) -> Finisher:
        """Close the run's row: its data is all stored (or, with ``not_kept``,
        the store's error, marked partial). What is made of it (the settings
        it is judged under, the environment it ran in, its flags judged once,
        the live export's end, retention) is the ``Finisher`` returned."""
        assert self.run is not None and self._recorder is not None
        workers = workers or {}
        settings = run_settings({w: a["memory"] for w, a in workers.items()}, closing)
        try:
            self._export_drops(store)
            self._large_graphs(store)
            self._client_clock(store)
        except sqlite3.Error as e:  # the run's row is closed still
            logger.warning("dask-observe: cannot keep the run's last events: %s", e)
            not_kept = not_kept or str(e)
        store.end_run(
            self.run.id,
            status,
            n_tasks=sum(counts.values()),
            n_failed=counts.get("erred", 0),
            n_running=counts.get("running", 0),
            ended=ended,
            partial=None
            if not_kept is None
            else not_whole(store, self.run.id, not_kept, counts),
        )
        return Finisher(
            str(self.store.path), self.run.id, status, ended, self.redact,
            self._recorder.hello, self._started_in, self.code, self._export,
            workers, settings, closing,
        )  # fmt: skip

    def _large_graphs(self, store: Store) -> None:
        """Keep in the run the large graphs its client warned it sent."""
        assert self._recorder is not None
        events = [
            EventRecord(
                "event", t + self._recorder.clock_offset, "large-graph", None,
                {"size": size, "bytes": graphs.size_bytes(size), "message": line},
            )
            for t, size, line in self._graphs_said
        ]  # fmt: skip
        if events:
            store.telemetry.append(self._recorder.cluster, events)

    def _client_clock(self, store: Store) -> None:
        """Keep in the run how far this process's clock was moved onto the
        cluster's (a ``clock-offset`` event of no worker, as the workers say
        theirs), where it was: what the notebook stamps reads that far off."""
        assert self._recorder is not None
        offset = self._recorder.clock_offset
        if abs(offset) >= CLOCK_S:
            data = {"seconds": round(offset, 3), "of": "client"}
            event = EventRecord("event", self._now(), "clock-offset", None, data)
            store.telemetry.append(self._recorder.cluster, [event])

    def _export_drops(self, store: Store) -> None:
        """Keep in the run (before its slice of the store closes) what the live
        OpenTelemetry export could not send so far."""
        assert self._recorder is not None
        export = self._export
        if export is not None and export.dropped:
            data = {"count": export.dropped, "endpoint": export.endpoint}
            event = EventRecord("event", self._now(), "export-dropped", None, data)
            store.telemetry.append(self._recorder.cluster, [event])

    def finish_export(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the live OpenTelemetry export to send the
        rest (a process about to exit; a kernel lets it go on by itself)."""
        if self.run is not None:  # the run's end is written, its trace ended
            self.run.refresh()
        if self._export is not None:
            self._export.close(timeout)

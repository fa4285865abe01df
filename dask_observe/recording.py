"""Records a run: a span on the cluster, a row in the store, and the recorder
copying the cluster's telemetry while the run lasts.

The same machinery serves ``%%dask_record``, ``%dask_observe start/stop``,
``dask_observe.record()`` and ``dask-observe demo``.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import json
import logging
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dask.base import annotate, get_annotations

from dask_observe import redact
from dask_observe.capture.wire import RUN_ANNOTATION, EventRecord
from dask_observe.recorder import Recorder
from dask_observe.run import Ending, Run, Store, begin_ending
from dask_observe.store import StoreError

if TYPE_CHECKING:
    from distributed import Client

    from dask_observe.diagnose import Flag
    from dask_observe.export.live import LiveExport
    from dask_observe.store.retention import Policy

logger = logging.getLogger(__name__)


def _hide_span_annotation_warning() -> None:
    """dask-expr warns that annotations are ignored when a DataFrame is made
    inside a span; the run's annotations still reach the scheduler (the client
    adds them when it submits), so the warning would only mislead. Hidden when
    the run's own are the only annotations; any other still warns. Set at each
    start: code that resets warning filters (pytest does) drops it."""
    warnings.filterwarnings(
        "ignore",
        message=r"Dask annotations \{'span': \{[^{}]*\}"
        rf"(, '{RUN_ANNOTATION}': \([^(){{}}]*\))?\}} detected",
        category=UserWarning,
    )


@contextlib.contextmanager
def _run_span(name: str) -> Iterator[str]:
    """A span for the run, and the run's own annotation naming it (with the
    runs it is nested in). distributed puts a task whose group already has a
    span into that span: after a block that kept futures of ``inc``, the next
    run's ``inc`` tasks joined the old run's span and the run recorded none.
    The annotation is the client's, so it stays with every task submitted in
    the block."""
    from distributed import span

    with span(name) as span_id:
        runs = tuple(get_annotations().get(RUN_ANNOTATION, ()))
        with annotate(**{RUN_ANNOTATION: (*runs, span_id)}):
            yield span_id


#: Compute seconds a run needs for its profile to be read (10 ms samples).
PROFILE_S = 0.5
#: Task prefixes (those with the most compute) whose own profiles are read.
PROFILE_PREFIXES = 10
#: A run still going after this long has the environment it started in stored
#: (for a crash to leave): a short cell's block does not share its process
#: with that work (4 ms a run when done at once, measured), its end does it.
START_DELAY_S = 0.5
#: How long a run's end waits for its start's environment to be assembled
#: (asking the workers): after that the end's own view is stored alone.
START_WAIT_S = 30.0

NO_CLIENT_HELP = (
    "No Dask client found. Create one first, e.g. "
    "`from distributed import Client; client = Client()` for a local cluster, "
    "or `Client('tcp://scheduler-address:8786')` for a running one."
)


def _fine_map(rows: Any) -> dict[tuple[str, str, str, str], float]:
    """(context, prefix, activity, unit) -> value, from the scheduler plugin's
    fine metrics rows."""
    return {(str(c), str(p), str(a), str(u)): float(v) for c, p, a, u, v in rows}


class NoClientError(ValueError):
    """Recording needs a Dask client, and none was given or found."""


def resolve_client(client: Client | None) -> Client:
    """The given client, else the current default one."""
    if client is not None:
        return client
    from distributed import default_client

    try:
        found: Client = default_client()
    except ValueError:
        raise NoClientError(NO_CLIENT_HELP) from None
    return found


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
    ) -> None:
        self.whole_cluster = whole_cluster
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
        self._span: contextlib.AbstractContextManager[str | None] | None = None
        self._span_id: str | None = None
        self._recorder: Recorder | None = None
        #: The live OpenTelemetry export this run goes to (its trace's root).
        self._export: LiveExport | None = None
        #: The scheduler's fine metrics totals when the run started: what the
        #: cluster measured meanwhile (all of a whole-cluster run's, and for a
        #: run with a span what its span cannot hold, such as the memory
        #: monitor's spilling) is their difference at the end.
        self._fine_before: dict[tuple[str, str, str, str], float] = {}
        #: The environment the run started in, stored as it starts.
        self._started_in: _StartedIn | None = None

    def scheduler_call(self, op: str, **kwargs: Any) -> Any:
        """Call one of the capture plugin's handlers on the scheduler (directly
        on its event loop when it runs in this process: ``Recorder.call``)."""
        if self._recorder is not None:
            return self._recorder.call(op, **kwargs)
        return self.client.sync(getattr(self.client.scheduler, op), **kwargs)

    @property
    def span_id(self) -> str | None:
        """The run's span on the cluster (None for a whole-cluster recording)."""
        return self._span_id

    def _fine_totals(
        self, span_id: str | None
    ) -> dict[tuple[str, str, str, str], float]:
        """(context, prefix, activity, unit) -> value: a span's fine performance
        metrics, or (span_id None) the whole cluster's."""
        return _fine_map(
            self.scheduler_call("dask_observe_fine_metrics", span_id=span_id)
        )

    def _fine_baseline(self) -> dict[tuple[str, str, str, str], float]:
        """The cluster's fine metrics totals as a whole-cluster run starts,
        after the workers sent what they measured before it, which would
        otherwise count as its own. (A run with a span only needs the totals
        for what its span cannot hold, and starts without the wait.)"""
        assert self._recorder is not None
        try:
            self._recorder.flush_cluster()
            return self._fine_totals(None)
        except Exception as e:  # they are extra: the run records without them
            logger.warning("dask-observe: cannot read the fine metrics: %s", e)
            return {}

    def _fine_rows(
        self, ended: dict[str, Any] | None
    ) -> list[tuple[str, str, str, str, float]]:
        """The run's fine metrics: its span's, and the cluster's meanwhile in the
        contexts that no span holds (all of them without a span). ``ended``:
        the scheduler's reply to ``dask_observe_end``, which holds both."""
        if ended is not None:
            totals, of_span = _fine_map(ended["fine"]), _fine_map(ended["span_fine"])
        else:
            totals = self._fine_totals(None)
            of_span = {} if self._span_id is None else self._fine_totals(self._span_id)
        before = self._fine_before
        if any(totals.get(k, 0.0) < v for k, v in before.items()):
            before = {}  # a new scheduler counts from zero
        rows = [
            (c, p, a, u, value - before.get((c, p, a, u), 0.0))
            for (c, p, a, u), value in totals.items()
        ]
        # A run whose tasks went (some of them) to an older span has no span
        # of its own to read: it takes the cluster's, as a whole-cluster run.
        adopted = ended is not None and ended.get("adopted", False)
        if self._span_id is not None and not adopted:
            spanned = ("execute", "p2p")  # distributed.spans.CONTEXTS_WITH_SPAN_ID
            rows = [r for r in rows if r[0] not in spanned]
            rows += [(*k, v) for k, v in of_span.items()]
        return [r for r in rows if r[-1]]

    def start(self) -> Run:
        _hide_span_annotation_warning()
        self._recorder = Recorder.acquire(self.client, self.store)
        self._span = (
            contextlib.nullcontext(None) if self.whole_cluster else _run_span(self.name)
        )
        self._span_id = self._span.__enter__()
        run_id = None
        try:
            scheduler = self.client.scheduler
            run_id = self.store.create_run(
                self.name,
                cluster=scheduler.address if scheduler is not None else None,
                span_id=self._span_id,
            )
            if self._recorder.partial is not None:
                self.store.set_partial(run_id, self._recorder.partial)
                self._begin_partial()
            else:
                # After the run's row: the run starts with a metrics sample in
                # its slice of the store (watching a span takes one), so even a
                # worker dead within the first sampling interval has its
                # memory limit recorded.
                if self._span_id is not None:  # one round trip for both
                    self._fine_before = _fine_map(
                        self.scheduler_call("dask_observe_begin", span_id=self._span_id)
                    )
                else:
                    self.scheduler_call("dask_observe_sample")
                    self._fine_before = self._fine_baseline()
        except BaseException:
            self._span.__exit__(None, None, None)
            self._recorder.release()
            if run_id is not None:
                self.store.end_run(run_id, "failed")
            raise
        self.run = self.store.run(run_id)
        self._begin_environment(run_id)
        self._export = self._recorder.export_as_configured()
        if self._export is not None:
            self._export.begin_run(run_id, self.name, self._span_id, self.run.started)
        return self.run

    def _begin_environment(self, run_id: int) -> None:
        """Store the environment the run starts in, so that a process killed
        mid-run leaves it too. The config is read here, before the block can
        change it (0.4 ms); the rest (the workers asked, a script's git
        commit, the write) by a thread of its own once the block has run for
        ``START_DELAY_S``."""
        from dask_observe import environment

        assert self._recorder is not None
        started = _StartedIn(environment.config_changes())
        self._started_in = started
        recorder, path = self._recorder, self.store.path
        code = self.code
        redactor = self.redact

        def store_it() -> None:
            if started.ended.wait(START_DELAY_S):  # its end keeps it whole
                return
            try:
                started.workers = recorder.describe_cluster()
                started.code = code if code is not None else environment.script_code()
                ran_in = environment.assemble(
                    client_environment(),
                    (recorder.hello or {}).get("environment"),
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
        from dask_observe import fallback

        try:
            fallback.begin(self.client)
        except Exception as e:
            logger.warning("dask-observe: cannot start the task stream: %s", e)

    def stop(self, status: str = "finished") -> Run:
        """End the run as ``finished`` or ``failed`` and return it, refreshed."""
        assert self.run is not None and self._span is not None, "not started"
        assert self._recorder is not None
        # The run's wall time ends here, not after the flushes that follow.
        ended = time.time()
        self._span.__exit__(None, None, None)
        if self._recorder.partial is not None:
            return self._stop_partial(status, ended)
        if not self._recorder.reachable():
            return self._stop_lost(ended, "the scheduler stopped answering")
        counts: dict[str, int] = {}
        ended_reply: dict[str, Any] | None = None
        try:  # one round trip: the span's counts, the cluster flushed
            if self._span_id is not None:
                # A run that did not finish keeps where it stood.
                stopped = status != "finished"
                ended_reply = self.scheduler_call(
                    "dask_observe_end", span_id=self._span_id, stopped=stopped
                )
                counts = ended_reply["counts"]
        except (OSError, TimeoutError) as e:  # connection lost: it is gone
            return self._stop_lost(ended, f"{type(e).__name__}: {e}")
        except Exception as e:
            logger.warning("dask-observe: cannot read task counts of the run: %s", e)
        workers: dict[str, dict[str, Any]] = {}
        not_kept: str | None = None
        try:  # the run's last tasks and lines, readable as soon as it has ended
            if ended_reply is None:
                workers = self._recorder.flush_cluster()
            else:
                workers = self._recorder.describe_workers(ended_reply["workers"])
            self._recorder.pull()
            self._recorder.settle()
        except Exception as e:
            logger.warning("dask-observe: cannot read the run's last records: %s", e)
            if isinstance(e, sqlite3.Error):  # the store, not the cluster
                not_kept = str(e)
        fine: list[tuple[str, str, str, str, float]] = []
        try:  # after the flush: its heartbeats brought the last of them
            fine = self._fine_rows(ended_reply)
            self.store.set_fine_metrics(
                self.run.id,
                [(c, self.redact.text(p), a, u, v) for c, p, a, u, v in fine],
            )
        except Exception as e:
            logger.warning("dask-observe: cannot read the run's fine metrics: %s", e)
        try:
            # Profiles hold source lines: a secret assigned in a task's code.
            self.store.set_profiles(self.run.id, self.redact.data(self._profiles(fine)))
        except Exception as e:
            logger.warning("dask-observe: cannot read the run's profile: %s", e)
        self._recorder.release()
        if self._span_id is None:  # whole cluster: count what was stored
            counts = self._stored_counts()
        return self._end(status, counts, ended, workers, not_kept=not_kept)

    def _profiles(self, fine: list[tuple[str, str, str, str, float]]) -> dict[str, Any]:
        """distributed's statistical profile of the run's time window: the whole
        cluster's (prefix "") and each task prefix's (the PROFILE_PREFIXES with
        the most compute). A run with less compute than PROFILE_S has too few
        samples to say anything, and pays nothing for it.

        The window starts at the first profile cycle (1 s) that ended after the
        run's start: up to a second before it (idle threads are not sampled,
        so that adds only what else ran just before).
        """
        import dask.config
        from dask.utils import parse_timedelta

        from dask_observe import shipping
        from dask_observe.figures import merge_profiles, prune_profile, subtract_profile

        assert self.run is not None
        compute: dict[str, float] = {}
        for context, prefix, activity, unit, value in fine:
            busy = activity != "idle or other spans"
            if context == "execute" and unit == "seconds" and prefix and busy:
                compute[prefix] = compute.get(prefix, 0.0) + value
        if sum(compute.values()) < PROFILE_S:
            return {}
        prefixes = sorted(compute, key=lambda p: -compute[p])[:PROFILE_PREFIXES]
        trees = shipping.profiles(self.client, self.run.started, prefixes)
        interval = float(
            parse_timedelta(
                dask.config.get("distributed.worker.profile.interval"), default="ms"
            )
        )
        whole = trees.pop("")
        counted = {p: tree for p, tree in trees.items() if tree.get("count")}
        by_prefix = {p: prune_profile(tree, interval) for p, tree in counted.items()}
        # A prefix's tree tells which function its task threads were in even
        # at the innermost frame, which the whole tree cannot where one caller
        # (dask's ``__call__``) runs several task functions. So the whole run
        # is the sum of its prefixes' trees and of what is left of the whole
        # without them (other prefixes; work beside the run on a shared
        # cluster, or just before it in the window's first second).
        rest = subtract_profile(whole, list(counted.values()))
        parts = list(by_prefix.values())
        if rest.get("count") or not parts:
            parts.append(prune_profile(rest, interval, of=whole.get("count", 0)))
        return {"": merge_profiles(parts, interval), **by_prefix}

    def _stored_counts(self) -> dict[str, int]:
        """The run's tasks as stored, by ``memory`` / ``erred``."""
        assert self.run is not None
        statuses = self.run.tasks()["status"]
        return {
            "memory": int((statuses == "memory").sum()),
            "erred": int((statuses == "erred").sum()),
        }

    def _not_kept(self, error: str, counts: dict[str, int]) -> str:
        """Why a run whose last records the store refused is not whole, with
        what it holds of it. A pull that failed earlier is no loss: what it
        missed stayed in the scheduler's buffer for the next one (and what
        overflowed that is counted in a ``dropped`` event)."""
        counted = sum(counts.values())
        try:
            stored = len(self.run.tasks()) if self.run is not None else None
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

    def _stop_lost(self, ended: float, why: str) -> Run:
        """The scheduler died during the run: it ends ``failed``, with what was
        pulled before (the scheduler's last lines: a closing scheduler waits
        for its recorder to read them) and an event that says so."""
        assert self._recorder is not None
        logger.warning("dask-observe: the run's scheduler is gone (%s)", why)
        event = EventRecord(
            "event", time.time(), "scheduler-lost", None, {"reason": why}
        )
        self.store.append(self._recorder.cluster, [event])
        self._recorder.release()
        return self._end("failed", self._stored_counts(), ended)

    def _stop_partial(self, status: str, ended: float) -> Run:
        """End a run whose cluster has no capture plugins with what distributed
        still holds of it (``fallback``)."""
        from dask_observe import fallback

        assert self._recorder is not None and self.run is not None
        try:
            records = fallback.collect(self.client, self.run.started, self._span_id)
            redacted = self.redact.records(enumerate(records))
            self.store.append(self._recorder.cluster, [r for _, r in redacted])
        except Exception as e:  # the cluster may be gone; the run still ends
            logger.warning("dask-observe: cannot read what the cluster holds: %s", e)
        self._recorder.release()
        return self._end(status, self._stored_counts(), ended)

    def _end(
        self,
        status: str,
        counts: dict[str, int],
        ended: float,
        workers: dict[str, dict[str, Any]] | None = None,
        not_kept: str | None = None,
    ) -> Run:
        """Close the run's row, and return: its data is all stored (or, with
        ``not_kept``, the store's error, marked partial). What is
        made of it (the settings it is judged under, the environment it ran
        in, its flags judged once, the live export's end, retention) is
        written by a thread of its own after the block returned (``_after``);
        readers in this process wait for that (``run.Ending``)."""
        from dask_observe import environment

        assert self.run is not None
        from dask_observe.store.retention import Policy

        # Read the config now: the block's own ``dask.config.set`` ends as soon
        # as this returns.
        workers = workers or {}
        config = environment.config_changes()
        settings = run_settings({w: a["memory"] for w, a in workers.items()})
        try:
            retention: Policy | None = Policy.from_config()
        except Exception as e:  # the run is recorded; pruning waits for the next
            logger.warning("dask-observe: cannot prune the store: %s", e)
            retention = None
        self._export_drops()
        self.store.end_run(
            self.run.id,
            status,
            n_tasks=sum(counts.values()),
            n_failed=counts.get("erred", 0),
            ended=ended,
            partial=None if not_kept is None else self._not_kept(not_kept, counts),
        )
        ending = begin_ending(self.store, self.run.id)
        # Not a daemon: a script that ends with its block still writes the run's end.
        ending.thread = threading.Thread(
            target=self._after,
            args=(ending, status, ended, workers, config, settings, retention),
            name="dask-observe-run-end",
        )
        ending.thread.start()
        run = self.run.refresh()
        run._ending = ending
        return run

    def _after(
        self,
        ending: Ending,
        status: str,
        ended: float,
        workers: dict[str, dict[str, Any]],
        config: dict[str, Any],
        settings: dict[str, Any],
        retention: Policy | None,
    ) -> None:
        """The end of a run that nobody waits for (see ``_end``)."""
        assert self.run is not None and self._recorder is not None
        run_id = self.run.id
        store: Store | None = None
        try:
            # A connection of its own: whoever opened the run's store may
            # close it as soon as the block returned (a cell does).
            store = Store(self.store.path)
            try:
                ran_in = self.redact.data(self._environment(workers, config))
                store.set_settings(run_id, settings, ran_in)
            except Exception as e:  # readers then judge with the defaults
                logger.warning("dask-observe: cannot record the run's settings: %s", e)
            run = Run.of(store, run_id)
            flags: list[Flag] = []
            try:
                flags = ending.flags = run.flag_list()
                run.keep_verdict(flags)
            except Exception as e:  # a rule's bug must not lose the run
                logger.warning("dask-observe: cannot judge the run's flags: %s", e)
            export = self._export
            if export is not None:  # the run's trace ends, with its flags
                export.end_run(run_id, ended, status, flags)
            if retention is not None and not retention.empty:
                self._retain(store, run_id, retention)
        except Exception as e:  # the run's data is stored; only this is lost
            logger.warning("dask-observe: cannot write the run's end: %s", e)
        finally:
            if store is not None:
                store.close()
            ending.finish()

    def _environment(
        self, workers: dict[str, dict[str, Any]], config: dict[str, Any]
    ) -> dict[str, Any]:
        """The environment the run started in (as stored then), completed
        with what its end saw: workers that joined (their versions), config
        keys set meanwhile. Its shape stays the start's, unless no worker had
        joined yet (an adaptive cluster scaling up)."""
        from dask_observe import environment

        assert self._recorder is not None
        started = self._started_in
        if started is not None and started.thread is not None:
            started.ended.set()
            started.thread.join(START_WAIT_S)
        before = started.workers if started is not None else {}
        code = started.code if started is not None else None
        if code is None:
            code = self.code if self.code is not None else environment.script_code()
        return environment.assemble(
            client_environment(),
            (self._recorder.hello or {}).get("environment"),
            {**workers, **before},
            {**config, **(started.config if started is not None else {})},
            code,
            shape=before or workers,
        )

    def _export_drops(self) -> None:
        """Keep in the run (before its slice of the store closes) what the live
        OpenTelemetry export could not send so far."""
        assert self._recorder is not None
        export = self._export
        if export is not None and export.dropped:
            data = {"count": export.dropped, "endpoint": export.endpoint}
            event = EventRecord("event", time.time(), "export-dropped", None, data)
            self.store.append(self._recorder.cluster, [event])

    def finish_export(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the live OpenTelemetry export to send the
        rest (a process about to exit; a kernel lets it go on by itself)."""
        if self.run is not None:  # the run's end is written, its trace ended
            self.run.refresh()
        if self._export is not None:
            self._export.close(timeout)

    @staticmethod
    def _retain(store: Store, run_id: int, policy: Policy) -> None:
        """Prune the store as ``observe.retention`` said (never this run)."""
        try:
            store.prune(policy, keep=[run_id])
        except Exception as e:  # the run is recorded; pruning waits for the next
            logger.warning("dask-observe: cannot prune the store: %s", e)


class _StartedIn:
    """The environment a run started in, as its start's thread assembles it."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.workers: dict[str, dict[str, Any]] = {}
        self.code: dict[str, Any] | None = None
        self.thread: threading.Thread | None = None
        #: Set when the run ended: its end assembles all of it then.
        self.ended = threading.Event()


@functools.cache
def client_environment() -> dict[str, Any]:
    """This process's Python, OS and packages (``shipping.process_environment``),
    read once."""
    from dask_observe import shipping

    return shipping.process_environment()


def run_settings(thresholds: dict[str, dict[str, float | bool]]) -> dict[str, Any]:
    """The settings a run is judged under (``Run.settings``): the memory
    thresholds its workers reported (``thresholds``, by worker; the most common
    as ``memory``, all of them where they differ), else this process's dask
    config; and this process's ``observe.flags``."""
    from dask_observe import config, shipping

    # A copy: dask.config.set restores the config's own dicts in place when
    # its block ends, and the run's end is written after that.
    settings: dict[str, Any] = {"flags": copy.deepcopy(config.get("flags") or {})}
    if not thresholds:
        return {**settings, "memory": shipping.memory_thresholds(), "source": "client"}
    kinds = collections.Counter(
        json.dumps(t, sort_keys=True) for t in thresholds.values()
    )
    settings["memory"] = json.loads(kinds.most_common(1)[0][0])
    if len(kinds) > 1:
        settings["memory_by_worker"] = thresholds
    return {**settings, "source": "workers"}


@contextlib.contextmanager
def record(
    name: str = "run",
    client: Client | None = None,
    store: Store | str | os.PathLike[str] | None = None,
) -> Iterator[Run]:
    """Record the block as one run; the same as ``%%dask_record`` in a notebook.

    Parameters
    ----------
    name
        The run's name, shown in listings.
    client
        The Dask client whose cluster to record; default: the current client.
    store
        A :class:`Store`, a path, or None for the configured default store.

    Yields
    ------
    Run
        The run; after the block it is refreshed with the final status and counts.

    Raises
    ------
    NoClientError
        When no client was given and none exists.

    A store that cannot be opened or written never stops the block: it runs,
    one warning says why, and a :class:`NotRecorded` is yielded instead.
    """
    the_client = resolve_client(client)
    unrecorded: NotRecorded | None
    try:
        recording = begin(name, the_client, store)
    except STORE_ERRORS as e:
        unrecorded = NotRecorded(name, str(e))
        logger.warning("dask-observe: %s", unrecorded.why_line())
    else:
        unrecorded = None
    if unrecorded is not None:  # outside the except: the block's errors are its own
        yield unrecorded  # type: ignore[misc]  # a Run that says why it is not one
        return
    assert recording.run is not None
    status = "failed"
    try:
        yield recording.run
        status = "finished"
    finally:
        end(recording, status)


#: What a store that cannot be used raises: it never stops the user's block.
STORE_ERRORS = (StoreError, sqlite3.Error)


def begin(
    name: str,
    client: Client,
    store: Store | str | os.PathLike[str] | None,
    **options: Any,
) -> Recording:
    """A started recording into ``store`` (a Store, a path, or None for the
    default), for ``record()`` and ``%%dask_record``. A store opened here
    stays open: the yielded Run reads through it afterwards.

    Raises
    ------
    StoreError, sqlite3.Error
        When the store cannot be opened or written (see :data:`STORE_ERRORS`).
    """
    from dask_observe.config import default_store_path

    opened = None
    if not isinstance(store, Store):
        store = opened = Store(default_store_path() if store is None else store)
    recording = Recording(name, client, store, **options)
    try:
        recording.start()
    except BaseException:
        if opened is not None:
            opened.close()
        raise
    return recording


def end(recording: Recording, status: str) -> Run | None:
    """Stop ``recording`` as ``status``; a store that fails now is one
    warning, never an error in the user's block (which may be raising its
    own). The run, or None when its end could not be stored."""
    try:
        return recording.stop(status)
    except STORE_ERRORS as e:
        logger.warning(
            "dask-observe: the end of run %r could not be stored (%s); the "
            "block ran, and what was stored before is kept",
            recording.name,
            e,
        )
        return None


class NotRecorded:
    """What ``record()`` yields when the store could not be used: the block
    ran, and nothing of it was kept. Anything asked of it says why."""

    id = None
    status = "not recorded"

    def __init__(self, name: str, why: str) -> None:
        self.name = name
        self.why = why

    def why_line(self) -> str:
        """One line for a warning: which run, and why."""
        return f"run {self.name!r} was not recorded (the block ran): {self.why}"

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise StoreError(self.why_line())

    def __repr__(self) -> str:
        return f"<dask_observe.NotRecorded {self.name!r}: {self.why}>"

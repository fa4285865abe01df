"""What a recorder copies: the scheduler's records beyond the store's cursor,
redacted, into the store (and the live export), each in one transaction with
the cursor that follows it. Asked periodically by the recorder's thread, and
by a run's end, whose reply may carry them (``end_run``).

A part of :class:`~dask_observe.recording.recorder.Recorder`, which decides
when to copy and what the scheduler's answers mean.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from dask_observe import redact
from dask_observe.capture import wire
from dask_observe.capture.wire import VERSION as WIRE_VERSION
from dask_observe.recording import link
from dask_observe.recording.install import CaptureUnavailable

if TYPE_CHECKING:
    from distributed import Client

    from dask_observe.export.live import LiveExport
    from dask_observe.recording.liveness import Liveness
    from dask_observe.store import BaseStore


class Copied(NamedTuple):
    """What a pull did: records stored, and whether the scheduler said it is
    closing (they were then its last: it waits, bounded, for them to be read)."""

    written: int
    closing: bool


#: How recently a worker must have left for a run's end to wait for its nanny.
SETTLE_AFTER_REMOVAL_S = 5.0
#: Records redacted at a time (a pull brings up to 10,000).
REDACT_SLICE = 500


def _redacted(
    redactor: redact.Redactor, raw: list[tuple[int, Any]]
) -> list[tuple[int, tuple[Any, ...]]]:
    """Pulled ``(number, record)`` pairs, redacted, as plain tuples: read by
    name (``wire.typed``) a slice at a time, so that each slice's named tuples
    are gone before the next. A whole pull's, held until it was stored, lived
    long enough to reach the collector's oldest generation and to bring its
    full collections on (see ``capture.buffer.untracked``;
    benchmarks/README.md, "Garbage a record leaves")."""
    out: list[tuple[int, tuple[Any, ...]]] = []
    for at in range(0, len(raw), REDACT_SLICE):
        named = redactor.records(
            (n, wire.typed(r)) for n, r in raw[at : at + REDACT_SLICE]
        )
        out.extend((n, tuple(r)) for n, r in named)
    return out


class Copier:
    """Copies one cluster's records into one store (see the module)."""

    def __init__(
        self,
        client: Client,
        store: BaseStore,
        cluster: str,
        flush_interval_s: float,
        liveness: Liveness,
    ) -> None:
        self.client = client
        self.store = store
        self.cluster = cluster
        self.flush_interval_s = flush_interval_s
        self.liveness = liveness
        #: What the scheduler plugin said of itself (see ``Recorder.hello``).
        self.hello: dict[str, Any] | None = None
        #: Sends what is copied to an OpenTelemetry collector as it is stored
        #: (``observe.export.otlp.endpoint``), or None.
        self.export: LiveExport | None = None
        #: The redaction of each run that uses the recorder, as it started:
        #: every copy, the periodic ones too, redacts as the newest of them (a
        #: block's ``dask.config.set`` is undone as it returns, before its
        #: run's end has copied the last of its lines). Between runs, as
        #: configured now.
        self.redactors: list[redact.Redactor] = []
        #: The spans of runs whose block has returned, their end not yet read:
        #: each pull names them, so that a scheduler closing meanwhile waits for
        #: their end (the capture's ``before_close``). Added and removed by the
        #: runs' threads: read by copy.
        self.spans_ending: set[str] = set()
        #: When a copy last saw a worker leave (monotonic clock).
        self.worker_removed_at = -float("inf")
        self._lock = threading.Lock()

    def begin_at_recent(self, hello: dict[str, Any] | None) -> None:
        """A store that never read this cluster starts at its last seconds of
        records (what the scheduler's hello says), not its whole buffer: a
        long-lived cluster holds up to 100,000 records, which a new store
        copied before its first run's first line (seconds of it, in a full
        test suite on one cluster). Runs begin now; the live view still shows
        the cluster's recent lines. The drops counted so far are not this
        store's."""
        if not hello or "recent" not in hello:  # a capture that cannot say
            return
        if self.store.telemetry.cursor(self.cluster) != (None, 0):
            return
        self.store.telemetry.ingest(
            self.cluster,
            [],
            read_at=(None, 0),
            instance=hello["instance"],
            last=int(hello["recent"]),
            dropped=hello.get("dropped") or {},
        )

    def call(self, op: str, **kwargs: Any) -> Any:
        """Call one of the capture plugin's handlers on the scheduler (see
        :func:`.link.call`)."""
        return link.call(self.client, self.cluster, op, **kwargs)

    def answers(self) -> bool:
        """Whether the scheduler itself answers (its ``identity``) within
        ``observe.recorder.answer-timeout``: a call that involves its workers
        may wait on one of them instead."""
        try:
            self.call("identity")
        except (OSError, TimeoutError):
            return False
        return True

    def end_run(self, span_id: str, *, stopped: bool) -> dict[str, Any]:
        """The scheduler's ``dask_observe_end`` of a run's span. A capture that
        can (its hello says ``end_pulls``) sends in the same reply, as
        ``pull``, the records beyond the store's cursor, flush included: given
        to :meth:`pull`, they are stored without asking again (one round trip
        less at each run's end, which on a busy scheduler waits its turn on
        the loop)."""
        asked: dict[str, Any] = {"span_id": span_id, "stopped": stopped}
        if (self.hello or {}).get("end_pulls"):
            # Not under the pull lock: waiting for a periodic pull in flight
            # before the end's round trip made a 200-worker run's end 309 ms
            # where it was 120 (measured). What such a pull stores meanwhile,
            # ``pull`` leaves out.
            asked["instance"], asked["cursor"] = self.store.telemetry.cursor(
                self.cluster
            )
        return dict(self.call("dask_observe_end", **asked))

    def _read(self, pulled: dict[str, Any] | None) -> tuple[str | None, int, Any]:
        """The store's cursor, and the scheduler's records beyond it: those of
        ``pulled`` (a pull's reply that came with a run's end), less what a
        pull stored since, when it was read from the instance the store reads
        now; else asked for."""
        instance, cursor = self.store.telemetry.cursor(self.cluster)
        if pulled is not None and pulled.get("instance") == instance:
            records = [(n, r) for n, r in pulled["records"] if n > cursor]
            return instance, cursor, {**pulled, "records": records}
        asked: dict[str, Any] = {"cursor": cursor, "instance": instance}
        ending = self.spans_ending.copy()
        if ending and (self.hello or {}).get("ending"):
            asked["ending"] = sorted(ending)
        with self.liveness.asking():  # the scheduler's own answer, no worker's
            reply = self.call("dask_observe_pull", **asked)
        return instance, cursor, reply

    def pull(
        self,
        pulled: dict[str, Any] | None = None,
        redactor: redact.Redactor | None = None,
    ) -> Copied:
        """Copy every record the scheduler holds beyond the store's cursor,
        starting with those of ``pulled``, the ``pull`` of a run's end's
        reply (:meth:`end_run`), if given; redacted by ``redactor`` (a run's
        end's: as configured when the run started, where its block may have
        configured it), else as the newest run using the recorder started,
        else as configured now."""
        if redactor is None:
            running = tuple(self.redactors)  # a copy: runs come and go meanwhile
            redactor = running[-1] if running else redact.configured()
        written = 0
        with self._lock:
            while True:
                instance, cursor, reply = self._read(pulled)
                pulled = None
                if reply.get("wire") != WIRE_VERSION:  # a scheduler come back changed
                    raise CaptureUnavailable(
                        f"the scheduler's capture speaks wire version "
                        f"{reply.get('wire')}, not {WIRE_VERSION}"
                    )
                # Redacted before the store or a live export sees them.
                records = _redacted(redactor, reply["records"])
                if any(
                    r[0] == "event" and r[2] == "worker-removed" for _, r in records
                ):
                    self.worker_removed_at = time.monotonic()
                # A new scheduler instance numbers from 1 again.
                start = cursor if reply["instance"] == instance else 0
                last = records[-1][0] if records else start
                stored = self.store.telemetry.ingest(
                    self.cluster,
                    records,
                    read_at=(instance, cursor),
                    instance=reply["instance"],
                    last=last,
                    dropped=reply["dropped"],
                )
                if stored is None:  # another writer got there first: read again
                    continue
                if self.export is not None:
                    self.export.offer([record for _, record in records])
                written += len(records)
                if last >= reply["last"]:
                    return Copied(written, bool(reply.get("closing")))

    def settle(self, redactor: redact.Redactor | None = None) -> Copied | None:
        """After a worker left, wait for its nanny's next flush and pull again:
        for a capture that does not have the run's end ask that nanny itself
        (its hello lacks ``gone_nannies``: another dask-observe registered it).

        Such a capture knows only the workers still there; a nanny whose
        worker just died says how it ended (the memory restart, the exit
        signal) with its own flush, one interval later.
        """
        if (self.hello or {}).get("gone_nannies"):
            return None
        if time.monotonic() - self.worker_removed_at >= SETTLE_AFTER_REMOVAL_S:
            return None
        time.sleep(2 * self.flush_interval_s)
        return self.pull(redactor=redactor)

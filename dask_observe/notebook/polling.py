"""The polling behind a ``%%dask_record`` cell's live progress
(:mod:`.progress` draws it).

A thread polls while the cell runs, so the display moves while the kernel's
main thread blocks in ``.compute()``: the scheduler for progress by prefix and
worker memory (one small reply, O(prefixes + workers)), the store for new
warning and error lines and, less often, for flags.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from dask_observe.analysis.figures import is_routine
from dask_observe.api import Store
from dask_observe.diagnose import flag_list
from dask_observe.notebook.progress import Snapshot, View
from dask_observe.recording.liveness import silent_after
from dask_observe.units import text_or_none

if TYPE_CHECKING:
    from dask_observe.api import Run
    from dask_observe.recording.lifecycle import Recording

logger = logging.getLogger(__name__)

#: Seconds between polls: four a second, so that the display still moves at
#: least twice a second when a busy scheduler in the kernel's own process (a
#: LocalCluster) slows each poll down.
POLL_INTERVAL_S = 0.25
#: How often flags are re-judged (they read the run's tasks from the store).
FLAG_INTERVAL_S = 3.0


class LiveProgress:
    """Polls a recording and shows it in a view until stopped.

    Two threads: one polls the scheduler and the newest log lines and updates the
    view (cheap, every POLL_INTERVAL_S); the other judges flags, which reads the
    run's tasks from the store, through its own connection so that neither the
    display nor the recorder waits for it.
    """

    def __init__(self, recording: Recording, view: View) -> None:
        self.recording = recording
        self.view = view
        self.snapshot = Snapshot()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(
                target=self._loop, name="dask-observe-progress", daemon=True
            ),
            threading.Thread(
                target=self._judge, name="dask-observe-flags", daemon=True
            ),
        ]
        self._started = time.monotonic()
        #: When the scheduler last answered a poll (its silence is measured from).
        self._answered = self._started
        #: The scheduler's answer to the poll under way, while it waits.
        self._asking: concurrent.futures.Future[Any] | None = None
        self._silent_after_s = silent_after()
        self._log_seq = 0
        self._rates: collections.deque[tuple[float, int]] = collections.deque(maxlen=12)

    def start(self) -> LiveProgress:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> Snapshot:
        """Stop polling and return the last snapshot."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        return self.snapshot

    def _reader(self) -> Store:
        """A connection of this thread's own: the recorder's writes hold the
        shared one, and a WAL reader need not wait for them."""
        return Store(self.recording.store.path, create=False)

    def _loop(self) -> None:
        failures = 0
        assert self.recording.run is not None
        with self._reader() as store:
            run = store.run(self.recording.run.id)
            while not self._stop.is_set():
                began = time.monotonic()
                try:
                    self.poll(run)
                    self.view.show(self.snapshot)
                    failures = 0
                except Exception as e:  # a display must never break the user's cell
                    failures += 1
                    if failures == 3:
                        logger.warning("dask-observe: live progress stalls: %s", e)
                # A steady cadence: a slow poll (a busy scheduler in this very
                # process) shortens the wait that follows it.
                spent = time.monotonic() - began
                self._stop.wait(max(0.05, POLL_INTERVAL_S - spent))

    def _progress(self, span_id: str) -> dict[str, Any] | None:
        """The scheduler's answer on the run's progress, or None while there
        is none. Asked once and waited for a poll's interval at a time, so
        that the display moves on meanwhile (a call waited out answer-timeout,
        30 s, and the display with it); the scheduler is said silent once the
        question has waited ``silent-after`` or failed."""
        s = self.snapshot
        if self._asking is None:
            self._asking = self.recording.scheduler_ask(
                "dask_observe_progress", span_id=span_id
            )
        asking = self._asking
        concurrent.futures.wait([asking], timeout=POLL_INTERVAL_S)
        if not asking.done():
            waited = time.monotonic() - self._answered
            if waited >= self._silent_after_s:
                s.silent_s = waited
            return None
        self._asking = None
        try:
            reply: dict[str, Any] = asking.result()
        except (OSError, TimeoutError):  # answer-timeout, a lost connection
            s.silent_s = time.monotonic() - self._answered
            return None
        self._answered, s.silent_s = time.monotonic(), 0.0
        return reply

    def poll(self, run: Run) -> None:
        s = self.snapshot
        s.elapsed = time.monotonic() - self._started
        span_id = self.recording.span_id
        if span_id is not None:
            reply = self._progress(span_id)
            if reply is None:  # not answered (yet)
                return
            s.prefixes = reply["prefixes"]
            s.workers = reply["workers"]
            s.activities = reply.get("activities", {})
        _, done, erred = s.totals
        now = time.monotonic()
        self._rates.append((now, done + erred))
        t0, n0 = self._rates[0]
        s.rate = (done + erred - n0) / (now - t0) if now > t0 else 0.0
        for line in run.log_page(self._log_seq, limit=5000, level="warning"):
            self._log_seq = line["seq"]
            if is_routine(line["logger"], line["message"]):
                continue  # a P2P shuffle starting: not the newest problem
            s.n_alerts += 1
            who = text_or_none(line["worker"]) or line["source"]
            s.alerts.append((line["time"], line["level"], who, line["message"]))

    def _judge(self) -> None:
        assert self.recording.run is not None
        run_id = self.recording.run.id
        wait = FLAG_INTERVAL_S
        with self._reader() as store:
            while not self._stop.wait(wait):
                began = time.monotonic()
                try:
                    flags = flag_list(store.run(run_id))
                except Exception as e:
                    logger.warning("dask-observe: cannot judge flags live: %s", e)
                    return
                self.snapshot.flags = [(f.kind, f.severity, f.message) for f in flags]
                # A big run takes a while to judge: never more than a third of
                # the time, so a long cell is not slowed by its own display.
                wait = max(FLAG_INTERVAL_S, 2 * (time.monotonic() - began))

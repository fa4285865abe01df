"""Live OpenTelemetry export: what a recorder stores, sent to a collector while
it records, by a process of its own.

The recorder only appends to a bounded queue (:meth:`LiveExport.offer`). A
thread of the export hands what is queued, once every interval, to a child
process (:mod:`.live_process`) that builds the OpenTelemetry records with the
SDK and sends them. Building and encoding a
task's span costs ~150 µs of Python: in the recording process it held the GIL
that a LocalCluster's scheduler shares with the notebook (a 20,000-task array
job ran x1.19 with live export against x0.97 without); in a process of its own
it holds nobody's.

On the pipes, frames are pickles preceded by their length: batches of records
to the child, and after each batch the running count of what the collector did
not take (with the first reason) back. The child exits when its input ends,
after sending what it was given, so a kernel that exits loses nothing queued
with it.
"""

from __future__ import annotations

import logging
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from dask_observe import config
from dask_observe.export.otlp import SDK_MISSING, SDK_MODULES
from dask_observe.export.otlp_run import flag_event
from dask_observe.units import parse_seconds

if TYPE_CHECKING:
    from dask_observe.diagnose import Flag

logger = logging.getLogger(__name__)

#: How long a closed live export waits for the end of a run still open.
CLOSE_GRACE_S = 30.0
#: How long a closing export waits for its process to send the rest.
EXIT_WAIT_S = 30.0
#: The kinds of record that carry telemetry (the others open and end runs).
DATA_KINDS = frozenset({"log", "task", "metrics", "event"})
_LENGTH = struct.Struct("!I")


def write_frame(stream: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next frame's value; None when the stream ended."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    size = _LENGTH.unpack(head)[0]
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


def _has_sdk() -> None:
    """Raise ImportError without the SDK, as ``otlp`` does, but cheaply: the
    SDK is found, not imported, in the recording process (its process of its
    own imports it)."""
    for name in SDK_MODULES:
        try:
            found = find_spec(name)
        except ImportError:  # its parent package is missing
            found = None
        if found is None:
            raise ImportError(SDK_MISSING)


class LiveExport:
    """Sends a cluster's records to a collector as the recorder stores them.

    A run's first ``max_task_spans`` tasks get a span each; after them, a span
    per task prefix and worker stands for the tasks of each batch sent (a
    million-task run would otherwise send a million spans). A full queue
    drops the newest records and counts them; a collector that does not take
    a batch is reported once (a warning) and counted; the recording goes on
    either way. Each run is a trace: :meth:`begin_run` opens
    its root span, which the tasks of its span go under, and :meth:`end_run`
    closes it with the run's flags.
    """

    def __init__(
        self,
        endpoint: str | None,
        cluster: str,
        *,
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
        interval_s: float = 1.0,
        queue_size: int = 100_000,
        max_task_spans: int = 20_000,
    ) -> None:
        _has_sdk()
        self.endpoint = endpoint
        self.cluster = cluster
        self.queue_size = queue_size
        self.interval_s = interval_s
        #: Records the queue had no room for.
        self.overflowed = 0
        #: Records the collector did not take (as the sending process counts).
        self.not_taken = 0
        #: Records handed to a sending process that was gone.
        self.lost = 0
        self._options: dict[str, Any] = {
            "endpoint": endpoint,
            "cluster": cluster,
            "headers": headers,
            "timeout": timeout,
            "max_task_spans": max_task_spans,
        }
        self._queue: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed_at: float | None = None
        self._open_runs: set[int] = set()
        self._process: subprocess.Popen[bytes] | None = None
        self._listener: threading.Thread | None = None
        self._start_failed = False
        self._warned = False
        self._thread = threading.Thread(
            target=self._loop, name="dask-observe-otlp", daemon=True
        )
        self._thread.start()

    @property
    def dropped(self) -> int:
        """Records lost so far: no room in the queue, or not sent."""
        return self.overflowed + self.not_taken + self.lost

    def offer(self, records: Sequence[Sequence[Any]]) -> None:
        """Queue wire records (``("log", ...)``, ``("task", ...)``...); O(1)
        for the recorder, whatever the collector does."""
        with self._lock:
            room = self.queue_size - len(self._queue)
            if room < len(records):
                self.overflowed += len(records) - max(room, 0)
                records = records[: max(room, 0)]
            self._queue.extend(tuple(r) for r in records)

    def begin_run(
        self, run_id: int, name: str, span_id: str | None, started: float
    ) -> None:
        with self._lock:  # control records are never dropped
            self._queue.append(("begin", run_id, name, span_id, started))

    def end_run(
        self, run_id: int, ended: float, status: str, flags: list[Flag]
    ) -> None:
        events = [flag_event(flag) for flag in flags]
        with self._lock:
            self._queue.append(("end", run_id, ended, status, events))
        if self._closed_at is not None:  # the last word: send it now
            self._wake.set()

    def close(self, timeout: float = 30.0) -> None:
        """Send what is queued and stop, waiting at most ``timeout`` (0: not at
        all). A run still open is waited for (its :meth:`end_run` comes after
        the recorder stops) up to CLOSE_GRACE_S."""
        self._closed_at = time.monotonic()
        self._wake.set()
        if timeout > 0:
            self._thread.join(timeout)

    # -- the export's thread ------------------------------------------------------
    def _loop(self) -> None:
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            try:
                self._hand_over()
            except Exception as e:  # a bug here must not end the export silently
                logger.warning("dask-observe: OpenTelemetry export failed: %s", e)
            with self._lock:
                idle = not self._queue
            closed = self._closed_at
            if (
                closed is not None
                and idle
                and (not self._open_runs or time.monotonic() - closed > CLOSE_GRACE_S)
            ):
                break
        self._finish()

    def _hand_over(self) -> None:
        with self._lock:
            records, self._queue = self._queue, []
        if not records:
            return
        for record in records:
            if record[0] == "begin":
                self._open_runs.add(record[1])
            elif record[0] == "end":
                self._open_runs.discard(record[1])
        process = self._process
        if process is None and not self._start_failed:
            process = self._start()
        try:
            if process is None or process.stdin is None:
                raise BrokenPipeError("no process to send with")
            write_frame(process.stdin, records)
        except OSError as e:  # it died (or never started): these are lost
            self.lost += sum(1 for r in records if r[0] in DATA_KINDS)
            self._warn_once(f"its process ended: {e}")

    def _start(self) -> subprocess.Popen[bytes] | None:
        """The sending process, started at the first records (not when the
        recording starts: starting stays free)."""
        # Where this dask_observe lives, last on the path (whatever the
        # working directory; never ahead of the standard library).
        here = str(Path(__file__).resolve().parents[2])
        code = (
            f"import sys; sys.path.append({here!r}); "
            "from dask_observe.export.live_process import main; main()"
        )
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-c", code],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                # Not in the kernel's process group: interrupting a cell
                # (SIGINT to the group) must not stop the export.
                start_new_session=True,
            )
            assert self._process.stdin is not None
            write_frame(self._process.stdin, self._options)
        except OSError as e:  # not tried again: what comes is counted lost
            self._start_failed = True
            self._warn_once(f"cannot start the export's process: {e}")
            return None
        self._listener = threading.Thread(
            target=self._listen, name="dask-observe-otlp-replies", daemon=True
        )
        self._listener.start()
        return self._process

    def _listen(self) -> None:
        """Take the sending process's counts as they come."""
        assert self._process is not None and self._process.stdout is not None
        while (reply := read_frame(self._process.stdout)) is not None:
            not_taken, error = reply
            self.not_taken = not_taken
            if not_taken:
                self._warn_once(str(error))

    def _warn_once(self, why: str) -> None:
        if self._warned:
            return
        self._warned = True
        logger.warning(
            "dask-observe: the OpenTelemetry collector did not take what was "
            "sent (%s); the recording goes on, and what is lost is counted",
            why,
        )

    def _finish(self) -> None:
        """End the sending process's input; it sends the rest and exits."""
        process = self._process
        if process is None:
            return
        try:
            assert process.stdin is not None
            process.stdin.close()
            process.wait(EXIT_WAIT_S)
        except (OSError, subprocess.TimeoutExpired):
            return  # it ends by itself once its sends time out
        if self._listener is not None:
            self._listener.join(1.0)


def live_from_config(cluster: str) -> LiveExport | None:
    """The live export ``observe.export.otlp`` asks for, or None (no endpoint)."""
    endpoint = config.get("export.otlp.endpoint")
    if not endpoint:
        return None
    return LiveExport(
        str(endpoint),
        cluster,
        headers=config.get("export.otlp.headers") or None,
        timeout=parse_seconds(config.get("export.otlp.timeout") or 10),
        interval_s=parse_seconds(config.get("export.otlp.interval") or 1),
        queue_size=int(config.get("export.otlp.queue-size") or 100_000),
        max_task_spans=int(config.get("export.otlp.max-task-spans") or 20_000),
    )

"""A run recorded with ``native=True``: py-spy records each worker process
while the run lasts (the capture's ``nativeprofile``); at its end, what it
recorded is given to the run's tasks (``analysis.native``) and stored as one
``native-profile`` event, with why a worker could not, if one could not."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from dask_observe.analysis.native import attribute, summarize
from dask_observe.capture.wire import EventRecord

if TYPE_CHECKING:
    from distributed import Client

    from dask_observe.redact import Redactor
    from dask_observe.store import RunData

logger = logging.getLogger("dask_observe")

#: Samples a second asked of py-spy by default: each pauses the process.
DEFAULT_RATE = 10


def configured_rate() -> int:
    import dask.config

    return int(dask.config.get("observe.profile.native-rate", DEFAULT_RATE))


class NativeRun:
    """The native profile of one run, from its start to its end."""

    def __init__(self, client: Client, rate: int) -> None:
        from dask_observe.recording import plugins

        self.rate = rate
        self.token = uuid.uuid4().hex
        #: Each worker's answer to the start: its process (host, pid), and
        #: whether it records, shares its process's recording, or why not.
        self.started = plugins.native_profile(client, self.token, rate)

    def end(
        self, client: Client, run: RunData, redact: Redactor, now: float
    ) -> EventRecord:
        """Stop every recording and say what they found, as an event."""
        from dask_observe.recording import plugins

        answers = plugins.native_profile(client, self.token, None)
        reasons: dict[str, list[str]] = {}
        for worker, said in [*self.started.items(), *answers.items()]:
            if said.get("reason"):
                reasons.setdefault(str(said["reason"]), []).append(worker)
        process = {
            w: (said.get("host"), said.get("pid")) for w, said in self.started.items()
        }
        recorded = []
        dropped = 0
        for worker, said in answers.items():
            if "threads" not in said:
                continue
            same = [w for w, p in process.items() if p == process.get(worker)]
            recorded.append((same or [worker], said))
            dropped += int(said.get("dropped") or 0)
        tasks = run.tasks(epoch=True)
        rows = zip(
            tasks["worker"], tasks["thread"].fillna(0).astype("int64"),
            tasks["start"], tasks["stop"], tasks["prefix"], strict=True,
        )  # fmt: skip
        by_prefix = attribute(recorded, (r for r in rows if r[1]))
        data: dict[str, Any] = {
            "rate": self.rate,
            "processes": len(recorded),
            "dropped": dropped,
            "prefixes": {
                p: summarize(paths) for p, paths in by_prefix.items() if paths
            },
        }
        if reasons:
            data["unavailable"] = reasons
            for reason, workers in reasons.items():
                logger.warning(
                    "dask-observe: native profile unavailable on %d worker(s): %s",
                    len(workers),
                    reason,
                )
        # Frames hold file names, as a profile does: redacted the same way.
        return EventRecord("event", now, "native-profile", None, redact.data(data))

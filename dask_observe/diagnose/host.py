"""Whether a host was too busy to run its processes: the cause the time-based
flags name instead of the user's code when it was.

The capture ships a ``host-load`` event a second per process whose host is
under CPU pressure (``capture.hostload``): the share of the second during which
some runnable thread of the host waited for a core, the threads runnable, the
cores. A stall of a worker's event loop, or GIL contention measured in it,
while its host was oversubscribed says more about the host (other processes,
more threads than cores) than about the tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from dask_observe.capture.events import HostSample
from dask_observe.diagnose.base import Facts, evidence

if TYPE_CHECKING:
    import numpy as np

    from dask_observe.diagnose.base import Context

#: The key of the scheduler's own samples (its stalls are judged by them).
SCHEDULER = "the scheduler's host"


def address_host(address: str | None) -> str:
    """The host part of a worker's address (``tcp://10.0.0.5:40331`` ->
    ``10.0.0.5``, ``inproc://10.0.0.5/812/3`` -> ``10.0.0.5``); the
    scheduler's key for None. Samples and stalls are matched by it."""
    if not address:
        return SCHEDULER
    rest = address.split("://", 1)[-1].split("/", 1)[0]
    if rest.startswith("["):  # [::1]:port
        return rest[1:].split("]", 1)[0]
    return rest.rsplit(":", 1)[0] if ":" in rest else rest


@dataclass(frozen=True)
class Busy:
    """A second (``start`` to ``end``) during which ``host`` was oversubscribed."""

    start: float
    end: float
    host: str
    worker: str | None
    waiting: float | None
    runnable: int | None
    cores: int

    def describe(self) -> str:
        parts = []
        if self.waiting is not None:
            parts.append(f"threads waited for a core {self.waiting:.0%} of the time")
        if self.runnable is not None:
            parts.append(f"{self.runnable} threads runnable on {self.cores} cores")
        host = self.host if self.host == SCHEDULER else f"host {self.host}"
        return f"{host} oversubscribed: " + "; ".join(parts)


class BusyHosts(Facts):
    """The run's seconds of busy hosts, by host, read once for every flag.

    The scheduler's samples are filed under its address's host: a worker on
    the scheduler's machine (a LocalCluster's, all of them) is judged by them
    too, which matters in a worker's first second, before its own sampler has
    a sample (it begins with the recording; a stall there went unexplained)."""

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        cluster = ctx.run.cluster
        self.scheduler = address_host(cluster) if cluster else SCHEDULER

    def host(self, worker: str | None) -> str:
        """The host of ``worker``'s samples and stalls (None: the scheduler)."""
        return address_host(worker) if worker else self.scheduler

    @cached_property
    def busy(self) -> dict[str, list[Busy]]:
        waiting_at = self.ctx.number("host-load.waiting")
        per_core = self.ctx.number("host-load.runnable-per-core")
        found: dict[str, list[Busy]] = {}
        for t, _, worker, data in self.ctx.events("host-load"):
            sample = HostSample.from_data(data)
            if sample is None or sample.run:
                # (a run's whole window, for comparisons: a stall is judged
                # against the second it happened in, not the run's average)
                continue
            named = worker if isinstance(worker, str) and worker else None
            waiting, runnable, cores = sample.waiting, sample.runnable, sample.cores
            if waiting is not None:
                oversubscribed = waiting >= waiting_at
            else:
                oversubscribed = runnable is not None and runnable > per_core * cores
            if not oversubscribed:
                continue
            host = self.host(named)
            start = float(t) - sample.seconds
            found.setdefault(host, []).append(
                Busy(start, float(t), host, named, waiting, runnable, cores)
            )
        return found

    def during(self, worker: str | None, since: float, until: float) -> Busy | None:
        """The busiest second of ``worker``'s host (the scheduler's: None)
        that overlaps ``since`` to ``until``, if its host was busy then."""
        seconds = [
            b
            for b in self.busy.get(self.host(worker), ())
            if b.start < until and b.end > since
        ]
        return max(seconds, key=lambda b: b.waiting or 0.0, default=None)

    def overlapping(
        self, workers: np.ndarray, since: np.ndarray, until: np.ndarray
    ) -> np.ndarray:
        """Whether each ``workers[i]``'s host was busy some time between
        ``since[i]`` and ``until[i]``: as ``during`` finds, for all of a run's
        samples at once rather than a call each."""
        import numpy as np

        found = np.zeros(len(until), dtype=bool)
        host_of = {
            w: self.host(w if isinstance(w, str) and w else None) for w in set(workers)
        }
        hosts = np.array([host_of[w] for w in workers], dtype=object)
        for host, seconds in self.busy.items():
            mine = hosts == host
            if not mine.any():
                continue
            starts = np.array([b.start for b in seconds])
            order = np.argsort(starts, kind="stable")
            # ends[i]: the latest end of the i + 1 seconds that started first.
            ends = np.maximum.accumulate(np.array([b.end for b in seconds])[order])
            began = np.searchsorted(starts[order], until[mine], side="left")
            latest = ends[np.maximum(began - 1, 0)]
            found[mine] = (began > 0) & (latest > since[mine])
        return found

    def evidence(self, seconds: list[Busy]) -> list[dict[str, Any]]:
        """One line per host: its busiest second among ``seconds``."""
        busiest: dict[str, Busy] = {}
        for b in seconds:
            if b.host not in busiest or (b.waiting or 0) > (
                busiest[b.host].waiting or 0
            ):
                busiest[b.host] = b
        return [evidence(b.end, b.worker, b.describe()) for b in busiest.values()]


#: What a flag caused by a busy host advises (about the host, not the code).
HOST_ADVICE = (
    "The host, not the tasks' code: run fewer workers or threads per machine "
    "(threads in all at most its cores), or move other CPU-heavy processes off "
    "it; record again on a quiet host to judge the code itself."
)

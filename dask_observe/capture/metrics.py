"""Metrics sampled from the scheduler's view of workers and of the cluster."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distributed import Scheduler
    from distributed.scheduler import WorkerState


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


#: The readings distributed's system monitor takes over the time since its
#: last update (``SystemMonitor.update``, every 0.5 s by default). A heartbeat
#: sends the newest one, so two heartbeats within one update send the same
#: reading: the gil-contention rule weighs each sample by the seconds it
#: stands for, and a reading stored twice counted twice (pandas' one high
#: second made the two a busy host's flag needs).
MONITOR_READINGS = frozenset(
    {
        "cpu",
        "gil_contention",
        "net_read_bps",
        "net_write_bps",
        "disk_read_bps",
        "disk_write_bps",
    }
)


def monitor_time(ws: WorkerState) -> float | None:
    """When the worker's system monitor took the readings its last heartbeat
    sent (None where a worker does not say)."""
    return _number(ws.metrics.get("time"))


def worker_metrics(ws: WorkerState) -> dict[str, float]:
    """One worker's memory, CPU, tasks, transfer and event loop, from its heartbeat."""
    memory = ws.memory
    m = ws.metrics
    values: dict[str, Any] = {
        "memory_managed": memory.managed,
        "memory_unmanaged": memory.unmanaged,
        "memory_spilled": memory.spilled,
        "memory_process": memory.process,
        "memory_limit": ws.memory_limit,
        "nthreads": ws.nthreads,
        "tasks_processing": len(ws.processing),
        "tasks_executing": m.get("task_counts", {}).get("executing"),
        "tasks_ready": m.get("task_counts", {}).get("ready"),
        "cpu": m.get("cpu"),
        "bandwidth": m.get("bandwidth", {}).get("total"),
        "transfer_incoming_bytes": m.get("transfer", {}).get("incoming_bytes"),
        "transfer_outgoing_bytes": m.get("transfer", {}).get("outgoing_bytes"),
        "net_read_bps": m.get("host_net_io", {}).get("read_bps"),
        "net_write_bps": m.get("host_net_io", {}).get("write_bps"),
        "disk_read_bps": m.get("host_disk_io", {}).get("read_bps"),
        "disk_write_bps": m.get("host_disk_io", {}).get("write_bps"),
        "event_loop_interval": m.get("event_loop_interval"),
        "gil_contention": m.get("gil_contention"),
    }
    return {
        k: v for k, v in ((k, _number(v)) for k, v in values.items()) if v is not None
    }


class WorkerSamples:
    """Which workers' metrics a sample takes: what changed since the last.

    A worker's heartbeat brings everything but its task count, and distributed
    spaces heartbeats by cluster size (0.5 s up to 10 workers, 2 s at 200,
    11 s at 2,000: no more than ~200 a second in all). Sampling every worker
    every second stored each heartbeat again until the next one came: at 200
    workers half the rows were repeats, at 2,000 ten of eleven. So a worker
    gets its whole row when a heartbeat came since its last, and only
    ``tasks_processing`` (which the scheduler counts itself) when just that
    changed; readers hold a worker's value until its next sample. A heartbeat
    that repeats the system monitor's readings (``MONITOR_READINGS``) sends
    the row without them: each reading is stored once.
    """

    def __init__(self) -> None:
        #: Per worker address: (heartbeat time, tasks processing, monitor
        #: time) last sampled.
        self.last: dict[str, tuple[float, int, float | None]] = {}

    def changed(
        self, workers: Iterable[WorkerState], every: bool = False
    ) -> Iterator[tuple[str, dict[str, float]]]:
        """(address, values) of each worker with news since its last sample;
        ``every``: each worker's whole row (a run's start is marked so, so
        that a run shorter than a heartbeat has every worker's)."""
        for ws in workers:
            seen, processing = ws.last_seen, len(ws.processing)
            monitored = monitor_time(ws)
            before = self.last.get(ws.address)
            if every or before is None or before[0] != seen:
                values = worker_metrics(ws)
                # A repeat of the monitor's last readings: not again.
                repeated = before is not None and before[2] == monitored
                if repeated and not every and monitored is not None:
                    values = {
                        k: v for k, v in values.items() if k not in MONITOR_READINGS
                    }
            elif before[1] != processing:
                values = {"tasks_processing": float(processing)}
            else:
                continue
            self.last[ws.address] = (seen, processing, monitored)
            yield ws.address, values

    def forget(self, address: str) -> None:
        """A worker left: a worker at its address later is a new one."""
        self.last.pop(address, None)


def cluster_metrics(scheduler: Scheduler) -> dict[str, float]:
    """Workers, threads, memory and tasks by state, summed over the cluster."""
    workers = scheduler.workers.values()
    values: dict[str, float] = {
        "workers": len(workers),
        "nthreads": sum(ws.nthreads for ws in workers),
        "memory_managed": sum(ws.memory.managed for ws in workers),
        "memory_unmanaged": sum(ws.memory.unmanaged for ws in workers),
        "memory_spilled": sum(ws.memory.spilled for ws in workers),
        "memory_limit": sum(ws.memory_limit or 0 for ws in workers),
    }
    # What a cluster-wide sparkline plots: mean CPU, and network bytes/s of the
    # hosts. Every worker reports its whole host's counters, so a host counts
    # once (its largest report), however many workers it runs.
    cpus = [c for ws in workers if isinstance(c := ws.metrics.get("cpu"), int | float)]
    if cpus:
        values["cpu"] = sum(cpus) / len(cpus)
    hosts: dict[str, float] = {}
    for ws in workers:
        io = ws.metrics.get("host_net_io") or {}
        rate = (io.get("read_bps") or 0) + (io.get("write_bps") or 0)
        hosts[ws.host] = max(hosts.get(ws.host, 0.0), float(rate))
    if hosts:
        values["net_bps"] = sum(hosts.values())
    # Per prefix, not per task: O(prefixes) however many tasks the graph holds.
    for prefix in scheduler.task_prefixes.values():
        for state, count in prefix.states.items():
            if count and state != "forgotten":
                key = f"tasks_{state}"
                values[key] = values.get(key, 0) + count
    values.setdefault("tasks_processing", 0)  # a chart draws idle time too
    return values

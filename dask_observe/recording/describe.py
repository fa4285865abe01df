"""What a cluster's workers say of themselves: memory thresholds, threads and
limits, their environment (``plugins.flush_shipped``), asked once a worker
while a recorder runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dask_observe.recording import link

if TYPE_CHECKING:
    from distributed import Client


class Workers:
    """The descriptions of one cluster's workers, by address, as a recorder
    collects them (none for a cluster without the capture: ``enabled``)."""

    def __init__(self, client: Client, cluster: str) -> None:
        self.client = client
        self.cluster = cluster
        #: False where the capture plugins do not run (a partial recording).
        self.enabled = True
        self._described: dict[str, dict[str, Any]] = {}

    def flush(self) -> dict[str, dict[str, Any]]:
        """Have every worker and nanny ship what it holds, without waiting for
        their next flush or heartbeat: a run's last lines and fine performance
        metrics are then on the scheduler. Returns what each worker says of
        itself."""
        from dask_observe.recording import plugins

        if not self.enabled:
            return {}
        found = plugins.flush(self.client)
        self._described.update(found)
        return found

    def describe(self, addresses: list[str]) -> dict[str, dict[str, Any]]:
        """What these workers say of themselves. Asked once a worker: it does
        not change while the worker lives, and a run's end should not wait for
        it each time."""
        from dask_observe.recording import plugins

        unknown = [a for a in addresses if a not in self._described]
        if unknown and self.enabled:
            self._described.update(plugins.flush(self.client, unknown, ship=False))
        return {a: self._described[a] for a in addresses if a in self._described}

    def describe_cluster(self) -> dict[str, dict[str, Any]]:
        """What the cluster's workers of now say of themselves: the
        scheduler's list of them is read (in this process where it runs
        here), only workers not asked before are."""
        if not self.enabled:
            return {}
        scheduler = link.local_scheduler(self.client, self.cluster)
        if scheduler is not None:
            addresses = list(scheduler.workers)
        else:
            addresses = list(self.client.scheduler_info(n_workers=-1)["workers"])
        return self.describe(addresses)

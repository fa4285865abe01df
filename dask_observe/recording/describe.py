"""What a cluster's workers say of themselves: memory thresholds, threads and
limits, their environment (``plugins.flush_shipped``), asked once a worker
while a recorder runs."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from dask_observe.recording import link

if TYPE_CHECKING:
    from distributed import Client

logger = logging.getLogger(__name__)

#: How long a run's end waits for workers new to the recorder to describe
#: themselves. A worker that left meanwhile (a ``client.restart()`` right
#: after the block) is not answered for until distributed's connect timeout
#: (the run's end took 30 s); one that answers does so in milliseconds.
ASK_S = 5.0


class Workers:
    """The descriptions of one cluster's workers, by address, as a recorder
    collects them (none for a cluster without the capture: ``enabled``)."""

    def __init__(self, client: Client, cluster: str) -> None:
        self.client = client
        self.cluster = cluster
        #: False where the capture plugins do not run (a partial recording).
        self.enabled = True
        self._described: dict[str, dict[str, Any]] = {}
        #: A description under way (``ask_early``), which the others wait for.
        self._asking: threading.Thread | None = None

    def flush(self) -> dict[str, dict[str, Any]]:
        """Have every worker and nanny ship what it holds, without waiting for
        their next flush or heartbeat: a run's last lines and fine performance
        metrics are then on the scheduler. Returns what each worker says of
        itself."""
        from dask_observe.recording import plugins

        if not self.enabled:
            return {}
        found = plugins.flush(self.client, timeout=link.answer_timeout())
        self._described.update(found)
        return found

    def describe(self, addresses: list[str]) -> dict[str, dict[str, Any]]:
        """What these workers say of themselves. Asked once a worker: it does
        not change while the worker lives, and a run's end should not wait for
        it each time."""
        from dask_observe.recording import plugins

        self._wait_for_early()
        unknown = [a for a in addresses if a not in self._described]
        if unknown and self.enabled:
            try:
                self._described.update(
                    plugins.flush(self.client, unknown, ship=False, timeout=ASK_S)
                )
            except (OSError, TimeoutError) as e:  # gone meanwhile: undescribed
                logger.debug("dask-observe: workers not described: %s", e)
        return {a: self._described[a] for a in addresses if a in self._described}

    def ask_early(self) -> None:
        """Ask the cluster's workers to describe themselves now, in a thread,
        if none has yet (a recorder's first run) or, where the scheduler runs
        in this process, one of them has not (workers a restart started): the
        run's end then waits only for what is left of it, not for the whole
        round trip (a ``Client.run`` and each worker's first read of its
        package metadata, ~10 ms of a first recorded one-task block), nor
        asks workers that may be gone by then."""
        if self._asking is not None or not self.enabled:
            return
        if self._described:
            scheduler = link.local_scheduler(self.client, self.cluster)
            if scheduler is None or set(scheduler.workers) <= self._described.keys():
                return

        def ask() -> None:
            try:
                self.describe_cluster()
            except Exception as e:  # the run's end asks again
                logger.debug("dask-observe: workers not described early: %s", e)

        self._asking = threading.Thread(
            target=ask, name="dask-observe-describe", daemon=True
        )
        self._asking.start()

    def _wait_for_early(self) -> None:
        asking = self._asking
        if asking is not None and asking is not threading.current_thread():
            asking.join()
            self._asking = None

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
            timeout = link.answer_timeout()
            identity = link.rpc(self.client, "identity", timeout, n_workers=-1)
            addresses = list(identity["workers"])
        return self.describe(addresses)

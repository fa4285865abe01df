"""The store's clusters (which recorders watch, which are live) and the
telemetry pulled from them, ingested in batches with their cursor."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from dask_observe.store import queries
from dask_observe.store.connection import StoreConnection

#: How recently a recorder must have reported a cluster for it to count as alive
#: (recorders report every few seconds while they run).
CLUSTER_ALIVE_S = 15.0
#: How long a process that stopped watching a cluster is remembered (which
#: notebooks a gone cluster was used in): a row a kernel, not a year of them.
CLIENT_KEPT_S = 7 * 24 * 3600.0


class ClientOf(NamedTuple):
    """A process whose client watches a cluster: its host and pid, and where
    it was made (a notebook's path in Jupyter, else the program)."""

    host: str
    pid: int
    made_in: str


def cluster_id_of(address: str) -> str:
    """A short, stable, URL-safe name for a scheduler address."""
    return hashlib.sha256(address.encode()).hexdigest()[:12]


class Telemetry:
    """A store's clusters and the telemetry pulled from them
    (``BaseStore.telemetry``)."""

    def __init__(self, db: StoreConnection) -> None:
        self._db = db

    # -- clusters ----------------------------------------------------------------
    def register_cluster(
        self, address: str, dashboard: str | None, client: ClientOf | None = None
    ) -> str:
        """Record that a recorder watches the scheduler at ``address`` (whose
        dashboard, if any, is served at ``dashboard``), for ``client``'s
        process; return the cluster's id."""
        cluster_id = cluster_id_of(address)
        now = time.time()
        with self._db._transaction() as conn:
            conn.execute(
                "INSERT INTO clusters (id, address, dashboard, first_seen, last_seen)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (address) DO UPDATE"
                " SET dashboard = excluded.dashboard, last_seen = excluded.last_seen,"
                " silent_since = NULL, closed_at = NULL",
                (cluster_id, address, dashboard, now, now),
            )
            if client is not None:
                conn.execute(
                    "DELETE FROM cluster_clients WHERE last_seen < ?",
                    (now - CLIENT_KEPT_S,),
                )
                conn.execute(
                    "INSERT INTO cluster_clients (address, host, pid, made_in,"
                    " last_seen) VALUES (?, ?, ?, ?, ?)"
                    " ON CONFLICT (address, host, pid) DO UPDATE"
                    " SET made_in = excluded.made_in, last_seen = excluded.last_seen,"
                    " closed_at = NULL",
                    (address, *client, now),
                )
        return cluster_id

    def touch_cluster(
        self,
        address: str,
        silent_since: float | None = None,
        client: ClientOf | None = None,
    ) -> None:
        """A recorder still watches this cluster (for ``client``'s process);
        its scheduler has not answered since ``silent_since`` (its last
        answer, epoch seconds), or answers."""
        now = time.time()
        with self._db._transaction() as conn:
            conn.execute(
                "UPDATE clusters SET last_seen = ?, silent_since = ?, closed_at = NULL"
                " WHERE address = ?",
                (now, silent_since, address),
            )
            if client is not None:
                conn.execute(
                    "UPDATE cluster_clients SET last_seen = ?, closed_at = NULL"
                    " WHERE address = ? AND host = ? AND pid = ?",
                    (now, address, client.host, client.pid),
                )

    def close_cluster(
        self, address: str, client: ClientOf | None = None, scheduler: bool = True
    ) -> None:
        """The recorder watching this cluster saw its scheduler close
        (``scheduler``), or ``client``'s process close its client: the
        cluster is not live from now on (until a recorder watches it again),
        unless another process's client still watches it."""
        now = time.time()
        with self._db._transaction() as conn:
            if client is not None:
                conn.execute(
                    "UPDATE cluster_clients SET last_seen = ?, closed_at = ?"
                    " WHERE address = ? AND host = ? AND pid = ?",
                    (now, now, address, client.host, client.pid),
                )
            if (
                not scheduler
                and conn.execute(
                    "SELECT 1 FROM cluster_clients WHERE address = ? AND closed_at IS"
                    " NULL AND last_seen > ? LIMIT 1",
                    (address, now - CLUSTER_ALIVE_S),
                ).fetchone()
            ):
                return  # another process still watches it: live
            conn.execute(
                "UPDATE clusters SET last_seen = ?, closed_at = ? WHERE address = ?",
                (now, now, address),
            )

    def clusters(self) -> list[dict[str, Any]]:
        """Every cluster recorders have watched, most recently seen first, with
        ``alive``: whether a recorder reported it within CLUSTER_ALIVE_S and
        has not seen it close (``closed_at``), ``silent_since``: when its
        scheduler last answered, once it stopped, and ``notebooks``: where the
        clients that watch it were made (while it is live), or the last that
        did."""
        now = time.time()
        made_in: dict[str, list[tuple[bool, float, str]]] = {}
        for row in self._db._query(
            "SELECT address, made_in, last_seen, closed_at FROM cluster_clients"
            " ORDER BY last_seen DESC"
        ):
            open_ = (
                row["closed_at"] is None and now - row["last_seen"] < CLUSTER_ALIVE_S
            )
            made_in.setdefault(row["address"], []).append(
                (open_, float(row["last_seen"]), str(row["made_in"]))
            )
        found = []
        for row in self._db._query("SELECT * FROM clusters ORDER BY last_seen DESC"):
            alive = (
                row["closed_at"] is None and now - row["last_seen"] < CLUSTER_ALIVE_S
            )
            clients = made_in.get(row["address"], [])
            # Live: the processes watching it now; gone: those that watched
            # it last (within a few seconds of the last one).
            newest = max((seen for _, seen, _ in clients), default=0.0)
            shown = [
                where
                for open_, seen, where in clients
                if (open_ if alive else seen >= newest - CLUSTER_ALIVE_S)
            ]
            found.append(
                {**dict(row), "alive": alive, "notebooks": list(dict.fromkeys(shown))}
            )
        return found

    def cluster(self, cluster_id: str) -> dict[str, Any] | None:
        """One cluster by its id, or None."""
        rows = self._db._query("SELECT * FROM clusters WHERE id = ?", (cluster_id,))
        return dict(rows[0]) if rows else None

    # -- telemetry ---------------------------------------------------------------
    def cursor(self, cluster: str) -> tuple[str | None, int]:
        """The scheduler plugin instance and record number the store holds up to."""
        rows = self._db._query(
            "SELECT instance, seq FROM cursors WHERE cluster = ?", (cluster,)
        )
        return (rows[0]["instance"], rows[0]["seq"]) if rows else (None, 0)

    def ingest(
        self,
        cluster: str,
        records: Sequence[tuple[int, Sequence[Any]]],
        *,
        read_at: tuple[str | None, int],
        instance: str,
        last: int,
        dropped: dict[str, int] | None = None,
    ) -> int | None:
        """Write a pulled batch and move the cursor to ``last``, atomically.

        ``read_at`` is the cursor the batch was pulled from. When another writer
        (a thread or process recording the same cluster) has moved the cursor
        since, nothing is written and None is returned: no record is stored twice.
        ``dropped`` is the plugin's running totals of records dropped unread, by
        kind; the store records what is new since the last batch.
        """
        dropped = dropped or {}
        with self._db._transaction(bulk=True) as conn:
            row = conn.execute(
                "SELECT instance, seq, dropped FROM cursors WHERE cluster = ?",
                (cluster,),
            ).fetchone()
            current = (row["instance"], row["seq"]) if row else (None, 0)
            if current != read_at:
                return None
            before = (
                json.loads(row["dropped"])
                if row and row["instance"] == instance
                else {}
            )
            lost = {kind: n - before.get(kind, 0) for kind, n in dropped.items()}
            written = queries.ingest(conn, cluster, records, lost)
            conn.execute(
                "INSERT INTO cursors (cluster, instance, seq, dropped)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (cluster) DO UPDATE"
                " SET instance = excluded.instance, seq = excluded.seq,"
                " dropped = excluded.dropped",
                (cluster, instance, last, json.dumps(dropped)),
            )
        return written

    def append(self, cluster: str, records: Sequence[Sequence[Any]]) -> int:
        """Write records that came by another way than a pull (what a partial
        run read from distributed at its end), numbered after everything
        stored; the cursor of the cluster's pulls is left alone."""
        with self._db._transaction(bulk=True) as conn:
            return queries.ingest(conn, cluster, list(enumerate(records)), {})

"""What the server's routes and stream send, one type per record kind, and
the one function that makes each from what the store holds. The panel's
types are generated from these (``src/data/payloads.ts``, by
``scripts/payload_types.py``; ``tests/test_server_api.py`` fails where it is
not up to date): ``XPayload`` is ``IX`` there, each ``#:`` comment its field's
doc. Times are seconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict

RunStatus = Literal["running", "finished", "failed", "interrupted"]


class RunPayload(TypedDict):
    """A run as the server's `dask-observe/api/runs` route returns it."""

    id: int
    name: str
    status: RunStatus
    started: float
    ended: float | None
    duration_s: float | None
    n_tasks: int
    n_failed: int
    n_flags: int
    cluster: str | None
    #: Why the run was recorded only partially; null when recorded fully.
    partial: str | None
    #: Workers the run lost (died), from its judged flags.
    n_lost: int
    #: Its tasks still running when it ended (counted in n_tasks).
    n_running: int


class ArchiveRunPayload(TypedDict):
    """A run of the team's archive (`observe.archive`), as
    `dask-observe/api/archive/runs` lists it: its id is the archive's."""

    id: str
    name: str
    status: RunStatus
    started: float
    ended: float | None
    duration_s: float | None
    n_tasks: int
    n_failed: int
    n_flags: int
    cluster: str | None
    partial: str | None
    n_lost: int
    n_running: int
    #: The machine that recorded it, and who.
    host: str | None
    user: str | None


class ClusterPayload(TypedDict):
    """A cluster a recorder watched, as `dask-observe/api/clusters` returns it."""

    id: str
    address: str
    dashboard: str | None
    first_seen: float
    last_seen: float
    alive: bool
    #: When its scheduler last answered, once it stopped answering while its
    #: connection held (a frozen scheduler); null while it answers.
    silent_since: float | None
    #: Where the clients that watch it were made: each process's notebook
    #: (its path in Jupyter), or its program; those open while it is live,
    #: else the last ones.
    notebooks: list[str]


class HistoryRunPayload(TypedDict):
    """A run in the history of its name (`dask-observe/api/runs/<id>/history`)."""

    id: int
    started: float
    status: RunStatus
    duration_s: float | None
    #: Bytes the workers held together at most; null when unknown.
    peak_memory: float | None
    #: Its wall time against the runs before: "", "regression" or
    #: "improvement".
    verdict: str
    #: What differs from the previous run's environment, one line each.
    changed: list[str]
    #: Task prefixes whose time a task left their own spread over the
    #: earlier runs: prefix -> "regression" or "improvement".
    prefixes: dict[str, str]
    #: Its peak memory against the runs before, as ``verdict`` its wall time.
    memory_verdict: str


class HistoryPayload(TypedDict):
    """The runs sharing a name, oldest first (the newest 50 at most)."""

    name: str
    runs: list[HistoryRunPayload]


class EvidencePayload(TypedDict):
    """A line of a flag's evidence."""

    time: float
    worker: str | None
    text: str


class FlagPayload(TypedDict):
    """A flag: what a rule raised, why, and what to do."""

    time: float
    kind: str
    severity: Literal["info", "warning", "error"]
    worker: str | None
    message: str
    advice: str
    evidence: list[EvidencePayload]


class LogLinePayload(TypedDict):
    """A log line as the stream sends it."""

    seq: int
    time: float
    level: str
    source: str
    worker: str | None
    logger: str
    message: str
    #: The key of the task whose thread wrote the line (null outside tasks).
    task: str | None
    #: A logging call's extra fields, as a JSON object (null without any).
    fields: str | None


class MetricPayload(TypedDict):
    """A metric sample as the stream sends it: one value of one worker (or of
    the whole cluster when `worker` is null)."""

    seq: int
    time: float
    worker: str | None
    name: str
    value: float


class EventPayload(TypedDict):
    """A lifecycle event as the stream sends it (worker-added,
    worker-removed, ...)."""

    seq: int
    time: float
    kind: str
    worker: str | None
    data: dict[str, Any]


#: The fields of a flag, in the order sent.
FLAG_FIELDS = tuple(FlagPayload.__annotations__)


def flag_payload(flag: Mapping[str, Any]) -> FlagPayload:
    """A flag as sent, from its fields (a judgement's stored JSON, or
    ``dataclasses.asdict`` of a judged ``Flag``): the only serialiser of
    flags, for the REST routes and the stream alike."""
    return FlagPayload(
        time=float(flag["time"]),
        kind=str(flag["kind"]),
        severity=flag["severity"],
        worker=flag.get("worker"),
        message=str(flag["message"]),
        advice=str(flag["advice"]),
        evidence=list(flag.get("evidence") or []),
    )


def run_payload(record: Mapping[str, Any]) -> RunPayload:
    """A run of the listing, from its record (``BaseStore.run_records``):
    the fields the panel shows, not the settings and environment each run
    keeps (a worker's packages, config: kilobytes a run, every poll)."""
    return RunPayload(
        id=int(record["id"]),
        name=str(record["name"]),
        status=record["status"],
        started=float(record["started"]),
        ended=record["ended"],
        duration_s=record["duration_s"],
        n_tasks=int(record["n_tasks"] or 0),
        n_failed=int(record["n_failed"] or 0),
        n_flags=int(record["n_flags"] or 0),
        cluster=record["cluster"],
        partial=record.get("partial"),
        n_lost=int(record.get("n_lost") or 0),
        n_running=int(record.get("n_running") or 0),
    )


def archive_run_payload(record: Mapping[str, Any]) -> ArchiveRunPayload:
    """A run of the archive's listing, from its manifest (``Archive.run_records``)."""
    fields = run_payload({**record, "id": 0})
    return ArchiveRunPayload(
        **{**fields, "id": str(record["uid"])},  # type: ignore[typeddict-item]
        host=record.get("host"),
        user=record.get("user"),
    )


def cluster_payload(record: Mapping[str, Any]) -> ClusterPayload:
    """A cluster, from its record (``BaseStore.clusters``)."""
    return ClusterPayload(
        id=str(record["id"]),
        address=str(record["address"]),
        dashboard=record["dashboard"],
        first_seen=float(record["first_seen"]),
        last_seen=float(record["last_seen"]),
        alive=bool(record["alive"]),
        silent_since=(
            None if record["silent_since"] is None else float(record["silent_since"])
        ),
        notebooks=[str(n) for n in record.get("notebooks", ())],
    )

"""Clusters as users have them: ``dask scheduler`` / ``dask worker`` processes from
another environment, which has dask and distributed but not dask-observe.

``python -m tests.remote`` builds that environment (``scripts/setup.sh`` does, so
the suite finds it ready); a test that finds none builds it itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Where the cluster's environment lives (git ignores it).
CLUSTER_ENV = ROOT / ".cache" / "cluster-env"

#: A cluster environment like the other, with another release of dask and
#: distributed: workers whose versions differ from the client's and the
#: scheduler's, as after an image rebuilt with a newer pin.
OTHER_ENV = ROOT / ".cache" / "cluster-env-other"
#: The first of these that is not this environment's release: a fresh install
#: resolves to whichever the index offers (CI's once resolved to 2026.7.1).
_OTHER_CANDIDATES = ("2026.7.1", "2026.6.0")
OTHER_RELEASE = dict.fromkeys(
    ("dask", "distributed"),
    next(r for r in _OTHER_CANDIDATES if r != version("distributed")),
)

#: What the cluster needs, at this environment's versions: distributed warns
#: when client and cluster differ in these.
#: (numpy and pandas: a cluster without them makes every client warn.)
PINNED = (
    "dask", "distributed", "cloudpickle", "msgpack", "toolz", "tornado", "numpy",
    "pandas",
)  # fmt: skip


def _wanted(releases: dict[str, str]) -> list[str]:
    return [f"{name}=={releases.get(name) or version(name)}" for name in PINNED]


def cluster_env(
    path: Path = CLUSTER_ENV, releases: dict[str, str] | None = None
) -> Path:
    """The cluster's environment at ``path``, built if missing or out of date;
    returns its ``bin`` folder. It never holds dask-observe (checked).
    ``releases``: versions other than this environment's, by package."""
    marker = path / "dask-observe-cluster-env.json"
    wanted = _wanted(releases or {})
    if not (marker.exists() and json.loads(marker.read_text()) == wanted):
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--clear", str(path)], check=True)
        subprocess.run(
            [path / "bin" / "python", "-m", "pip", "install", "--quiet", *wanted],
            check=True,
        )
        marker.write_text(json.dumps(wanted))
    bin_dir = path / "bin"
    found = subprocess.run(
        [bin_dir / "python", "-c", "import dask_observe"],
        cwd="/",  # not the repository, whose folder python would import from
        capture_output=True,
    )
    assert found.returncode != 0, "the cluster environment must not have dask-observe"
    return bin_dir


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ProcessCluster:
    """A scheduler and nanny workers as separate processes, stopped by group."""

    bin_dir: Path
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    tls: TLSFiles | None = None
    port: int = field(default_factory=free_port)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def address(self) -> str:
        scheme = "tls" if self.tls else "tcp"
        return f"{scheme}://127.0.0.1:{self.port}"

    def _tls_args(self) -> list[str]:
        if self.tls is None:
            return []
        return [
            "--tls-ca-file", str(self.tls.ca), "--tls-cert", str(self.tls.cert),
            "--tls-key", str(self.tls.key),
        ]  # fmt: skip

    def _start(
        self,
        name: str,
        *args: str,
        bin_dir: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115
        process = subprocess.Popen(
            [str((bin_dir or self.bin_dir) / "dask"), *args, *self._tls_args()],
            cwd=self.workdir,  # outside the repository: nothing of ours importable
            env={**os.environ, **self.env, **(env or {}), "PYTHONPATH": ""},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def start_scheduler(self, *args: str) -> None:
        self._start(
            "scheduler", "scheduler", "--host", "127.0.0.1", "--port", str(self.port),
            "--dashboard-address", "127.0.0.1:0", *args,
        )  # fmt: skip

    def add_workers(
        self,
        n: int,
        memory_limit: str = "600MiB",
        bin_dir: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """``n`` single-threaded workers, each under a nanny (``bin_dir``: from
        that environment rather than the scheduler's; ``env``: theirs only)."""
        self._start(
            f"workers-{len(self.processes)}", "worker", self.address,
            "--nworkers", str(n), "--nthreads", "1", "--memory-limit", memory_limit,
            "--host", "127.0.0.1", bin_dir=bin_dir, env=env,
        )  # fmt: skip

    def log(self) -> str:
        return "".join(p.read_text() for p in sorted(self.workdir.glob("*.log")))

    def stop(self) -> None:
        """Workers first, then the scheduler, as a cluster manager closes
        down. Signalled all at once, a scheduler that closed at once (as it
        does with no client left) left its workers' nannies waiting out a
        reconnection: 20 s of a test's teardown, now and then."""
        if not self.processes:
            return
        scheduler, workers = self.processes[0], self.processes[1:]
        # Workers whose scheduler is already gone cannot close cleanly: their
        # nannies wait out a reconnection first.
        gone = scheduler.poll() is not None
        self._end(workers, 3 if gone else 20)
        self._end([scheduler], 20)

    @staticmethod
    def _end(processes: list[subprocess.Popen[bytes]], timeout: float) -> None:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def clock_ahead(seconds: float) -> dict[str, str]:
    """The environment of processes whose clock runs ``seconds`` ahead
    (libfaketime, Debian's faketime, which setup.sh installs): a VM after a
    suspend, a container without NTP. Their monotonic clock is left alone
    (timers and timeouts), as such a host's is."""
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    assert found, "no libfaketime: apt-get install faketime (scripts/setup.sh)"
    return {
        "LD_PRELOAD": str(found[0]),
        "FAKETIME": f"{seconds:+g}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


@contextmanager
def process_cluster(
    workdir: Path,
    workers: int = 2,
    *,
    env: dict[str, str] | None = None,
    tls: TLSFiles | None = None,
    scheduler_args: Sequence[str] = (),
    memory_limit: str = "600MiB",
    bin_dir: Path | None = None,
) -> Iterator[ProcessCluster]:
    """A running cluster from the environment without dask-observe (or from
    ``bin_dir``'s)."""
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = ProcessCluster(bin_dir or cluster_env(), workdir, env or {}, tls)
    try:
        cluster.start_scheduler(*scheduler_args)
        if workers:
            cluster.add_workers(workers, memory_limit)
        yield cluster
    finally:
        cluster.stop()


@dataclass(frozen=True)
class TLSFiles:
    """A certificate authority and one certificate it signed, for 127.0.0.1,
    used by scheduler, workers and clients alike (as a small cluster would)."""

    ca: Path
    cert: Path
    key: Path

    @classmethod
    def make(cls, folder: Path) -> TLSFiles:
        folder.mkdir(parents=True, exist_ok=True)
        ca, ca_key = folder / "ca.pem", folder / "ca-key.pem"
        cert, key = folder / "cert.pem", folder / "key.pem"

        def openssl(*args: str | Path) -> None:
            subprocess.run(
                ["openssl", *map(str, args)], check=True, capture_output=True
            )

        openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=dask-observe test CA", "-keyout", ca_key, "-out", ca,
        )  # fmt: skip
        openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", key, "-out", folder / "cert.csr",
        )  # fmt: skip
        (folder / "ext.cnf").write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
        )
        openssl(
            "x509", "-req", "-in", folder / "cert.csr", "-CA", ca, "-CAkey", ca_key,
            "-CAcreateserial", "-days", "2", "-extfile", folder / "ext.cnf",
            "-out", cert,
        )  # fmt: skip
        return cls(ca, cert, key)


if __name__ == "__main__":
    started = time.monotonic()
    print(
        f"cluster environments ready in {cluster_env()} and "
        f"{cluster_env(OTHER_ENV, OTHER_RELEASE)} ({time.monotonic() - started:.0f} s)"
    )

"""Helpers the test modules share (a test module never imports another:
``test_layers``): running dask-observe in other processes and reading what
they stored, waiting on a condition, the Jupyter server of the server tests,
IPython's shell for the magics and an OTLP collector for the exports."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    import dask_observe

    from .otlp import Collector

#: The command-line entry point installed beside this interpreter.
DASK_OBSERVE = str(Path(sys.executable).with_name("dask-observe"))


#: For the Python processes a test starts itself (a recording script, a
#: "machine" of the team's archive): distributed's GIL monitor off. It runs
#: gilknocker's native thread per server, stopped as the server closes; one
#: left running when the process exits aborts it ("FATAL: exception not
#: rethrown", exit 134: 10 of 20 runs of a script that starts a knocker and
#: exits without stopping it). A server's close does not always finish (bokeh
#: refused a scheduler's stop on 3.12), and such processes aborted after their
#: work was done, once in a CI run and once here under load. The suite's own
#: clusters keep it: the gil-contention flag and the event-loop-blocked
#: evidence are tested with it.
NO_GIL_MONITOR = {"DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__GIL__ENABLED": "False"}


def subprocess_env(store_path: Path) -> dict[str, str]:
    """The environment of a separate process that uses the same store, with
    faulthandler on (:func:`exited` makes a hung one say where it stood)."""
    return {
        **os.environ,
        **NO_GIL_MONITOR,
        "PYTHONFAULTHANDLER": "1",
        "DASK_OBSERVE__STORE": str(store_path),
    }


def read_lines(process: subprocess.Popen[str], n: int, timeout: float) -> list[str]:
    """The next ``n`` lines ``process`` prints (fewer where it ends first);
    one that has not said them within ``timeout`` seconds is killed and
    fails its test with what it said, rather than hold the test until
    pytest-timeout, which fails every later test of its process."""
    assert process.stdout is not None
    stdout = process.stdout
    lines: list[str] = []

    def read() -> None:
        for _ in range(n):
            line = stdout.readline()
            if not line:
                return
            lines.append(line)

    reader = threading.Thread(target=read, name="read-lines", daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        process.kill()
        pytest.fail(f"{len(lines)} of {n} lines within {timeout} s: {lines}")
    return lines


def exited(process: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """What ``process`` printed (its stdout and stderr, if piped) once it
    exited. Still running after ``timeout``, it is aborted (faulthandler then
    prints each of its threads' stacks) and the test fails with them: a hang
    names its place instead of a bare timeout."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        out, err = process.communicate(timeout=30)
        pytest.fail(f"still running {timeout} s later; it printed:\n{out}\n{err}")
    return out or "", err or ""


def wait_until(condition: Callable[[], object], what: str, timeout: float = 30) -> None:
    """Return once ``condition()`` is true; fail, saying ``what``, after
    ``timeout`` seconds. For what arrives in its own time (a flush, a sample, a
    process ending), in place of a guessed sleep."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def ended(run: dask_observe.Run) -> dask_observe.Run:
    """``run`` once its end is written: after its block returned, by a thread
    of its own (as a notebook cell's summary line waits for it). For tests
    that read it next through another connection (the server's), which
    shows a run being ended as running."""
    run.summary()
    return run


def stored_lines(store_path: Path, run: int, contains: str) -> int:
    """How many log lines of that run containing that text the store holds
    now (as another process reads it while a recorder writes)."""
    import dask_observe

    with dask_observe.open_store(store_path) as store:
        return len(store.run(run).logs(contains=contains))


def read_in_new_process(store_path: Path, code: str, *args: str) -> Any:
    """Run ``code`` (which prints JSON) in a fresh interpreter on the same store."""
    done = in_new_process(store_path, code, *args, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def in_new_process(
    store_path: Path, code: str, *args: str, timeout: float
) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter on the same store, its output kept."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=subprocess_env(store_path),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


#: Code for ``read_in_new_process`` (the line a task said: ``argv[1]``): what
#: a new process reads of the store's last run, as JSON.
READ_RUN = """
import json, sys, dask_observe
run = dask_observe.open_store().run("last")
logs = run.logs()
tasks = run.tasks()
print(json.dumps({
    "status": run.status,
    "line": logs[logs.message == sys.argv[1]][["source", "worker"]].to_dict("records"),
    "nanny": logs[logs.source == "nanny"][["worker", "message"]].to_dict("records"),
    "tasks": tasks[["key", "status", "worker"]].to_dict("records"),
    "flags": run.flags()[["kind", "worker", "message"]].to_dict("records"),
}))
"""


def dask_observe_cli(store_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``dask-observe`` command with these arguments, on that store, run in
    this process by the function its console script calls (``cli.main``), its
    output and exit code kept as a finished process's.

    A command in a process of its own spends ~0.6 CPU-s importing dask before
    it reads a row: 80 such processes were 51 CPU-s of the suite (2026-11-27).
    What needs a process of its own starts ``DASK_OBSERVE`` itself (see
    ``dask_observe_process``): the demo a newcomer runs, ``record`` until it is
    interrupted, ``logs --follow``, a store's settings read from the
    environment, several processes on one store.
    """
    import dask.config

    from dask_observe.cli import main

    out, err = io.StringIO(), io.StringIO()
    with (
        dask.config.set({"observe.store": str(store_path)}),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse: a usage error (2), --help (0)
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
    return subprocess.CompletedProcess(
        [DASK_OBSERVE, *args], code, out.getvalue(), err.getvalue()
    )


def dask_observe_process(
    store_path: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """The ``dask-observe`` command with these arguments, on that store, as a
    process of its own: as a user runs it from a shell."""
    return subprocess.run(
        [DASK_OBSERVE, *args],
        env=subprocess_env(store_path),
        capture_output=True,
        text=True,
        timeout=120,
    )


#: What a reading command may not import: half a second of its start
#: (pandas and numpy ~0.45 s, dask ~0.18 s) before it reads a row.
HEAVY = ("pandas", "numpy", "dask", "distributed")

_LOADING = (
    "import sys\nfrom dask_observe.cli import main\ncode = main(sys.argv[1:])\n"
    f"print('loaded', *[m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def dask_observe_loading(
    store_path: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """The ``dask-observe`` command in a process of its own, and which of
    the libraries of HEAVY it imported."""
    done = in_new_process(store_path, _LOADING, *args, timeout=120)
    said = [line for line in done.stderr.splitlines() if line.startswith("loaded")]
    return done, said[-1].split()[1:] if said else ["(no answer)"]


@pytest.fixture
def jp_server_config(store_path: Path) -> dict[str, Any]:
    """A Jupyter server (pytest-jupyter) with the extension, reading the test's
    store (asking for ``store_path`` first points the server at it)."""
    return {"ServerApp": {"jpserver_extensions": {"dask_observe": True}}}


@pytest.fixture
def ip() -> Iterator[InteractiveShell]:
    """IPython's test shell (created once per process) with the extension
    loaded, for the magics."""
    from IPython.core.getipython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    start_ipython()
    shell = get_ipython()
    assert shell is not None
    shell.run_line_magic("load_ext", "dask_observe")
    yield shell
    shell.run_line_magic("unload_ext", "dask_observe")


@pytest.fixture
def collector() -> Iterator[Collector]:
    """An OTLP/HTTP collector on a port of its own (``tests/otlp.py``)."""
    from .otlp import Collector

    found = Collector()
    yield found
    found.server.shutdown()

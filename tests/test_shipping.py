"""The capture bundle as a cluster's process imports it: from the bytecode
Python cached for an installed dask-observe whose source is the very source
shipped, else from the shipped source (another release installed, or none: the
remote tests run a cluster without dask-observe)."""

from __future__ import annotations

import json
import subprocess
import sys

IMPORT_A_BUNDLE = """
import importlib, json, sys, zlib
from dask_observe.recording.bundle import import_bundle, local_bundle

shipped = local_bundle()
files = dict(shipped.files)
if sys.argv[1] == "changed":  # what a client of another release ships
    source = zlib.decompress(files["wire"]) + b"\\n# another release\\n"
    files["wire"] = zlib.compress(source)
package = import_bundle(f"{shipped.package}_{sys.argv[1]}", files)
wire = importlib.import_module(f"{package.__name__}.wire")
code = wire.typed.__code__
print(json.dumps({
    "compiled_from": code.co_filename,
    "record": wire.LogRecord.__module__,
}))
"""


def import_a_bundle(how: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_A_BUNDLE, how],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    found: dict[str, object] = json.loads(done.stdout)
    return found


def test_a_bundle_identical_to_the_installed_capture_runs_its_cached_bytecode() -> None:
    found = import_a_bundle("same")
    # The installed file's code (no compile), run as the bundle's own module:
    # its classes and state are the bundle's, not the installed module's.
    assert str(found["compiled_from"]).endswith("dask_observe/capture/wire.py")
    assert str(found["record"]).endswith("_same.wire")


def test_a_bundle_of_another_release_runs_the_source_it_ships() -> None:
    found = import_a_bundle("changed")
    assert str(found["compiled_from"]).startswith("<dask_observe_capture_")
    assert str(found["compiled_from"]).endswith("_changed>/wire.py")
    assert str(found["record"]).endswith("_changed.wire")


def test_a_workers_clock_offset_is_not_moved_by_one_heartbeat_across_a_stall() -> None:
    """distributed's estimate of a worker's clock offset is off by half its
    heartbeat's round trip: one that spanned a stopped process read +2.5 s
    and moved the worker's lines out of their run. The quickest of the last
    heartbeats says; a clock that is off (7 s) is followed once the
    heartbeats before it have aged out."""
    from dask_observe.capture.worker import ClockOffset

    clock = ClockOffset(lambda: 0.3)  # distributed's, before any heartbeat
    assert clock() == 0.3
    for round_trip, estimate in [(0.004, 0.001), (5.0, 2.5), (0.006, 0.002)]:
        clock.observe(round_trip, estimate)
    assert clock() == 0.001
    for _ in range(ClockOffset.OBSERVED):
        clock.observe(0.01, -7.0)
    assert clock() == -7.0

"""A run's end in stages (``api.ends``): who waits for which, in real threads
around a real store."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from dask_observe.api.ends import (
    PendingEnd,
    Stage,
    begin_end,
    pending_end,
    wait_records_stored,
)
from dask_observe.store import BaseStore


@pytest.fixture
def end(tmp_path: Path) -> PendingEnd:
    with BaseStore(tmp_path / "observe.db") as store:
        run_id = store.create_run("ending")
        return begin_end(store, run_id)


def returns_at(wait: Callable[[], object], end: PendingEnd, stage: Stage) -> None:
    """``wait``, in a thread of its own, returns once the finisher reached
    ``stage``, not before (each stage before it is given a moment in which a
    wrong wait would return)."""
    done = threading.Event()

    def waiter() -> None:
        wait()
        done.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    for reached in Stage:
        if reached <= end.stage:
            continue
        if reached > stage:
            break
        assert not done.wait(0.1), f"it returned before {reached.name}"
        end.reach(reached)
    assert done.wait(10), f"it did not return at {stage.name}"
    thread.join()


def test_a_reader_waits_for_the_whole_end(end: PendingEnd) -> None:
    returns_at(end.wait, end, Stage.DONE)


def test_the_cell_whose_report_follows_waits_for_the_verdict_only(
    end: PendingEnd,
) -> None:
    end.report_follows = True
    returns_at(end.wait, end, Stage.JUDGED)
    # Once it was shown, a reader waits for the rest.
    end.shown()
    returns_at(end.wait, end, Stage.DONE)


def test_the_next_run_waits_for_the_records_only(end: PendingEnd) -> None:
    returns_at(end.wait_records_stored, end, Stage.RECORDS_STORED)


def test_the_finisher_never_waits_for_itself(end: PendingEnd) -> None:
    end.thread = threading.current_thread()
    assert end.wait() is False
    end.wait_records_stored()  # at once, or this test would hang
    assert end.stage is Stage.WRITING


def test_a_done_end_is_no_longer_pending_and_stages_never_go_back(
    end: PendingEnd, tmp_path: Path
) -> None:
    with BaseStore(tmp_path / "observe.db") as store:
        run_id = end.key[1]
        assert pending_end(store, run_id) is end
        end.reach(Stage.JUDGED)
        end.reach(Stage.RECORDS_STORED)
        assert end.stage is Stage.JUDGED
        end.reach(Stage.DONE)
        assert pending_end(store, run_id) is None
        wait_records_stored(store, timeout=0)  # nothing left to wait for

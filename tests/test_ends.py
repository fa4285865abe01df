"""A run's end in stages (``api.ends``): who waits for which, in real threads
around a real store."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from distributed import Client

import dask_observe
from dask_observe.api.ends import (
    PendingEnd,
    Stage,
    begin_end,
    pending_end,
    wait_records_stored,
)
from dask_observe.recording import finish
from dask_observe.store import BaseStore


@pytest.fixture
def end(tmp_path: Path) -> Iterator[PendingEnd]:
    with BaseStore(tmp_path / "observe.db") as store:
        run_id = store.create_run("ending")
        end = begin_end(store, run_id)
    yield end
    # Done, as a finisher leaves it: an end left pending in this process
    # would hold up every later run's start and client's close here.
    end.reach(Stage.DONE)


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


def test_a_clients_close_waits_for_its_own_runs_ends_only(
    tmp_path: Path,
    store_path: Path,
    make_client: Callable[..., Client],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client's close waits for the ends of the runs recorded through it
    (their last records come through it), not for another's: an end left
    unfinished in the suite's process held two later tests' closes 30 s
    each. Another run's end stays unfinished throughout; the close must not
    wait the ten minutes allowed."""
    monkeypatch.setattr(finish, "CLOSE_WAIT_S", 600.0)
    client = make_client(n_workers=1, processes=False)
    with dask_observe.record("own", client=client) as run:
        client.submit(abs, -1).result()
    with BaseStore(tmp_path / "other.db") as other:
        another = begin_end(other, other.create_run("another client's"))
    closed = threading.Event()

    def close() -> None:
        client.close()
        closed.set()

    try:
        threading.Thread(target=close, daemon=True).start()
        assert closed.wait(60), "the close waited for another client's run"
        assert another.stage is Stage.WRITING
    finally:
        another.reach(Stage.DONE)
    # Its own run's end was waited for: its records are stored.
    assert run.refresh().status == "finished"

"""When a change between two runs' figures is marked: a regression or an
improvement beyond the floor and beyond noise (see :mod:`.compare`, which puts
the figures side by side, and ``tests/test_verdicts.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dask_observe.analysis.figures import HostLoad

#: Below these, differences are noise: never marked.
FLOORS = {"s": 0.05, "bytes": 2**20, "tasks": 0}

#: The unit of a prefix's seconds a task (judged by the rank test alone).
PER_TASK = "s/task"

#: Figures where more is not worse (shown, never marked).
NEUTRAL = frozenset({"tasks"})


#: Without a measure of its spread, a change must be this large to be marked
#: (time: 1.5x, as users call that much more work a regression; memory: 1.25x).
UNMEASURED = {"s": 0.5, PER_TASK: 0.5, "bytes": 0.25}

#: Task durations count as shifted when their medians differ by this factor
#: too (see ``noise.shift``): identical runs measured 0.73-0.80x per prefix.
SHIFT_RATIO = 1 + UNMEASURED["s"]

#: A prefix with less than this share of the tasks' time is not judged.
MINOR_PREFIX = 0.05

#: A change this large is beyond any noise a run shows (identical runs'
#: wall times differ by 10-30% on a busy machine): it is marked whatever the
#: evidence says, when it is material. Evidence of no change in the work (the
#: same tasks, most of them as fast) is no evidence against a slowdown: an 18x
#: wall time from one slow task among 166 went unmarked when it had the vote.
OBVIOUS = 2.0

#: A time figure is material to a run from this share of its wall time.
MATERIAL_SHARE = 0.05

#: A time that changed by less than this is within a run's jitter (scheduling,
#: warm-up, a loaded machine) whatever its ratio: it is obvious only by
#: evidence.
JITTER_S = 0.25
#: Wall time also holds a run's fixed costs and the client's own time between
#: computations: identical 40-task runs of about half a second read 2x apart
#: on a loaded machine. Unless the tasks' time (all, or a prefix's) changed
#: obviously in the same direction, an obvious wall time must have changed by
#: this much.
WALL_ALONE_S = 1.0


def obvious(unit: str, a: float | None, b: float | None) -> int:
    """+1 / -1 when ``b`` is beyond any noise above / below ``a``: 2x or
    more, or from (to) under the unit's floor, and for time by more than a
    run's jitter; else 0."""
    if a is None or b is None or max(a, b) < FLOORS.get(unit, 0):
        return 0
    larger, smaller = max(a, b), min(a, b)
    if not (smaller < FLOORS.get(unit, 0) or larger >= OBVIOUS * smaller):
        return 0
    if unit == "s" and larger - smaller < JITTER_S:
        return 0
    return 1 if b > a else -1


def material(unit: str, value: float, wall: float | None) -> bool:
    """Whether a figure's value matters to its run: above the unit's floor
    and, for time, ``MATERIAL_SHARE`` of the run's wall time."""
    if value < FLOORS.get(unit, 0):
        return False
    return unit != "s" or not wall or value >= MATERIAL_SHARE * wall


def verdict(
    figure: str,
    unit: str,
    a: float | None,
    b: float | None,
    floor: float,
    evidence: list[int | None],
    walls: tuple[float | None, float | None] = (None, None),
    tasks_moved: frozenset[int] = frozenset(),
) -> str:
    """``regression`` or ``improvement`` when ``b`` differs from ``a`` by more
    than the ``floor`` and by more than noise.

    Beyond noise: an obvious change (:func:`obvious`: 2x or more, or from
    (to) under the unit's floor, "new", "gone") whose larger side is material
    to its run (``walls``: the runs' wall times), and, for wall time, which
    the tasks share (``tasks_moved``: the directions in which the compute
    time or a prefix's time changed obviously) or which exceeds
    ``WALL_ALONE_S``; else when some ``evidence`` (a
    significant shift of task durations, a change in the number of tasks,
    the spread of earlier runs: +1 up, -1 down, 0 no, None unknown) says so
    in the same direction, or, with no evidence at all, beyond
    ``UNMEASURED``."""
    if a is None or b is None or figure in NEUTRAL:
        return ""
    if max(a, b) < FLOORS.get(unit, 0) or max(a, b) == 0:
        return ""
    ratio = b / a if a else float("inf")
    direction = 1 if ratio > 1 else -1
    if abs(ratio - 1) <= floor:
        return ""
    known = [e for e in evidence if e is not None]
    larger, smaller = (b, a) if direction > 0 else (a, b)
    wall = walls[1] if direction > 0 else walls[0]  # the larger side's run
    beyond = unit != PER_TASK and obvious(unit, a, b) == direction
    if beyond and figure == "wall time":
        beyond = direction in tasks_moved or larger - smaller >= WALL_ALONE_S
    if unit == "tasks":  # counts are exact: no noise
        real = True
    elif beyond:
        # Appeared, vanished, or changed beyond any noise: judged by its
        # share of the run where it is large.
        real = material(unit, larger, wall)
    elif known:
        real = direction in known
    else:
        real = abs(ratio - 1) > max(floor, UNMEASURED.get(unit, floor))
    if not real:
        return ""
    return "regression" if direction > 0 else "improvement"


def count_change(a: int, b: int, floor: float) -> int:
    """+1 / -1 when the number of tasks grew / shrank beyond ``floor``."""
    if not a and not b:
        return 0
    ratio = b / a if a else float("inf")
    return 0 if abs(ratio - 1) <= floor else (1 if ratio > 1 else -1)


#: What a time figure says instead of a mark when the host explains it.
BUSIER_HOST = "slower on a busier host"
QUIETER_HOST = "faster on a quieter host"

#: A run's host counts as busier than the other's when its threads waited for
#: a core this much more of the run's time (a share of its wall time).
HOST_BUSIER = 0.15


def on_host(
    mark: str,
    unit: str,
    ratio: float,
    hosts: tuple[HostLoad, HostLoad],
    floor: float,
) -> str:
    """``mark`` of a figure, or what the host says of it: a time that got
    slower on a host busier than a's (``HostLoad.waiting``), by no more than
    that host's crowding explains (a thread on a core shared by ``n`` runs up
    to ``n`` times slower: b's crowding over a's, for the part of the quieter
    run's time that was on a CPU), is "slower on a busier host", not a
    regression of the code; faster on a quieter one likewise. The waiting
    share says only whether: it counts any thread of the host."""
    if unit not in ("s", PER_TASK) or ratio != ratio:
        return mark
    a, b = hosts
    if mark == "regression" and b.waiting - a.waiting >= HOST_BUSIER:
        factor = _explained(b.crowding / a.crowding, a.cpu_share)
        return BUSIER_HOST if ratio <= factor * (1 + floor) else mark
    if mark == "improvement" and a.waiting - b.waiting >= HOST_BUSIER:
        factor = _explained(b.crowding / a.crowding, b.cpu_share)
        return QUIETER_HOST if ratio >= factor / (1 + floor) else mark
    return mark


def _explained(crowding: float, cpu_share: float | None) -> float:
    """The ratio of times a change of ``crowding`` explains, where the
    quieter run's threads spent ``cpu_share`` of their time on a CPU (the
    rest, sleeping or waiting for I/O, no crowding slows)."""
    if cpu_share is None:
        return crowding
    return cpu_share * crowding + (1 - cpu_share)


def far(a: float | None, b: float | None) -> bool:
    """Whether a wall time moved far beyond the runs' own jitter: by
    ``UNMEASURED`` and by ``WALL_ALONE_S`` at least. Such a move is marked on
    evidence that is not the tasks' durations (the work can stay the same
    while the run gets slower: a worker idle, a new flag)."""
    if a is None or b is None or min(a, b) <= 0:
        return False
    larger, smaller = max(a, b), min(a, b)
    return larger / smaller - 1 > UNMEASURED["s"] and larger - smaller >= WALL_ALONE_S


def appeared(
    kinds_a: frozenset[str] | None, kinds_b: frozenset[str] | None
) -> int | None:
    """+1 when run b raised flags a did not (and a none that b did not),
    -1 the other way round, 0 for the same kinds; None unknown."""
    if kinds_a is None or kinds_b is None:
        return None
    new, gone = kinds_b - kinds_a, kinds_a - kinds_b
    if new and not gone:
        return 1
    return -1 if gone and not new else 0


def idler(busy_a: float | None, busy_b: float | None, floor: float) -> int | None:
    """+1 when b kept its threads busy a smaller share of its wall time than
    a did (beyond ``floor``), -1 a larger; None unknown."""
    if not busy_a or not busy_b:
        return None
    ratio = busy_a / busy_b
    return 0 if abs(ratio - 1) <= floor else (1 if ratio > 1 else -1)

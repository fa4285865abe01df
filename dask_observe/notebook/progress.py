"""Live progress under a ``%%dask_record`` cell.

A thread polls while the cell runs, so the display moves while the kernel's main
thread blocks in ``.compute()``: the scheduler for progress by prefix and worker
memory (one small reply, O(prefixes + workers)), the store for new warning and
error lines and, less often, for flags. What the browser gets is aggregated: a few
HTML widgets, each sent only when its text changed, never a message per task.
Without a widget frontend (plain IPython) the same snapshot prints as text.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any, Protocol

from dask_observe.recording.liveness import silent_after
from dask_observe.units import format_bytes, format_seconds, text_or_none

if TYPE_CHECKING:
    from dask_observe.api import Run, Store
    from dask_observe.recording.lifecycle import Recording

logger = logging.getLogger(__name__)

#: Seconds between polls: four a second, so that the display still moves at
#: least twice a second when a busy scheduler in the kernel's own process (a
#: LocalCluster) slows each poll down.
POLL_INTERVAL_S = 0.25
#: How often flags are re-judged (they read the run's tasks from the store).
FLAG_INTERVAL_S = 3.0
#: Prefix bars shown; the rest are summed into one line.
MAX_PREFIXES = 30
#: Worker bars shown.
MAX_WORKERS = 16
#: Newest warning/error lines shown.
MAX_ALERTS = 5


@dataclass
class Snapshot:
    """What the display shows at one moment."""

    elapsed: float = 0.0
    #: prefix -> [total, done, erred]
    prefixes: dict[str, list[int]] = field(default_factory=dict)
    #: worker -> [managed, unmanaged, spilled, limit, processing]
    workers: dict[str, list[float]] = field(default_factory=dict)
    rate: float = 0.0
    n_alerts: int = 0
    alerts: collections.deque[tuple[float, str, str, str]] = field(
        default_factory=lambda: collections.deque(maxlen=MAX_ALERTS)
    )
    #: (kind, severity, message)
    flags: list[tuple[str, str, str]] = field(default_factory=list)
    #: Seconds of the tasks' threads by activity (thread-cpu, thread-noncpu...).
    activities: dict[str, float] = field(default_factory=dict)
    #: Seconds since the scheduler last answered a poll, once one waited
    #: ``observe.recorder.silent-after`` or failed; 0 while it answers.
    silent_s: float = 0.0

    @property
    def totals(self) -> tuple[int, int, int]:
        total = sum(p[0] for p in self.prefixes.values())
        done = sum(p[1] for p in self.prefixes.values())
        erred = sum(p[2] for p in self.prefixes.values())
        return max(total, done + erred), done, erred


class View(Protocol):
    def show(self, snapshot: Snapshot) -> None: ...
    def close(self) -> None: ...


# -- rendering -------------------------------------------------------------------

_BAR = (
    '<div style="display:flex;align-items:center;gap:6px;font-size:12px;'
    'line-height:16px">'
    '<span style="width:180px;overflow:hidden;text-overflow:ellipsis;'
    'white-space:nowrap" title="{title}">{label}</span>'
    '<span style="flex:0 0 260px;height:10px;display:flex;'
    'background:rgba(127,127,127,.18)">{segments}</span>'
    "<span>{text}</span></div>"
)


_RED = "#d62728"
_AMBER = "#c66a00"


def _segment(fraction: float, color: str) -> str:
    width = max(0.0, min(fraction, 1.0)) * 100
    return (
        f'<span style="width:{width:.1f}%;background:{color}"></span>' if width else ""
    )


def header_html(s: Snapshot, name: str) -> str:
    total, done, erred = s.totals
    failed = f', <b style="color:#d62728">{erred:,} failed</b>' if erred else ""
    return (
        f'<div style="font-size:13px"><b>dask-observe</b> recording '
        f"{escape(name)!s}: {done:,} / {total:,} tasks{failed} · "
        f"{format_seconds(s.elapsed)} · {s.rate:,.0f} tasks/s · "
        f"{len(s.workers)} workers{split_text(s.activities)}{silence_html(s)}</div>"
    )


def silence_text(s: Snapshot) -> str:
    """What a display says of a scheduler that stopped answering: the user's
    cell waits on it too, and nothing else would say why."""
    if not s.silent_s:
        return ""
    return f"the scheduler has not answered for {format_seconds(s.silent_s)}"


def silence_html(s: Snapshot) -> str:
    said = silence_text(s)
    return f' · <b style="color:{_RED}">{said}</b>' if said else ""


def split_text(activities: dict[str, float]) -> str:
    """`` · CPU 62% · waiting 35%`` of the tasks' time so far; "" before any."""
    busy = sum(activities.values())
    if busy <= 0:
        return ""
    cpu = activities.get("thread-cpu", 0.0) / busy
    waiting = activities.get("thread-noncpu", 0.0) / busy
    return f" · CPU {cpu:.0%} · waiting {waiting:.0%}"


def prefixes_html(s: Snapshot) -> str:
    rows = sorted(s.prefixes.items(), key=lambda kv: -kv[1][0])
    shown, rest = rows[:MAX_PREFIXES], rows[MAX_PREFIXES:]
    html = []
    for prefix, (total, done, erred) in shown:
        total = max(total, done + erred, 1)
        html.append(
            _BAR.format(
                title=escape(prefix),
                label=escape(prefix),
                segments=_segment(done / total, "#2a7fb8")
                + _segment(erred / total, "#d62728"),
                text=f"{done:,} / {total:,}" + (f" ({erred:,} erred)" if erred else ""),
            )
        )
    if rest:
        total = sum(r[1][0] for r in rest)
        done = sum(r[1][1] for r in rest)
        html.append(f"<div>+{len(rest)} more prefixes: {done:,} / {total:,}</div>")
    return "".join(html)


def workers_html(s: Snapshot) -> str:
    rows = sorted(s.workers.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))
    html = []
    for worker, (managed, unmanaged, spilled, limit, processing) in rows[:MAX_WORKERS]:
        scale = limit or max(managed + unmanaged + spilled, 1)
        html.append(
            _BAR.format(
                title=escape(worker),
                label=escape(worker.removeprefix("tcp://")),
                segments=_segment(managed / scale, "#2a7fb8")
                + _segment(unmanaged / scale, "#9ecae1")
                + _segment(spilled / scale, "#8c8c8c"),
                text=f"{format_bytes(managed + unmanaged)}"
                + (f" / {format_bytes(limit)}" if limit else "")
                + (f", {format_bytes(spilled)} spilled" if spilled else "")
                + f", {int(processing)} processing",
            )
        )
    if len(rows) > MAX_WORKERS:
        html.append(f"<div>+{len(rows) - MAX_WORKERS} more workers</div>")
    return "".join(html)


def alerts_html(s: Snapshot) -> str:
    html = [
        f'<div style="font-size:12px;color:{_RED if sev == "error" else _AMBER}">'
        f"⚑ <b>{escape(kind)}</b>: {escape(message)}</div>"
        for kind, sev, message in s.flags
    ]
    if s.n_alerts:
        html.append(
            f'<div style="font-size:12px">{s.n_alerts:,} warning/error '
            f"line{'' if s.n_alerts == 1 else 's'}; "
            "newest:</div>"
        )
        html += [
            '<div style="font:11px monospace;white-space:pre-wrap;'
            f'color:{_RED if level in ("ERROR", "CRITICAL") else _AMBER}">'
            f"{escape(level)} {escape(who)}: {escape(_first_line(message))}</div>"
            for _, level, who, message in s.alerts
        ]
    return "".join(html)


def _first_line(text: str, limit: int = 300) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit else line[:limit] + "…"


def widget_values(snapshot: Snapshot, name: str) -> dict[str, str]:
    """The HTML of each part of the widget display."""
    return {
        "header": header_html(snapshot, name),
        "prefixes": prefixes_html(snapshot),
        "workers": workers_html(snapshot),
        "alerts": alerts_html(snapshot),
    }


class WidgetView:
    """ipywidgets: a header, prefix bars, worker memory bars, flags and alerts.
    Each part is one HTML widget, updated only when its text changes."""

    def __init__(self, name: str) -> None:
        import ipywidgets
        from IPython.display import display

        self.name = name
        self.parts = {
            key: ipywidgets.HTML()
            for key in ("header", "prefixes", "workers", "alerts")
        }
        self.box = ipywidgets.VBox(list(self.parts.values()))
        self.handle = display(self.box, display_id=True)

    def show(self, snapshot: Snapshot) -> None:
        for key, value in widget_values(snapshot, self.name).items():
            if self.parts[key].value != value:  # a comm message only on change
                self.parts[key].value = value

    def replace(self, obj: Any) -> None:
        """Give the display over to ``obj`` (the report), keeping its place."""
        if self.handle is not None:
            self.handle.update(obj)

    def close(self) -> None:
        self.box.close()
        for part in self.parts.values():
            part.close()


class TextView:
    """A status line every few seconds, for terminals and other frontends
    without widgets."""

    EVERY_S = 2.0

    def __init__(self, name: str) -> None:
        self.name = name
        # The first line after EVERY_S: a quick cell prints no progress at all.
        self._last = time.monotonic()
        self._said = ""

    def show(self, snapshot: Snapshot) -> None:
        now = time.monotonic()
        if now - self._last < self.EVERY_S:
            return
        total, done, erred = snapshot.totals
        line = (
            f"[dask-observe] {self.name}: {done:,}/{total:,} tasks"
            + (f", {erred:,} failed" if erred else "")
            + f", {len(snapshot.workers)} workers"
            + split_text(snapshot.activities).replace(" ·", ",")
            + (f", {snapshot.n_alerts} warnings" if snapshot.n_alerts else "")
            + "".join(f", flag {kind}" for kind, _, _ in snapshot.flags)
            + (f", {said}" if (said := silence_text(snapshot)) else "")
        )
        if line != self._said:
            print(f"{line} ({format_seconds(snapshot.elapsed)})", file=sys.stderr)
            self._said, self._last = line, now

    def close(self) -> None:
        pass


def has_widget_frontend() -> bool:
    """True in a Jupyter kernel with ipywidgets importable."""
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


# -- polling ---------------------------------------------------------------------


class LiveProgress:
    """Polls a recording and shows it in a view until stopped.

    Two threads: one polls the scheduler and the newest log lines and updates the
    view (cheap, every POLL_INTERVAL_S); the other judges flags, which reads the
    run's tasks from the store, through its own connection so that neither the
    display nor the recorder waits for it.
    """

    def __init__(self, recording: Recording, view: View) -> None:
        self.recording = recording
        self.view = view
        self.snapshot = Snapshot()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(
                target=self._loop, name="dask-observe-progress", daemon=True
            ),
            threading.Thread(
                target=self._judge, name="dask-observe-flags", daemon=True
            ),
        ]
        self._started = time.monotonic()
        #: When the scheduler last answered a poll (its silence is measured from).
        self._answered = self._started
        #: The scheduler's answer to the poll under way, while it waits.
        self._asking: concurrent.futures.Future[Any] | None = None
        self._silent_after_s = silent_after()
        self._log_seq = 0
        self._rates: collections.deque[tuple[float, int]] = collections.deque(maxlen=12)

    def start(self) -> LiveProgress:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> Snapshot:
        """Stop polling and return the last snapshot."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        return self.snapshot

    def _reader(self) -> Store:
        """A connection of this thread's own: the recorder's writes hold the
        shared one, and a WAL reader need not wait for them."""
        from dask_observe.api import Store

        return Store(self.recording.store.path, create=False)

    def _loop(self) -> None:
        failures = 0
        assert self.recording.run is not None
        with self._reader() as store:
            run = store.run(self.recording.run.id)
            while not self._stop.is_set():
                began = time.monotonic()
                try:
                    self.poll(run)
                    self.view.show(self.snapshot)
                    failures = 0
                except Exception as e:  # a display must never break the user's cell
                    failures += 1
                    if failures == 3:
                        logger.warning("dask-observe: live progress stalls: %s", e)
                # A steady cadence: a slow poll (a busy scheduler in this very
                # process) shortens the wait that follows it.
                spent = time.monotonic() - began
                self._stop.wait(max(0.05, POLL_INTERVAL_S - spent))

    def _progress(self, span_id: str) -> dict[str, Any] | None:
        """The scheduler's answer on the run's progress, or None while there
        is none. Asked once and waited for a poll's interval at a time, so
        that the display moves on meanwhile (a call waited out answer-timeout,
        30 s, and the display with it); the scheduler is said silent once the
        question has waited ``silent-after`` or failed."""
        s = self.snapshot
        if self._asking is None:
            self._asking = self.recording.scheduler_ask(
                "dask_observe_progress", span_id=span_id
            )
        asking = self._asking
        concurrent.futures.wait([asking], timeout=POLL_INTERVAL_S)
        if not asking.done():
            waited = time.monotonic() - self._answered
            if waited >= self._silent_after_s:
                s.silent_s = waited
            return None
        self._asking = None
        try:
            reply: dict[str, Any] = asking.result()
        except (OSError, TimeoutError):  # answer-timeout, a lost connection
            s.silent_s = time.monotonic() - self._answered
            return None
        self._answered, s.silent_s = time.monotonic(), 0.0
        return reply

    def poll(self, run: Run) -> None:
        s = self.snapshot
        s.elapsed = time.monotonic() - self._started
        span_id = self.recording.span_id
        if span_id is not None:
            reply = self._progress(span_id)
            if reply is None:  # not answered (yet)
                return
            s.prefixes = reply["prefixes"]
            s.workers = reply["workers"]
            s.activities = reply.get("activities", {})
        _, done, erred = s.totals
        now = time.monotonic()
        self._rates.append((now, done + erred))
        t0, n0 = self._rates[0]
        s.rate = (done + erred - n0) / (now - t0) if now > t0 else 0.0
        from dask_observe.analysis.figures import is_routine

        for line in run.log_page(self._log_seq, limit=5000, level="warning"):
            self._log_seq = line["seq"]
            if is_routine(line["logger"], line["message"]):
                continue  # a P2P shuffle starting: not the newest problem
            s.n_alerts += 1
            who = text_or_none(line["worker"]) or line["source"]
            s.alerts.append((line["time"], line["level"], who, line["message"]))

    def _judge(self) -> None:
        from dask_observe.diagnose import flag_list

        assert self.recording.run is not None
        run_id = self.recording.run.id
        wait = FLAG_INTERVAL_S
        with self._reader() as store:
            while not self._stop.wait(wait):
                began = time.monotonic()
                try:
                    flags = flag_list(store.run(run_id))
                except Exception as e:
                    logger.warning("dask-observe: cannot judge flags live: %s", e)
                    return
                self.snapshot.flags = [(f.kind, f.severity, f.message) for f in flags]
                # A big run takes a while to judge: never more than a third of
                # the time, so a long cell is not slowed by its own display.
                wait = max(FLAG_INTERVAL_S, 2 * (time.monotonic() - began))

"""Live progress under a ``%%dask_record`` cell: what it shows (a
:class:`Snapshot`) and how (:class:`WidgetView`, :class:`TextView`); the
polling that fills it is :mod:`.polling`.

What the browser gets is aggregated: a few HTML widgets, each sent only when
its text changed, never a message per task. Without a widget frontend (plain
IPython) the same snapshot prints as text.
"""

from __future__ import annotations

import collections
import sys
import time
from dataclasses import dataclass, field
from html import escape
from typing import Any, Protocol

from dask_observe.plaintext import ACTIVITIES, visible
from dask_observe.units import format_bytes, format_seconds

#: Prefix bars shown; the rest are summed into one line.
MAX_PREFIXES = 30
#: Worker bars shown.
MAX_WORKERS = 16
#: Newest warning/error lines shown.
MAX_ALERTS = 5
#: The share of the tasks' time at which an activity besides CPU and waiting
#: is said too.
OTHER_SHARE = 0.05


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
        f"{len(s.workers)} workers{escape(split_text(s.activities))}"
        f"{silence_html(s)}</div>"
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
    """`` · CPU 62% · waiting 35%`` of the tasks' time so far, and the largest
    other share where it is ``OTHER_SHARE`` or more, as the report names it
    (`` · executor overhead 12%``: a header read "CPU 0% · waiting 78%" of
    sleeping tasks on a busy host, a fifth of their time unsaid); "" before
    any."""
    busy = sum(activities.values())
    if busy <= 0:
        return ""
    cpu = activities.get("thread-cpu", 0.0) / busy
    waiting = activities.get("thread-noncpu", 0.0) / busy
    said = f" · CPU {cpu:.0%} · waiting {waiting:.0%}"
    rest = {
        a: s for a, s in activities.items() if a not in ("thread-cpu", "thread-noncpu")
    }
    if rest:
        largest = max(rest, key=rest.__getitem__)
        if rest[largest] / busy >= OTHER_SHARE:
            # A task's own label (distributed's context_meter) is the user's
            # text: shown as text, never markup or a terminal's controls.
            named = visible(ACTIVITIES.get(largest, largest), newlines=False)
            said += f" · {named} {rest[largest] / busy:.0%}"
    return said


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
    """A bar a worker, as the report and the panel draw it: the process's
    memory (managed, unmanaged) against its limit, spilled bytes said apart
    (they are on disk, not in memory). The busiest MAX_WORKERS, listed by
    address: sorted by memory, rows swapped places between refreshes."""
    busiest = sorted(s.workers.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))
    rows = sorted(busiest[:MAX_WORKERS])
    html = []
    for worker, (managed, unmanaged, spilled, limit, processing) in rows:
        used = managed + unmanaged
        scale = max(limit, used) if limit else max(used, 1)
        html.append(
            _BAR.format(
                title=escape(worker),
                label=escape(worker.removeprefix("tcp://")),
                segments=_segment(managed / scale, "#2a7fb8")
                + _segment(unmanaged / scale, "#9ecae1"),
                text=f"{format_bytes(managed + unmanaged)}"
                + (f" / {format_bytes(limit)}" if limit else "")
                + (f", {format_bytes(spilled)} spilled" if spilled else "")
                + f", {int(processing)} processing",
            )
        )
    if len(busiest) > MAX_WORKERS:
        html.append(f"<div>+{len(busiest) - MAX_WORKERS} more workers</div>")
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

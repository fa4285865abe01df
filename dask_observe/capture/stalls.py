"""Stalls of a process's event loop, seen from a light ticker on it."""

from __future__ import annotations

import time

#: A tick this much later than due is an event-loop stall worth an event:
#: below the flag's threshold (1 s by default), so that a lower one finds them.
STALL_S = 0.5


class StallWatch:
    """Stalls of the event loop it ticks on: a tick that comes ``STALL_S`` or
    more after it was due means the loop (or the GIL) was held meanwhile.
    distributed's own measure is an average over each heartbeat (four 2 s stalls
    read 0.07 s) and its warning starts at 3 s; this sees a single 1 s stall."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.last = time.monotonic()

    def tick(self, now: float) -> dict[str, float] | None:
        """``{"seconds", "since"}`` of the stall that ended now, or None."""
        mono = time.monotonic()
        late = mono - self.last - self.interval_s
        self.last = mono
        if late < STALL_S:
            return None
        return {"seconds": round(late, 3), "since": now - late}

"""An uptime accumulated across runs: the clock for what spans restarts.

The wall clock is stepped by NTP (either way, by an hour or more); the monotonic clock
starts again at every boot. What must be remembered for a duration that spans restarts
(24 h of request_ids, `state.retention_days` of events) is aged on this clock and on the
wall clock, and forgotten only when it is old by both: a step of the wall clock either way
never makes anything look older than it is.

`now()` is the base kept in the journal plus the monotonic time since this run started.
The journal saves it now and then and at stop; a kill -9 loses at most the part not yet
saved, which only makes things look younger (kept a little longer), never older. The time
the daemon was not running is not counted either: the same direction. At open the journal
takes the newest recorded input's reading (`mono`) when it is later than the saved base,
so that a duration an input began before a kill -9 (the pull timeout) is not stretched.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Uptime:
    """Seconds of daemon running time since the journal was created."""

    def __init__(self, base: float = 0.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        if not base >= 0.0:  # also refuses NaN
            raise ValueError(f"uptime base must be >= 0, not {base!r}")
        self._base = base
        self._monotonic = monotonic
        self._start = monotonic()

    def now(self) -> float:
        """The accumulated uptime: never goes back, whatever the wall clock does."""
        return self._base + max(0.0, self._monotonic() - self._start)

    def __repr__(self) -> str:
        return f"Uptime({self.now():.3f})"

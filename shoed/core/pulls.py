"""Multi-card pulls (firmware-protocol.md section 4, dealing-rules.md rule 7): what the
engine needs to decide about its pull buffer, and the pull timeout's clock.

Pure functions of the state and an input; the engine makes the changes.

Clocks. An input carries ``at`` (wall clock, epoch seconds: stepped by NTP) and
``mono`` (the daemon's uptime clock: monotonic within a run and accumulated across
runs; None in journals written before it existed). Every duration is measured on
``mono`` when both ends carry it, and on ``at`` only when one does not, so a wall-clock
step neither times a pull out early nor keeps it waiting.
"""

from __future__ import annotations

from .inputs import DeviceItem, InputBase
from .state import EngineState, PullBuffer, PullItem

#: How long a half-received pull waits for its next item (time with a card-jam fault
#: active not counted).
PULL_TIMEOUT_S = 3.0
#: The largest pull a shoe reports (pull_size 1..3).
MAX_PULL_SIZE = 3


def elapsed(then_at: float, then_mono: float | None, now: InputBase) -> float:
    """Seconds from a mark (its wall and uptime readings) to the input `now`."""
    if then_mono is not None and now.mono is not None:
        return now.mono - then_mono
    return now.at - then_at


def fields_problem(item: DeviceItem) -> str | None:
    """Why the item cannot join a pull (its pull fields unreadable or out of range)."""
    pos, size = item.pull_pos, item.pull_size
    if item.pull_id is None or pos is None or size is None \
            or not 1 <= pos <= size <= MAX_PULL_SIZE:
        return f"pull fields unreadable or out of range (pull_pos {pos}, pull_size {size})"
    return None


def breaks(pull: PullBuffer, item: DeviceItem) -> bool:
    """The item cannot complete `pull`: another pull, another size, or a position twice."""
    return (pull.pull_id != item.pull_id or pull.size != item.pull_size
            or any(p.item.pull_pos == item.pull_pos for p in pull.items))


def upper_first(entries: list[PullItem]) -> list[PullItem]:
    """A pull's items in procedure order: the upper card (pull_pos 1) first."""
    return sorted(entries, key=lambda e: (e.item.pull_pos or 0, e.arrival))


def reordered(ordered: list[PullItem]) -> bool:
    """Did the items arrive in another order than the procedure's?"""
    arrivals = [e.arrival for e in ordered]
    return arrivals != sorted(arrivals)


def deadline(state: EngineState) -> float | None:
    """When the pending pull times out; None without one or while a card jam is active.

    On the uptime clock (``mono``) when the pull's latest item carried it; on the wall
    clock (``at``) for a pull begun from inputs without it (an older journal), until the
    next input that has it carries the pull over (``Engine`` does, on every input).
    """
    pull = state.pull
    if pull is None or state.jam_since is not None:
        return None
    start = pull.last_mono if pull.last_mono is not None else pull.last_at
    return start + pull.paused + PULL_TIMEOUT_S


def timed_out(state: EngineState, now: InputBase) -> bool:
    pull = state.pull
    if pull is None or state.jam_since is not None:
        return False
    return elapsed(pull.last_at, pull.last_mono, now) - pull.paused >= PULL_TIMEOUT_S


def jam_paused(state: EngineState, now: InputBase) -> float:
    """How long the card jam that ends at `now` lasted while the pending pull waited:
    since its latest item, when the jam began before that item (time before it is no
    wait of the pull's next item, which the timeout counts from there)."""
    pull = state.pull
    assert state.jam_since is not None and pull is not None
    jam = elapsed(state.jam_since, state.jam_since_mono, now)
    waited = elapsed(pull.last_at, pull.last_mono, now)
    return max(0.0, min(jam, waited))

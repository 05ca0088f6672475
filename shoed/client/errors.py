"""The client's error tree.

    ShoedClientError
    +-- CommandError            the daemon answered ok: false (.code, .message, .answer)
    |   +-- InvalidCommand      invalid_json, invalid_command, unknown_command
    |   +-- Forbidden           forbidden (outside the sender's role)
    |   +-- RequestConflict     request_id_conflict (same id, different body)
    |   +-- StorageFailed       storage_failed (the daemon cannot journal: try later)
    |   +-- CommandRefused      every rule refusal (shoe_in_play, unknown_hand, ...)
    +-- CommandTimeout          no answer after every retry (the same request_id each time)
    +-- FeedError
        +-- EventsLost          events the daemon no longer holds (older than retention)
"""

from __future__ import annotations

from typing import Any


class ShoedClientError(Exception):
    pass


class CommandError(ShoedClientError):
    def __init__(self, answer: dict[str, Any]) -> None:
        error = answer.get("error") or {}
        self.answer = answer
        self.code: str = str(error.get("code"))
        self.message: str = str(error.get("message"))
        self.request_id: str | None = answer.get("request_id")
        super().__init__(f"{self.code}: {self.message}")


class InvalidCommand(CommandError):
    pass


class Forbidden(CommandError):
    pass


class RequestConflict(CommandError):
    pass


class StorageFailed(CommandError):
    pass


class CommandRefused(CommandError):
    pass


class CommandTimeout(ShoedClientError):
    def __init__(self, request_id: str, command: str, attempts: int, waited_s: float,
                 not_connected: str | None = None) -> None:
        self.request_id = request_id
        self.command = command
        self.attempts = attempts
        self.not_connected = not_connected  # why the client is not connected, if it is not
        why = f": not connected to the broker ({not_connected})" if not_connected else ""
        super().__init__(f"no answer to {command} (request_id {request_id}) after "
                         f"{attempts} attempt(s), {waited_s:.1f} s{why}")


class FeedError(ShoedClientError):
    pass


class EventsLost(FeedError):
    """Events the daemon's journal no longer holds: `first`..`last` of `instance`.

    `last` is None when how many is not known: the journal was replaced (a new
    `instance`) and the daemon could not say where the old one's events ended; events
    from `first` on, if it published any, are not in the new journal (`possible`)."""

    def __init__(self, instance: str | None, first: int, last: int | None,
                 why: str = "") -> None:
        self.instance, self.first, self.last = instance, first, last
        self.possible = last is None
        span = f"{first}..{last}" if last is not None else f"from {first} on, if any,"
        super().__init__(f"events {span} of instance {instance} are no longer in the "
                         f"daemon's journal" + (f" ({why})" if why else ""))


def replaced_losses(old: str, cursor: int, previous: Any) -> list[EventsLost]:
    """What a consumer at `cursor` of journal `old` lost when the daemon's journal was
    replaced, from the new journal's `previous_instance` (a `replay` answer's): events
    after the cursor up to its `last_seq` (certain), and a possible loss after
    `max(cursor, last_seq)` when it says more may have been published (`more_possible`:
    a crash left inputs in its record log; absent, from a daemon before the field: may).
    Without it (the state directory emptied by hand, a daemon before it, or the journal
    replaced twice since) nothing can be told: a possible loss from the cursor on
    (decisions.md 209, 213)."""
    known = isinstance(previous, dict) and previous.get("instance") == old
    last = previous.get("last_seq") if known else None
    last = last if isinstance(last, int) and not isinstance(last, bool) else None
    more = last is None or previous.get("more_possible") is not False
    lost: list[EventsLost] = []
    if last is not None and last > cursor:
        lost.append(EventsLost(old, cursor + 1, last,
                               "the journal was replaced before they reached this consumer"))
    if more:
        why = ("the replaced journal's record log held inputs its database lacked, or "
               f"could not be read: events after seq {last} may have been published"
               if last is not None
               else "the replaced journal's database could not be read: where its events "
               "ended is not known" if known
               else "the journal was replaced; the daemon " + (
                   "names another replaced journal: replaced more than once"
                   if isinstance(previous, dict) else "does not say where it ended"))
        lost.append(EventsLost(old, max(cursor, last or 0) + 1, None, why))
    return lost


_BY_CODE: dict[str, type[CommandError]] = {
    "invalid_json": InvalidCommand, "invalid_command": InvalidCommand,
    "unknown_command": InvalidCommand, "forbidden": Forbidden,
    "request_id_conflict": RequestConflict, "storage_failed": StorageFailed,
}


def error_for(answer: dict[str, Any]) -> CommandError:
    code = str((answer.get("error") or {}).get("code"))
    return _BY_CODE.get(code, CommandRefused)(answer)

"""What the daemon writes to its log per event (docs/decisions.md 32)."""

from __future__ import annotations

from typing import Any

LOGGED_FIELDS = ("seq", "shoe_id", "hand_no", "card_index", "position", "card", "winner",
                 "player_total", "banker_total", "code", "active", "message", "rule",
                 "action", "reason", "operator", "command", "request_id")


class EventLog:
    """Alarms at warning, a card at debug (it is in the journal and on the broker; a line
    per card would double the disk writes per card under journald), the rest (hands,
    shoes, procedure, commands) at info."""

    def __init__(self, log: Any, level: str) -> None:
        self.log = log
        self.info = level in ("debug", "info")
        self.debug = level == "debug"

    def write(self, event: Any) -> None:
        if event.type == "alarm" and event.active:
            level = "warning"
        elif event.type == "card":
            if not self.debug:
                return  # filtered anyway: skip building the fields (the per-card path)
            level = "debug"
        elif self.info:
            level = "info"
        else:
            return
        # From the model's own fields, not getattr(event, k, None): a field the event
        # lacks would cost pydantic's __getattr__ two raised AttributeErrors, ~13 on a
        # hand's event (docs/performance.md, "Eighteenth pass").
        values = vars(event)
        fields = {k: v for k in LOGGED_FIELDS if (v := values.get(k)) is not None}
        getattr(self.log, level)(f"event_{event.type}", **fields)

"""The shoe report (integrity.md section 3): what one shoe was, built from its events.

:class:`ShoeReportBuilder` observes every event the engine emits for a shoe (with the
monotonic time it was emitted at) and, once the shoe has ended or been voided, gives the
body of the ``shoe_report`` event. It keeps only plain data (a pydantic model), so it sits
in the engine's state and is snapshotted and rolled back with it. Nothing here does I/O
or reads a clock: times come in as parameters.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from . import events as ev

POSITION_GROUPS = ("commencement", "commencement_burn", "burn", "hand", "unnecessary",
                   "after_shoe_end")
HAND_POSITIONS = frozenset({"burn", "P1", "B1", "P2", "B2", "P3", "B3"})
INTEGRITY_CODES = frozenset({"shoe_unshuffled", "shoe_order_suspect"})
#: The shoe's alarm events kept for `recall` (its `alarm_history`: what a console opened
#: mid-shoe shows): the newest this many, raises and clears.
ALARM_LOG_KEPT = 100


#: What the builder keeps of one card: the latest that the card events said of it, and
#: when it was first seen. A plain tuple, not a model: the engine's state is pickled
#: before every card (its rollback checkpoint), and a shoe has 400 of these.
#: (card, read, position, hand_no, at: monotonic seconds first seen, unread: it left
#: the shoe unread or foreign, whatever was entered later)
ReportCard = tuple[str | None, str, str | None, int | None, float, bool]


class ShoeReportBuilder(BaseModel):
    model_config = ConfigDict(extra="forbid")

    shoe_id: str
    decks: int
    started: str | None = None
    started_mono: float | None = None
    ended: str | None = None
    ended_mono: float | None = None
    cards: dict[int, ReportCard] = Field(default_factory=dict)
    results: dict[int, str] = Field(default_factory=dict)  # hand_no -> winner (standing)
    voided: list[int] = Field(default_factory=list)
    alarms: dict[str, int] = Field(default_factory=dict)
    supervisor_actions: dict[str, int] = Field(default_factory=dict)
    integrity: list[dict[str, Any]] = Field(default_factory=list)
    # The shoe's alarm events, oldest first (at most ALARM_LOG_KEPT): recall's history.
    alarm_log: list[dict[str, Any]] = Field(default_factory=list)
    reported: bool = False

    @property
    def finished(self) -> bool:
        """The shoe ended or was voided: its report is due."""
        return self.ended is not None and not self.reported

    def observe(self, event: ev.EventBase, mono: float) -> None:
        """One event of this shoe, emitted at monotonic time `mono`."""
        if self.reported or event.shoe_id != self.shoe_id:
            return
        if isinstance(event, ev.ShoeStarted):
            self.started, self.started_mono = event.ts, mono
        elif isinstance(event, ev.CardEvent):
            if event.card_index is None:
                return
            known = self.cards.get(event.card_index)
            unread = event.read in ("unread", "foreign")
            first_seen = mono
            if known is not None:
                first_seen, unread = known[4], known[5] or unread
            self.cards[event.card_index] = (event.card, event.read, event.position,
                                            event.hand_no, first_seen, unread)
        elif isinstance(event, ev.HandResultEvent):
            if event.hand_no is not None:
                self.results[event.hand_no] = event.winner
        elif isinstance(event, ev.HandVoided):
            if event.hand_no is not None:
                self.results.pop(event.hand_no, None)
                self.voided.append(event.hand_no)
        elif isinstance(event, ev.Alarm):
            self.alarm_log.append({
                "seq": event.seq, "ts": event.ts, "alarm_id": event.alarm_id,
                "code": event.code, "active": event.active, "momentary": event.momentary,
                "message": event.message, "hand_no": event.hand_no,
                "card_index": event.card_index})
            del self.alarm_log[:-ALARM_LOG_KEPT]
            if event.active:
                self.alarms[event.code] = self.alarms.get(event.code, 0) + 1
                if event.code in INTEGRITY_CODES:
                    self.integrity.append({"detector": event.detector,
                                           "card_index": event.card_index,
                                           "alarm": event.code})
        elif isinstance(event, ev.SupervisorAction):
            self.supervisor_actions[event.command] = \
                self.supervisor_actions.get(event.command, 0) + 1
        elif isinstance(event, ev.ShoeEnded | ev.ShoeVoided) and self.ended is None:
            self.ended, self.ended_mono = event.ts, mono

    def build(self) -> dict[str, Any]:
        """The ``shoe_report`` body (every field but the event envelope); marks it sent."""
        by_position = dict.fromkeys(POSITION_GROUPS, 0)
        composition: dict[str, int] = {}
        unread = manual = 0
        first_hand: float | None = None
        last_hand: float | None = None
        for card in self.cards.values():
            name, read, position, hand_no, at, was_unread = card
            by_position[_group(position, hand_no)] += 1
            unread += was_unread
            manual += read == "manual"
            if name is not None:
                composition[name] = composition.get(name, 0) + 1
            if hand_no is not None and (position in HAND_POSITIONS or position is None):
                if hand_no == 1:
                    first_hand = at if first_hand is None else min(first_hand, at)
                last_hand = at if last_hand is None else max(last_hand, at)
        over = sorted(c for c, n in composition.items() if n > self.decks)
        start = self.started_mono if self.started_mono is not None else 0.0
        end = self.ended_mono if self.ended_mono is not None else start
        standing = len(self.results)
        per_hour: float | None = None
        if standing and first_hand is not None and last_hand is not None \
                and last_hand > first_hand:
            per_hour = round(standing * 3600 / (last_hand - first_hand), 1)
        winners = {w: sum(1 for r in self.results.values() if r == w)
                   for w in ("banker", "player", "tie")}
        self.reported = True
        shown: dict[str, int | list[str]] = dict(sorted(composition.items()))
        shown["over"] = over
        return {
            "decks": self.decks,
            "started": self.started,
            "ended": self.ended,
            "duration_s": round(max(0.0, end - start), 3),
            "hands_played": standing,
            "hands_voided": len(self.voided),
            "hands_per_hour": per_hour,
            "cards_drawn": len(self.cards),
            "cards_by_position": by_position,
            "unread": unread,
            "manual_entries": manual,
            "composition": shown,
            "alarms": dict(sorted(self.alarms.items())),
            "supervisor_actions": dict(sorted(self.supervisor_actions.items())),
            "integrity": list(self.integrity),
            "winners": winners,
        }


def _group(position: str | None, hand_no: int | None) -> str:
    if position is not None and position in POSITION_GROUPS:
        return position
    if position is None and hand_no is None:
        return "commencement_burn"  # drawn in commencement, never placed (shoe voided)
    return "hand"  # P1..B3, or pending in a hand that was voided


def shoe_report(builder: ShoeReportBuilder) -> dict[str, Any]:
    """The body of the shoe's ``shoe_report`` event (see :meth:`ShoeReportBuilder.build`)."""
    return builder.build()

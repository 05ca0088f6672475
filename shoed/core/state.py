"""The engine's state: pydantic models, saved whole as the journal's snapshot.

Nothing here changes state (that is :mod:`shoed.core.engine`) or reads it for the
outside world (:mod:`shoed.core.view`). Fields are only ever added, with defaults, so a
snapshot written by an older version still loads.

Time fields: ``drawn_at``, ``last_at`` and ``jam_since`` are wall-clock epoch seconds
(the inputs' ``at``), kept for timestamps and for journals from before ``mono``;
``last_mono`` and ``jam_since_mono`` are on the uptime clock (the inputs' ``mono``),
which durations are measured on when it is known (see :mod:`shoed.core.pulls`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from .inputs import DeviceItem
from .integrity import IntegrityWatch
from .report import ShoeReportBuilder

Phase = Literal["commencement", "between_hands", "dealing", "shoe_ended", "shoe_voided"]
#: The phases of a shoe that is over: nothing more is dealt from it.
FINISHED_PHASES: frozenset[str] = frozenset({"shoe_ended", "shoe_voided"})


class CardRec(BaseModel):
    card_index: int
    card: str | None
    read: Literal["read", "unread", "foreign", "manual"]
    uid: str | None = None
    device_card_index: int | None = None
    pull_id: int | None = None
    drawn_at: float
    exposed: bool = False
    flags: list[str] = Field(default_factory=list)  # excess_card, duplicate_uid
    flags_cleared: bool = False
    alarmed: bool = False
    position: str | None = None
    hand_no: int | None = None
    published: str | None = None  # what the last card event said (to publish changes only)


class HandState(BaseModel):
    hand_no: int
    cards: list[CardRec] = Field(default_factory=list)
    has_burn: bool = True
    in_progress: bool = False
    holds: list[str] = Field(default_factory=list)  # explicit: cards_lost, incomplete_pull, ...
    unnecessary: int = 0
    last_hand: bool = False
    # The cut card came while cards of this held hand were still pending: how many of its
    # cards were drawn before it. It takes effect in draw order once the hold ends and
    # it is known whether those cards were this hand's or surplus (rules 9, 10).
    cut_at: int | None = None
    actions: list[dict[str, Any]] = Field(default_factory=list)
    misorders: list[dict[str, Any]] = Field(default_factory=list)  # reported in progress


class CommencementState(BaseModel):
    cards: list[CardRec] = Field(default_factory=list)
    burn_count: int | None = None
    holds: list[str] = Field(default_factory=list)


class ShoeState(BaseModel):
    shoe_id: str
    phase: Phase
    commencement: CommencementState = Field(default_factory=CommencementState)
    hand: HandState | None = None
    hand_no: int = 0  # the number of the newest hand created
    betting: Literal["open", "closed"] | None = None
    cut_card_seen: bool = False
    end_requested: bool = False
    counts: dict[str, int] = Field(default_factory=dict)
    uids: list[str] = Field(default_factory=list)
    card_counter: int = 0
    hands_played: int = 0
    hands_voided: int = 0
    resolved: dict[int, bool] = Field(default_factory=dict)  # hand_no -> voided?
    last_resolved: int | None = None
    #: the shoe-order watch (integrity.md), fed every card of this shoe in procedure order
    integrity: IntegrityWatch | None = None
    #: a `shoe_unshuffled` hold (integrity.on_unshuffled = "hold") stands over the shoe:
    #: the hand in progress, or the commencement or the next hand from its start
    integrity_hold: bool = False
    #: the shoe report (integrity.md section 3), built from this shoe's events
    report: ShoeReportBuilder | None = None


class PullItem(BaseModel):
    item: DeviceItem
    arrival: int


class PullBuffer(BaseModel):
    pull_id: int
    size: int
    items: list[PullItem] = Field(default_factory=list)
    last_at: float
    last_mono: float | None = None
    paused: float = 0.0  # seconds of card jam since the last item (not counted)
    # void_hand came while this pull was pending: its items were drawn before the command,
    # so they are that hand's and are voided with it (rule 10), wherever they come after.
    voided_hand: int | None = None
    # close_betting came while this pull was pending (commands mode): its items left the
    # shoe while betting was open, so they are unnecessary cards (rule 5), wherever they
    # come after the command.
    betting_open: bool = False


class AlarmState(BaseModel):
    alarm_id: str
    code: str
    since: str
    key: str
    card_index: int | None = None
    fault_code: int | None = None
    detector: str | None = None  # shoe_unshuffled: the detector that raised it
    ackable: bool = False  # cleared by ack_alarm (no rule resolves it by itself)


class RoadsState(BaseModel):
    """The current shoe's standing results, as :meth:`shoed.core.roads.RoadsFeed.snapshot`
    gives them: the scoreboard is computed from these (kept for the whole shoe)."""

    shoe_id: str | None = None
    seq: int = 0  # the last event the board reflects
    results: list[dict[str, Any]] = Field(default_factory=list)  # HandOutcome.as_dict()


class DeviceState(BaseModel):
    boot_id: int | None = None
    capabilities: int | None = None
    fw_version: str | None = None
    serial_no: str | None = None
    connected: bool = False
    faults: list[int] = Field(default_factory=list)


class EngineState(BaseModel):
    instance_id: str
    seq: int = 0
    shoe_counter: int = 0
    alarm_counter: int = 0
    shoe: ShoeState | None = None
    device: DeviceState = Field(default_factory=DeviceState)
    alarms: list[AlarmState] = Field(default_factory=list)
    pull: PullBuffer | None = None
    pull_arrivals: int = 0
    jam_since: float | None = None
    jam_since_mono: float | None = None
    storage_failed: bool = False
    records: list[dict[str, Any]] = Field(default_factory=list)
    #: the scoreboard's input: the current shoe's standing results (roads.md)
    roads: RoadsState = Field(default_factory=RoadsState)
    #: the dealt order of the previous shoe (the last one that had cards dealt), for the
    #: watch's repeat_previous_shoe detector across shoes and restarts
    previous_shoe_order: list[str | None] = Field(default_factory=list)
    #: the dealt order of the last shoe that ended (not voided): compared as well while
    #: the previous shoe is a voided one (docs/integrity.md, "The previous shoe")
    ended_shoe_order: list[str | None] = Field(default_factory=list)
    #: the shoe_report events of recent shoes (those `records` still hold hands of), for
    #: recall; newest last
    shoe_reports: list[dict[str, Any]] = Field(default_factory=list)
    gate_sent: bool | None = None
    indicator_sent: int | None = None
    #: the gate's and the indicator's step failed after an input (Engine.settle_device):
    #: the next input's engine_error alarm says this (in the state, so that a snapshot, a
    #: trail's replay and a roll-back carry it as the live engine has it)
    device_error: str | None = None

"""Event models of mqtt-api.md section 2: one pydantic model per event type.

Every event carries `schema_version`, `event_id`, `seq`, `instance`, `type`, `ts`, `table_id`,
`shoe_id` and `hand_no`. Consumers ignore fields they do not know; we only add.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, WithJsonSchema

from .config import BettingControl, UnnecessaryProfile
from .paytable import SIDE_BETS, TableType

CardPosition = Literal[
    "commencement", "commencement_burn", "burn", "P1", "P2", "P3", "B1", "B2", "B3",
    "unnecessary", "after_shoe_end", "without_shoe",
]


#: `payouts` of mqtt-api.md section 2: the seven main bets always, a side bet's key when
#: the table offers it; a bet added later is one more number (consumers ignore keys they
#: do not know).
MAIN_BETS = ("banker", "player", "tie", "banker_pair", "player_pair", "big", "small")
Payouts = Annotated[dict[str, float], WithJsonSchema({
    "type": "object",
    "description": "The net units per unit staked on each bet (-1 lost, 0 a push), exactly "
                   "the configured figure: the seven main bets always, each side bet the "
                   "table offers (rules.side_bets) under its own name.",
    "properties": {name: {"type": "number"} for name in (*MAIN_BETS, *SIDE_BETS)},
    "required": list(MAIN_BETS),
    "additionalProperties": {"type": "number"},
})]


class EventBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    schema_version: Literal[1] = 1
    type: str
    event_id: str
    seq: int
    instance: str  # the journal's identity: consumers key on (instance, seq)
    ts: str
    table_id: str
    shoe_id: str | None
    hand_no: int | None


class ShoeStarted(EventBase):
    type: Literal["shoe_started"] = "shoe_started"
    decks: int
    table_type: TableType
    unnecessary_cards: UnnecessaryProfile
    betting_control: BettingControl
    trigger: Literal["shoe_loaded", "new_shoe"]


class Commencement(EventBase):
    type: Literal["commencement"] = "commencement"
    card: str | None
    burn_count: int | None
    card_index: int


class CardEvent(EventBase):
    type: Literal["card"] = "card"
    drawn_at: str
    position: CardPosition | None
    card: str | None
    card_index: int | None
    device_card_index: int | None
    pull_id: int | None
    source: Literal["shoe", "manual"]
    exposed_during_betting: bool = False
    read: Literal["read", "unread", "foreign", "manual"] = "read"
    uid: str | None = None
    voided: bool = Field(
        default=False,
        description="true when the card is published already voided with its hand (an "
                    "item of a pull half received before `void_hand`: position null, the "
                    "voided hand's hand_no); a card published before its hand was voided is "
                    "not published again: its hand's `hand_voided` covers it")


class BettingClosed(EventBase):
    type: Literal["betting_closed"] = "betting_closed"
    # What closed it: the game server's `close_betting`, or a supervisor's `realign` that
    # put a hand in progress while betting was open (an added field; decisions.md 203).
    trigger: Literal["close_betting", "realign"] = Field(
        default="close_betting",
        description="what closed betting for hand_no: the `close_betting` command, or a "
                    "supervisor's `realign` that put a hand in progress while betting was "
                    "open (betting is closed either way; added field)")


class HandResultEvent(EventBase):
    type: Literal["hand_result"] = "hand_result"
    player_cards: list[str]
    banker_cards: list[str]
    player_total: int
    banker_total: int
    winner: Literal["player", "banker", "tie"]
    player_natural: bool
    banker_natural: bool
    player_pair: bool
    banker_pair: bool
    cards_dealt: int
    big_small: Literal["big", "small"]
    banker_six: bool
    payouts: Payouts
    card_indexes: list[int]


class HandVoided(EventBase):
    type: Literal["hand_voided"] = "hand_voided"
    reason: str
    operator: str | None
    result_withdrawn: bool


class LastHand(EventBase):
    type: Literal["last_hand"] = "last_hand"
    reason: Literal["cut_card", "end_shoe"]


class ShoeEnded(EventBase):
    type: Literal["shoe_ended"] = "shoe_ended"
    hands_played: int
    hands_voided: int


class ShoeVoided(EventBase):
    type: Literal["shoe_voided"] = "shoe_voided"
    reason: Literal["supervisor", "unnecessary_cards", "replaced"]
    operator: str | None


class Procedure(EventBase):
    type: Literal["procedure"] = "procedure"
    rule: str
    action: str
    cards: list[dict[str, Any]]
    detail: str | None = None


class Alarm(EventBase):
    type: Literal["alarm"] = "alarm"
    alarm_id: str
    code: str
    active: bool
    message: str
    card_index: int | None = None
    fault_code: int | None = None
    momentary: bool = False
    #: shoe_unshuffled / shoe_order_suspect (integrity.md): the detector and the run or
    #: repeated sequence (card_index and card of each)
    detector: str | None = None
    cards: list[dict[str, Any]] | None = None


class SupervisorAction(EventBase):
    type: Literal["supervisor_action"] = "supervisor_action"
    command: str
    operator: str
    request_id: str
    detail: dict[str, Any] = Field(default_factory=dict)
    authenticated_as: str = "anonymous"  # the broker user; `operator` is what they typed


class ShoeReport(EventBase):
    """One per shoe, after `shoe_ended` / `shoe_voided` (integrity.md section 3)."""

    type: Literal["shoe_report"] = "shoe_report"
    decks: int
    started: str | None
    ended: str | None
    duration_s: float
    hands_played: int
    hands_voided: int
    hands_per_hour: float | None
    cards_drawn: int
    cards_by_position: dict[str, int]
    unread: int
    manual_entries: int
    #: card -> how many were drawn (identified cards); "over" lists the cards drawn more
    #: often than the decks hold
    composition: dict[str, int | list[str]]
    alarms: dict[str, int]
    supervisor_actions: dict[str, int]
    integrity: list[dict[str, Any]]
    winners: dict[str, int]


Event = Annotated[
    ShoeStarted | Commencement | CardEvent | BettingClosed | HandResultEvent | HandVoided
    | LastHand | ShoeEnded | ShoeVoided | Procedure | Alarm | SupervisorAction | ShoeReport,
    Field(discriminator="type"),
]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event, config=ConfigDict(defer_build=True))
#: The event classes, as the Event union lists them.
EVENT_TYPES: tuple[type[EventBase], ...] = get_args(get_args(Event)[0])

# A card event's JSON with its values left out, its fields in the model's order.
_CARD_JSON = ('{"schema_version":%d,"type":"card","event_id":"%s","seq":%d,"instance":"%s",'
              '"ts":"%s","table_id":"%s","shoe_id":%s,"hand_no":%s,"drawn_at":"%s",'
              '"position":%s,"card":%s,"card_index":%s,"device_card_index":%s,'
              '"pull_id":%s,"source":"%s","exposed_during_betting":%s,"read":"%s",'
              '"uid":%s,"voided":%s}')
#: The fields the template writes, read off it. event_json() uses the template only while
#: the model has exactly these, in this order (tests/test_event_json.py compares them).
CARD_EVENT_FIELDS = tuple(re.findall(r'"(\w+)":', _CARD_JSON))
_CARD_TEMPLATE = tuple(CardEvent.model_fields) == CARD_EVENT_FIELDS


def event_json(event: EventBase) -> str:
    """An event's JSON, character for character what ``event.model_dump_json()`` writes
    (Hypothesis checks it, tests/test_event_json.py).

    A card's event, the one on every card's way to the broker, is written here from its
    fields when its text needs no escaping (printable ASCII without a quote or a
    backslash: ids, times and card notations always are). In the daemon, met cold, that
    takes about 15 us against 30 us for pydantic-core's serializer (docs/performance.md,
    "Twenty-first pass"). The model is built and validated all the same; any other event,
    and a card event with other text, goes to the serializer."""
    if type(event) is not CardEvent or not _CARD_TEMPLATE:
        return event.model_dump_json()
    shoe_id, card, uid = event.shoe_id, event.card, event.uid
    text = (event.event_id + event.instance + event.ts + event.table_id + event.drawn_at
            + (shoe_id or "") + (card or "") + (uid or ""))
    if not (text.isascii() and text.isprintable()) or '"' in text or "\\" in text:
        return event.model_dump_json()
    position, hand_no = event.position, event.hand_no
    card_index, device_card_index, pull_id = (
        event.card_index, event.device_card_index, event.pull_id)
    return _CARD_JSON % (
        event.schema_version, event.event_id, event.seq, event.instance, event.ts,
        event.table_id,
        "null" if shoe_id is None else '"' + shoe_id + '"',
        "null" if hand_no is None else f"{hand_no:d}",
        event.drawn_at,
        "null" if position is None else '"' + position + '"',
        "null" if card is None else '"' + card + '"',
        "null" if card_index is None else f"{card_index:d}",
        "null" if device_card_index is None else f"{device_card_index:d}",
        "null" if pull_id is None else f"{pull_id:d}",
        event.source,
        "true" if event.exposed_during_betting else "false",
        event.read,
        "null" if uid is None else '"' + uid + '"',
        "true" if event.voided else "false")


# --- the retained {root}/state snapshot (mqtt-api.md section 3) ------------------------


class _StateModel(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class StateCard(_StateModel):
    position: str | None
    card: str | None
    card_index: int


class StatePendingCard(_StateModel):
    card: str | None
    card_index: int


class StateCommencement(_StateModel):
    card: str | None
    burn_count: int | None
    burns_drawn: int


class StateHold(_StateModel):
    reasons: list[str]
    card_index: int | None
    allowed: list[str]


class StateAlarm(_StateModel):
    alarm_id: str
    code: str
    since: str
    card_index: int | None
    fault_code: int | None
    detector: str | None = None  # shoe_unshuffled: the detector that raised it
    ackable: bool = False  # ack_alarm clears it (integrity.md section 2)


class StateNextHand(_StateModel):
    hand_no: int
    burn: str | None
    P1: str | None
    unnecessary_count: int


class StateSnapshot(_StateModel):
    """What `{root}/state` carries; `seq` is the last event it reflects."""

    schema_version: Literal[1]
    seq: int
    instance: str
    shoe_id: str | None
    shoe_state: Literal["no_shoe", "commencement", "between_hands", "dealing", "held",
                        "shoe_ended", "shoe_voided"]
    betting: Literal["open", "closed"] | None
    hand_no: int | None
    last_hand: bool
    cards: list[StateCard]
    pending_cards: list[StatePendingCard]
    next_position: str | None
    commencement: StateCommencement | None
    hold: StateHold | None
    alarms: list[StateAlarm]
    hands_played: int
    hands_voided: int
    gate_locked: bool
    indicator: int
    next_hand: StateNextHand | None = None

"""What the engine's state says, read only: card positions, holds, the gate, the
indicator and the retained ``{root}/state`` snapshot (mqtt-api.md section 3).

Nothing here changes the state; :mod:`shoed.core.engine` calls these to decide, and so
does anyone who wants to know.
"""

from __future__ import annotations

import functools
from typing import Any

from firmware_protocol.messages import IndicatorPattern

from .cards import value
from .config import EngineConfig
from .game import DEAL_ORDER, PB_POSITIONS, next_needed_by_values
from .state import FINISHED_PHASES, CardRec, EngineState, HandState, ShoeState

#: A hold and the card it concerns (None: the hand or commencement as a whole).
Hold = tuple[str, CardRec | None]
#: Holds a supervisor's manual_card entry can settle, and those that need one first.
ENTRY_HOLDS = frozenset({"card_unread", "foreign_card", "excess_card", "duplicate_uid"})
UNKNOWN_CARD_HOLDS = frozenset({"card_unread", "foreign_card"})
#: The shoe-order watch's hold (integrity.md section 2, on_unshuffled = "hold").
UNSHUFFLED = "shoe_unshuffled"
# The indicator patterns as plain ints (read on every input; enum access is slower).
_OFF, _BURN, _PLAYER, _BANKER, _LAST_HAND, _STOP = (
    p.value for p in (IndicatorPattern.OFF, IndicatorPattern.BURN, IndicatorPattern.PLAYER,
                      IndicatorPattern.BANKER, IndicatorPattern.LAST_HAND,
                      IndicatorPattern.STOP))


# --- positions ----------------------------------------------------------------------------


# The asks come from the hand being dealt (its prefixes): a few hands' worth is enough
# (1024 entries held ~0.3 MB of tuples after a few shoes).
@functools.lru_cache(maxsize=64)
def _derive(cards: tuple[str | None, ...], has_burn: bool) -> tuple[str | None, ...]:
    return tuple(_derive_positions(cards, has_burn))


def derive_positions(cards: list[str | None], has_burn: bool) -> tuple[str | None, ...]:
    """Memoised :func:`_derive_positions` (pure, and asked several times per input); the
    cached tuple itself, not a copy."""
    return _derive(tuple(cards), has_burn)


def _derive_positions(cards: tuple[str | None, ...], has_burn: bool) -> list[str | None]:
    """Position of each card of a hand, given in draw order (None = value unknown).

    Burn, P1, B1, P2, B2 are fixed by order alone; a third card's position needs the
    values before it. Returns None for a pending card (its position hangs on an unknown
    value) and "surplus" for a card beyond what the complete hand needs.
    """
    out: list[str | None] = []
    values: list[int | None] = []
    blocked: str | None = None
    for i, card in enumerate(cards):
        if i == 0 and has_burn:
            out.append("burn")
            continue
        if blocked is not None:
            out.append(None if blocked == "pending" else blocked)
            continue
        position: str | None
        if len(values) < 4:
            position = DEAL_ORDER[len(values)]
        else:
            known = [v for v in values if v is not None]
            if len(known) < len(values):
                blocked = "pending"
                out.append(None)
                continue
            position = next_needed_by_values(known)
            if position is None:
                blocked = "surplus"
                out.append("surplus")
                continue
        out.append(position)
        values.append(None if card is None else value(card))
    return out


def positions(hand: HandState) -> tuple[str | None, ...]:
    """Derived position of each card of the hand; None = pending, "surplus" = beyond."""
    return derive_positions([c.card for c in hand.cards], hand.has_burn)


def next_position(hand: HandState) -> str | None:
    """Where the next card of the hand goes (None: pending or complete).

    As :func:`_derive_positions` would place one more card: the hand's own positions
    say whether it is blocked; if not, every card after the burn is P/B, and the next
    goes by their count, then by their values (tests/test_view.py checks this against
    deriving the hand with a card added)."""
    cards = hand.cards
    if not cards and hand.has_burn:
        return "burn"
    derived = positions(hand)
    if derived and derived[-1] in (None, "surplus"):
        return None
    dealt = cards[1:] if hand.has_burn else cards
    if len(dealt) < 4:
        return DEAL_ORDER[len(dealt)]
    values = [value(c.card) for c in dealt if c.card is not None]
    return None if len(values) < len(dealt) else next_needed_by_values(values)


def dealt_cards(hand: HandState) -> list[CardRec]:
    """The hand's Player and Banker cards, in draw order."""
    return [c for c, p in zip(hand.cards, positions(hand), strict=True) if p in PB_POSITIONS]


def hand_complete(hand: HandState) -> bool:
    dealt = dealt_cards(hand)
    if len(dealt) < 4 or any(c.card is None for c in dealt):
        return False
    return next_needed_by_values([value(c.card) for c in dealt if c.card]) is None


# --- holds --------------------------------------------------------------------------------


def hold_detail(shoe: ShoeState | None) -> list[Hold]:
    """Every active hold of the current context, with the card it concerns."""
    if shoe is None or shoe.phase in FINISHED_PHASES:
        return []
    out: list[Hold] = []
    if shoe.integrity_hold:  # integrity.md section 2: over the shoe, until resolved
        out.append((UNSHUFFLED, None))
    if shoe.phase == "commencement":
        com = shoe.commencement
        out += [(h, None) for h in com.holds]
        if com.cards and com.cards[0].card is None:
            first = com.cards[0]
            out.append(("foreign_card" if first.read == "foreign" else "card_unread", first))
        return out
    hand = shoe.hand
    if hand is None:
        return out
    out += [(h, None) for h in hand.holds]
    for card, position in zip(hand.cards, positions(hand), strict=True):
        if position not in PB_POSITIONS:
            continue
        if card.card is None:
            out.append(("foreign_card" if card.read == "foreign" else "card_unread", card))
        elif card.flags and not card.flags_cleared:
            out.extend((flag, card) for flag in card.flags)
    return out


def active_holds(shoe: ShoeState | None) -> list[str]:
    return hold_reasons(hold_detail(shoe))


def hold_reasons(detail: list[Hold]) -> list[str]:
    """The reasons of a :func:`hold_detail`, each once, sorted (:func:`active_holds`)."""
    return sorted({reason for reason, _ in detail})


# --- the shoe's gate and indicator ---------------------------------------------------------


def gate_locked(config: EngineConfig, state: EngineState,
                holds: list[str] | None = None) -> bool:
    """`holds`: active_holds(state.shoe), when the caller has it already."""
    shoe = state.shoe
    if state.storage_failed:
        return True
    if shoe is None:
        return False
    if shoe.phase in FINISHED_PHASES:
        return True
    if config.betting_control == "commands" and shoe.betting == "open":
        return True
    return bool(active_holds(shoe) if holds is None else holds)


def indicator(state: EngineState, holds: list[str] | None = None) -> int:
    """The IndicatorPattern the shoe should show (`holds`: as for gate_locked)."""
    shoe = state.shoe
    if shoe is None:
        return _OFF
    if shoe.phase in FINISHED_PHASES or (active_holds(shoe) if holds is None else holds):
        return _STOP
    hand = shoe.hand
    if hand is not None and hand.last_hand:
        return _LAST_HAND
    if shoe.phase == "dealing" and hand is not None:
        nxt = next_position(hand)
        if nxt == "burn":
            return _BURN
        if nxt is not None and nxt.startswith("P"):
            return _PLAYER
        if nxt is not None and nxt.startswith("B"):
            return _BANKER
        return _STOP
    return _BURN


# --- the retained state topic ---------------------------------------------------------------


def public_state(config: EngineConfig, state: EngineState) -> dict[str, Any]:
    """The `{root}/state` snapshot of mqtt-api.md section 3."""
    shoe = state.shoe
    public: dict[str, Any] = {
        "schema_version": 1, "seq": state.seq, "instance": state.instance_id,
        "shoe_id": None, "shoe_state": "no_shoe",
        "betting": None, "hand_no": None, "last_hand": False, "cards": [],
        "pending_cards": [], "next_position": None, "commencement": None, "hold": None,
        "alarms": [{"alarm_id": a.alarm_id, "code": a.code, "since": a.since,
                    "card_index": a.card_index, "fault_code": a.fault_code,
                    "detector": a.detector, "ackable": a.ackable}
                   for a in state.alarms],
        "hands_played": 0, "hands_voided": 0,
    }
    holds = hold_detail(shoe)  # once, for the gate, the indicator and the hold
    reasons = hold_reasons(holds)
    public["gate_locked"] = gate_locked(config, state, reasons)
    public["indicator"] = indicator(state, reasons)
    if shoe is None:
        return public
    held = bool(holds)
    shoe_state: str = shoe.phase
    if held and shoe.phase == "dealing":
        shoe_state = "held"
    com = shoe.commencement
    public.update({
        "shoe_id": shoe.shoe_id, "shoe_state": shoe_state, "betting": shoe.betting,
        "hands_played": shoe.hands_played, "hands_voided": shoe.hands_voided,
        "commencement": {
            "card": com.cards[0].card if com.cards else None,
            "burn_count": com.burn_count,
            "burns_drawn": sum(1 for c in com.cards[1:] if c.position),
        },
    })
    if shoe.phase == "commencement":
        public["pending_cards"] = [{"card": c.card, "card_index": c.card_index}
                                   for c in com.cards if c.position is None]
    hand = shoe.hand
    if hand is not None:
        public["hand_no"] = hand.hand_no
        public["last_hand"] = hand.last_hand
        derived = positions(hand)
        public["cards"] = [{"position": p, "card": c.card, "card_index": c.card_index}
                           for c, p in zip(hand.cards, derived, strict=True)
                           if p not in (None, "surplus")]
        public["pending_cards"] = [{"card": c.card, "card_index": c.card_index}
                                   for c, p in zip(hand.cards, derived, strict=True)
                                   if p in (None, "surplus")]
        if hand.in_progress:
            public["next_position"] = next_position(hand)
    elif shoe.hand_no:  # between hands: the newest hand finished, by a result or a void
        public["hand_no"] = shoe.hand_no
    if shoe.betting == "open":
        nh = hand
        derived = positions(nh) if nh is not None else ()
        pick = {p: c.card for c, p in zip(nh.cards, derived, strict=True)} if nh else {}
        public["next_hand"] = {"hand_no": nh.hand_no if nh else shoe.hand_no + 1,
                               "burn": pick.get("burn"), "P1": pick.get("P1"),
                               "unnecessary_count": nh.unnecessary if nh else 0}
    if held:
        card_index = next((c.card_index for _, c in holds if c is not None), None)
        if shoe.phase == "commencement":  # no hand to void: the shoe is (decisions.md 10)
            allowed = (["realign"] if len(com.cards) > 1 else []) + ["void_shoe"]
        else:
            # Only what can act: a hand to void (Engine._cmd_void_hand's hand in progress),
            # cards to realign (the hand's, or commencement burns while no hand of the
            # shoe is resolved). Between hands, before the next hand's first card (an
            # unshuffled hold there), neither has anything to act on (outside review).
            live = hand is not None and bool(hand.in_progress or hand.cards or hand.holds)
            allowed = (["void_hand"] if live else []) + (
                ["realign"] if (hand is not None and hand.cards)
                or (not shoe.resolved and len(com.cards) > 1) else [])
        if any(r in ENTRY_HOLDS for r in reasons):
            allowed.insert(0, "manual_card")
        if not any(r in UNKNOWN_CARD_HOLDS for r in reasons):
            allowed.insert(0, "resume")
        if UNSHUFFLED in reasons and "void_shoe" not in allowed:
            allowed.append("void_shoe")  # integrity.md section 2
        public["hold"] = {"reasons": reasons, "card_index": card_index, "allowed": allowed}
    return public

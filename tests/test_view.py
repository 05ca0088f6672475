"""shoed.core.view's position reading against its definition (Hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoed.core.cards import ALL_CARDS, value, value_of_rank
from shoed.core.state import CardRec, HandState
from shoed.core.view import derive_positions, next_position, positions

CARD_OR_UNKNOWN = st.one_of(st.none(), st.sampled_from(ALL_CARDS))


def hand_of(cards: list[str | None], has_burn: bool) -> HandState:
    return HandState(hand_no=1, has_burn=has_burn, cards=[
        CardRec(card_index=i, card=c, read="read" if c else "unread", drawn_at=0.0)
        for i, c in enumerate(cards, start=1)])


def next_by_derivation(hand: HandState) -> str | None:
    """next_position as it was defined: derive the hand with one more card added."""
    if not hand.cards and hand.has_burn:
        return "burn"
    known = [c.card for c in hand.cards]
    derived = derive_positions(known, hand.has_burn)
    if derived and derived[-1] in (None, "surplus"):
        return None
    nxt = derive_positions([*known, "AS"], hand.has_burn)[-1]
    return None if nxt == "surplus" else nxt


@given(st.lists(CARD_OR_UNKNOWN, max_size=9), st.booleans())
def test_next_position_is_where_one_more_card_would_be_placed(
        cards: list[str | None], has_burn: bool) -> None:
    hand = hand_of(cards, has_burn)
    assert next_position(hand) == next_by_derivation(hand)


def test_next_position_in_a_hand_being_dealt() -> None:
    assert next_position(hand_of([], True)) == "burn"
    assert next_position(hand_of([], False)) == "P1"
    assert next_position(hand_of(["2S"], True)) == "P1"
    assert next_position(hand_of(["2S", "3H", "4D", "AC"], True)) == "B2"
    assert next_position(hand_of(["2S", "3H", "4D", "AC", "2C"], True)) == "P3"  # 4 v 6
    assert next_position(hand_of(["2S", "3H", "4D", "AC", "5C"], True)) is None  # banker 9
    assert next_position(hand_of(["2S", "9H", "4D", "KC", "KD"], True)) is None  # natural 9
    assert next_position(hand_of(["2S", None, "4D", "AC", "2C"], True)) is None  # unknown
    assert positions(hand_of(["2S", "9H", "4D", "KC", "KD", "3S"], True))[-1] == "surplus"


@given(st.sampled_from(ALL_CARDS))
def test_value_is_the_rank_value(card: str) -> None:
    assert value(card) == value_of_rank(card[0])


def test_value_of_a_non_card_is_refused_as_before() -> None:
    with pytest.raises(ValueError):
        value("XS")

"""Whole shoes through the dealing engine, and the stand-alone/commands mode basics."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from table import CUT, Table

from shoed.core.cards import ALL_CARDS, commencement_count
from shoed.core.engine import Engine
from shoed.core.game import evaluate, next_needed


def deal_shoe(
    table: Table, shoe: list[str], commands: bool, cut_at: int | None = None
) -> list[list[str]]:
    """Deal like a correct dealer; return the cards of every hand in draw order."""
    table.hello()
    table.load()
    cards = iter(shoe)
    first = next(cards)
    table.draw(first)
    for _ in range(commencement_count(first)):
        table.draw(next(cards))
    hands: list[list[str]] = []
    drawn = 1 + commencement_count(first)
    remaining = len(shoe) - drawn
    cut_done = False
    while remaining >= 7:
        if cut_at is not None and not cut_done and drawn >= cut_at:
            table.draw(CUT)
            cut_done = True
            if table.state["shoe_state"] == "shoe_ended":
                break
        if commands:
            out = table.cmd("close_betting")
            assert out.ok, out.error
        table.draw(next(cards))
        hand: list[str] = []
        while next_needed(hand) is not None:
            card = next(cards)
            hand.append(card)
            table.draw(card)
        hands.append(hand)
        drawn += 1 + len(hand)
        remaining = len(shoe) - drawn
        if table.state["shoe_state"] == "shoe_ended":
            break
    return hands


def shuffled(decks: int, seed: int) -> list[str]:
    shoe = list(ALL_CARDS) * decks
    random.Random(seed).shuffle(shoe)
    return shoe


@pytest.mark.parametrize("commands", [False, True])
def test_full_8_deck_shoe_every_result_checked(commands: bool) -> None:
    table = Table(betting_control="commands" if commands else "none")
    shoe = shuffled(8, 42)
    hands = deal_shoe(table, shoe, commands)
    results = table.of("hand_result")
    assert len(results) == len(hands) > 60
    for hand, event in zip(hands, results, strict=True):
        expected = evaluate(hand)
        assert event.winner == expected.winner
        assert (event.player_total, event.banker_total) == (expected.player_total,
                                                            expected.banker_total)
        assert event.player_cards == list(expected.player_cards)
        assert event.banker_pair == expected.banker_pair
    assert [e.hand_no for e in results] == list(range(1, len(hands) + 1))
    seqs = [e.seq for e in table.events]
    assert seqs == list(range(1, len(seqs) + 1))
    indexes = [e.card_index for e in table.of("card")]
    assert sorted(set(indexes)) == list(range(1, max(indexes) + 1))
    assert not table.of("alarm")
    assert table.of("procedure") == []


def test_cut_card_between_hands_ends_shoe() -> None:
    table = Table(betting_control="none")
    deal_shoe(table, shuffled(1, 3), False, cut_at=20)
    types = table.types()
    assert types[-3:] == ["last_hand", "shoe_ended", "shoe_report"]
    assert table.state["shoe_state"] == "shoe_ended"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6), st.sampled_from([1, 8]), st.booleans())
def test_random_shoes_results_and_card_accounting(seed: int, decks: int, commands: bool) -> None:
    table = Table(betting_control="commands" if commands else "none", decks=decks)
    shoe = shuffled(decks, seed)
    hands = deal_shoe(table, shoe, commands)
    results = table.of("hand_result")
    assert len(results) == len(hands)
    for hand, event in zip(hands, results, strict=True):
        assert event.winner == evaluate(hand).winner
    first = shoe[0]
    drawn = 1 + commencement_count(first) + sum(1 + len(h) for h in hands)
    placed = {e.card_index for e in table.of("card")}
    assert len(placed) == drawn


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6), st.data())
def test_snapshot_restore_gives_same_remaining_events(seed: int, data: st.DataObject) -> None:
    table = Table(betting_control="none", decks=1)
    deal_shoe(table, shuffled(1, seed), False)
    cut = data.draw(st.integers(0, len(table.inputs)))
    replay = Table(betting_control="none", decks=1)
    for inp in table.inputs[:cut]:
        replay.feed(inp)
    restored = Engine.restore(replay.engine.config, replay.engine.snapshot())
    rest = []
    for inp in table.inputs[cut:]:
        rest += restored.handle(inp).events
    expected = table.events[len(replay.events):]
    assert [e.model_dump() for e in rest] == [e.model_dump() for e in expected]

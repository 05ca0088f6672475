"""Baccarat core: cards, the third-card chart case by case, outcome facts, pay tables."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoed.core.analyze import analysis, exact_odds
from shoed.core.cards import ALL_CARDS, commencement_count, parse_card, total, value
from shoed.core.errors import CardNotationError
from shoed.core.game import banker_draws, evaluate, next_needed, player_draws
from shoed.core.paytable import PayTable

# The chart of seed 003/004, written out as data (draw = set of P3 values on which the
# banker draws), independently of shoed.core.game's if-chain.
BANKER_CHART = {
    0: set(range(10)), 1: set(range(10)), 2: set(range(10)),
    3: {0, 1, 2, 3, 4, 5, 6, 7, 9},
    4: {2, 3, 4, 5, 6, 7},
    5: {4, 5, 6, 7},
    6: {6, 7},
    7: set(),
}


@pytest.mark.parametrize("banker_total", range(8))
@pytest.mark.parametrize("player_third", range(10))
def test_banker_rule_after_player_drew(banker_total: int, player_third: int) -> None:
    assert banker_draws(banker_total, player_third) == (player_third in BANKER_CHART[banker_total])


@pytest.mark.parametrize("banker_total", range(8))
def test_banker_rule_when_player_stood(banker_total: int) -> None:
    assert banker_draws(banker_total, None) == (banker_total <= 5)


@pytest.mark.parametrize("player_total", range(8))
def test_player_rule(player_total: int) -> None:
    assert player_draws(player_total) == (player_total <= 5)


def test_parse_card_errors_name_the_fault() -> None:
    assert parse_card("td") == "TD"
    with pytest.raises(CardNotationError, match="expected a rank in A23456789TJQK, got '1'"):
        parse_card("10")
    with pytest.raises(CardNotationError, match="expected a suit in SHDC, got 'X'"):
        parse_card("AX")
    with pytest.raises(CardNotationError, match="two characters"):
        parse_card("ASD")
    with pytest.raises(CardNotationError, match="got int"):
        parse_card(5)


def test_values_and_commencement_counts() -> None:
    assert [value(r + "S") for r in "A23456789TJQK"] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0, 0]
    assert [commencement_count(r + "S") for r in "A23456789TJQK"] == [
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10, 10, 10]


def test_examples() -> None:
    # Player natural 9 vs banker 7: four cards, small, player wins.
    r = evaluate(["4S", "3H", "5D", "4C"])
    assert (r.winner, r.player_total, r.banker_total, r.player_natural) == ("player", 9, 7, True)
    assert r.big_small == "small" and r.cards_dealt == 4
    # Player 5 draws 8 (13 -> 3); banker 3 stands on an 8.
    r = evaluate(["2S", "TH", "3D", "3C", "8H"])
    assert r.banker_cards == ("TH", "3C") and r.player_total == 3 and r.winner == "tie"
    # Banker wins with 6: banker six.
    r = evaluate(["TS", "3H", "4D", "3C", "KH"])  # P 4 draws K: 4; B 6 stands
    assert r.winner == "banker" and r.banker_six
    # Pairs by rank: K-K yes, K-Q no.
    r = evaluate(["KS", "QH", "KD", "8C"])  # P 0 vs B 8: natural, 4 cards
    assert r.player_pair and not r.banker_pair


def test_commission_and_super6_payouts() -> None:
    six = evaluate(["TS", "3H", "4D", "3C", "KH"])
    assert PayTable.default("commission").payouts(six)["banker"] == 0.95
    assert PayTable.default("super6").payouts(six)["banker"] == 0.5
    tie = evaluate(["2S", "TH", "3D", "3C", "8H"])
    pays = PayTable.default("super6").payouts(tie)
    assert (pays["banker"], pays["player"], pays["tie"], pays["big"], pays["small"]) == (
        0.0, 0.0, 8.0, 0.54, -1.0)
    custom = PayTable.default("commission", big=0.52, tie=9)
    assert custom.payouts(tie)["tie"] == 9 and custom.payouts(tie)["big"] == 0.52


cards = st.sampled_from(ALL_CARDS)


def deal(source: list[str]) -> list[str]:
    hand: list[str] = []
    while next_needed(hand) is not None:
        hand.append(source[len(hand)])
    return hand


@given(st.lists(cards, min_size=6, max_size=6))
def test_hand_properties(source: list[str]) -> None:
    hand = deal(source)
    assert 4 <= len(hand) <= 6
    r = evaluate(hand)
    assert r.player_total == total(list(r.player_cards)) < 10
    assert r.banker_total == total(list(r.banker_cards)) < 10
    if r.player_natural or r.banker_natural:
        assert len(hand) == 4
    assert r.cards_dealt == len(r.player_cards) + len(r.banker_cards) == len(hand)
    assert r.big_small == ("small" if len(hand) == 4 else "big")
    assert r.banker_six == (r.winner == "banker" and r.banker_total == 6)
    for table_type in ("commission", "super6"):
        pays = PayTable.default(table_type).payouts(r)  # type: ignore[arg-type]
        assert set(pays) == {"banker", "player", "tie", "banker_pair", "player_pair", "big",
                             "small"}
        assert (pays["tie"] > 0) == (r.winner == "tie")
        assert (pays["player"] > 0) == (r.winner == "player")
        assert (pays["banker"] > 0) == (r.winner == "banker")
        assert pays["big"] * pays["small"] < 0


def test_published_8_deck_figures_to_6_decimals() -> None:
    com = analysis(8, "commission")
    s6 = analysis(8, "super6")
    p, edge = com["probabilities"], com["house_edge"]
    assert isinstance(p, dict) and isinstance(edge, dict) and isinstance(s6["house_edge"], dict)
    expected_p = {"banker_win": 0.4585974, "player_win": 0.4462466, "tie": 0.0951560}
    for key, figure in expected_p.items():
        assert p[key] == pytest.approx(figure, abs=5e-7)
    expected_edge = {"banker": 0.010579, "player": 0.012351, "tie": 0.143596,
                     "player_pair": 0.103614, "banker_pair": 0.103614, "big": 0.043457,
                     "small": 0.052829}
    for key, figure in expected_edge.items():
        assert edge[key] == pytest.approx(figure, abs=5e-7), key
    assert s6["house_edge"]["banker"] == pytest.approx(0.014581, abs=5e-7)
    assert str(exact_odds(8).pair) == "31/415"


def test_probabilities_sum_to_one() -> None:
    odds = exact_odds(1)
    assert odds.banker_win + odds.player_win + odds.tie == 1
    assert odds.small + odds.big == 1

"""Side bets and the EZ table: published house edges, settlement case by case, config."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoed.cli import main
from shoed.config import ConfigError, load_settings
from shoed.core.analyze import analysis, exact_odds, house_edges, side_bet_probabilities
from shoed.core.cards import ALL_CARDS, RANKS, total
from shoed.core.game import evaluate, next_needed
from shoed.core.paytable import (
    SIDE_BET_OUTCOMES,
    SIDE_BET_PRESETS,
    SIDE_BETS,
    PayTable,
    SideBet,
)

# The 8-deck house edges of the table (Wizard of Odds agrees where it publishes).
PUBLISHED = {
    ("dragon7", "standard"): 0.076113,
    ("panda8", "standard"): 0.101876,
    ("dragon_bonus_player", "standard"): 0.026517,
    ("dragon_bonus_banker", "standard"): 0.093731,
    ("lucky6", "12/20"): 0.166836,
    ("lucky6", "12/23"): 0.116985,
    ("perfect_pair", "either_25"): 0.130294,
    ("perfect_pair", "one_25_both_250"): 0.066235,
    ("either_pair", "standard"): 0.137099,
}


@pytest.fixture(scope="module")
def odds8() -> object:
    return exact_odds(8)


@pytest.mark.parametrize(("bet", "preset"), sorted(PUBLISHED))
def test_published_side_bet_edges_8_decks(odds8: object, bet: str, preset: str) -> None:
    table = dataclasses.replace(PayTable.default("commission"),
                                side_bets=(SideBet.preset(bet, preset),))
    edge = house_edges(odds8, table)[bet]  # type: ignore[arg-type]
    assert float(edge) == pytest.approx(PUBLISHED[(bet, preset)], abs=5e-7)


def test_ez_table_edges_and_its_default_side_bets() -> None:
    ez = analysis(8, "ez")
    edge = ez["house_edge"]
    assert isinstance(edge, dict)
    assert edge["banker"] == pytest.approx(0.010183, abs=5e-7)
    assert edge["player"] == pytest.approx(0.012351, abs=5e-7)
    assert edge["dragon7"] == pytest.approx(0.076113, abs=5e-7)
    assert edge["panda8"] == pytest.approx(0.101876, abs=5e-7)
    assert set(edge) - {"banker", "player", "tie", "player_pair", "banker_pair", "big",
                        "small"} == {"dragon7", "panda8"}


def test_outcome_probabilities_are_exact_and_consistent(odds8: object) -> None:
    for bet in SIDE_BETS:
        probabilities = side_bet_probabilities(odds8, bet)  # type: ignore[arg-type]
        assert set(probabilities) == set(SIDE_BET_OUTCOMES[bet])
        assert all(isinstance(f, Fraction) and 0 <= f <= 1 for f in probabilities.values())
        assert sum(probabilities.values()) < 1
    lucky = side_bet_probabilities(odds8, "lucky6")  # type: ignore[arg-type]
    assert sum(lucky.values()) == odds8.banker_win_six  # type: ignore[attr-defined]
    # perfect pairs by counting: a side's first two cards are one exact card of 8 copies
    n = 416
    pp = side_bet_probabilities(odds8, "perfect_pair")  # type: ignore[arg-type]
    one_side = Fraction(7, n - 1)
    assert pp["one"] + 2 * pp["both"] == 2 * one_side


@pytest.mark.parametrize("decks", [1, 12])
def test_every_deck_count_from_1_to_12(decks: int) -> None:
    result = analysis(decks, "commission", side_bets=list(SIDE_BETS))
    edge = result["house_edge"]
    assert isinstance(edge, dict)
    assert set(SIDE_BETS) <= set(edge)
    assert all(-1 < v <= 1 for v in edge.values())
    if decks == 1:
        assert edge["perfect_pair"] == 1  # one copy of each card: never a perfect pair
    with pytest.raises(ValueError, match="1 to 12 decks"):
        analysis(13, "commission")


# --- settlement, case by case --------------------------------------------------------------


def pays(cards: list[str], table_type: str = "commission", **presets: str) -> dict[str, float]:
    bets = tuple(SideBet.preset(b, presets.get(b)) for b in SIDE_BETS)
    table = dataclasses.replace(PayTable.default(table_type), side_bets=bets)  # type: ignore[arg-type]
    return table.payouts(evaluate(cards))


def test_dragon7_and_the_ez_push() -> None:
    # P: T 6 = 6 stands; B: T 2 = 2 draws 5 -> 7: banker wins with a three-card 7
    p = pays(["TS", "TD", "6H", "2C", "5S"], "ez")
    assert (p["dragon7"], p["banker"], p["player"]) == (40.0, 0.0, -1.0)
    assert pays(["TS", "TD", "6H", "2C", "5S"])["banker"] == 0.95  # commission pays it
    # the same banker three-card 7 against a player 7 is a tie: Dragon 7 loses
    tie = pays(["TS", "TD", "7H", "2C", "5S"], "ez")
    assert (tie["dragon7"], tie["banker"], tie["tie"]) == (-1.0, 0.0, 8.0)
    # a two-card banker 7 win is no Dragon 7, and EZ pays it 1:1
    two = pays(["TS", "3D", "6H", "4C"], "ez")  # P 6 stands, B 7 stands
    assert (two["dragon7"], two["banker"]) == (-1.0, 1.0)


def test_panda8_needs_a_player_win() -> None:
    # P: T 3 = 3 draws 5 -> 8; B: T 7 = 7 stands: player wins with a three-card 8
    assert pays(["TS", "TD", "3H", "7C", "5S"])["panda8"] == 25.0
    # P three-card 8, B 3 draws 5 -> 8: a tie loses
    tie = pays(["TS", "TD", "3H", "3C", "5S", "5D"])
    assert (tie["panda8"], tie["tie"]) == (-1.0, 8.0)
    # P three-card 8, B 4 draws 5 -> 9: banker wins
    assert pays(["TS", "TD", "3H", "4C", "5S", "5D"])["panda8"] == -1.0


def test_dragon_bonus() -> None:
    # natural tie 8-8: both sides push
    p = pays(["4S", "5D", "4H", "3C"])
    assert (p["dragon_bonus_player"], p["dragon_bonus_banker"]) == (0.0, 0.0)
    # player natural 9 beats banker 7 (by 2): a natural win pays 1:1
    p = pays(["4S", "TD", "5H", "7C"])
    assert (p["dragon_bonus_player"], p["dragon_bonus_banker"]) == (1.0, -1.0)
    # player 2 draws 7 -> 9, banker 0 draws T -> 0: a win by 9 pays 30
    p = pays(["TS", "TD", "2H", "KC", "7S", "TH"])
    assert (p["dragon_bonus_player"], p["dragon_bonus_banker"]) == (30.0, -1.0)
    # banker 7 stands, player 3 draws T -> 3: banker by 4 pays 1
    assert pays(["TS", "TD", "3H", "7C", "TC"])["dragon_bonus_banker"] == 1.0
    # banker 7 against a three-card player 6 (by 1): loses; a non-natural tie loses
    assert pays(["TS", "TD", "2H", "7C", "4S"])["dragon_bonus_banker"] == -1.0
    p = pays(["TS", "TD", "7H", "2C", "5S"])  # 7-7, three-card banker
    assert (p["dragon_bonus_player"], p["dragon_bonus_banker"]) == (-1.0, -1.0)


def test_lucky6() -> None:
    # player 2 draws 3 -> 5, banker 6 stands (P3 is 3): two-card 6 wins
    assert pays(["TS", "TD", "2H", "6C", "3S"])["lucky6"] == 12.0
    # player 5 (three cards), banker 2 draws 4 -> 6: three-card 6 wins
    three = ["TS", "TD", "2H", "2C", "3S", "4D"]
    assert pays(three)["lucky6"] == 20.0
    assert pays(three, lucky6="12/23")["lucky6"] == 23.0
    assert pays(three, "super6")["banker"] == 0.5
    # a 6-6 tie loses
    assert pays(["TS", "TD", "6H", "2C", "4S"])["lucky6"] == -1.0


def test_perfect_pair_and_either_pair() -> None:
    both = ["4S", "2D", "4S", "2D"]  # P 8 natural: 4 cards
    assert pays(both)["perfect_pair"] == 25.0
    assert pays(both, perfect_pair="one_25_both_250")["perfect_pair"] == 250.0
    one = ["4S", "2D", "4S", "2C"]
    assert pays(one)["perfect_pair"] == 25.0
    assert pays(one, perfect_pair="one_25_both_250")["perfect_pair"] == 25.0
    rank_only = ["4S", "2D", "4H", "3C"]
    assert (pays(rank_only)["perfect_pair"], pays(rank_only)["either_pair"]) == (-1.0, 5.0)
    assert pays(["4S", "2D", "5H", "3C"])["either_pair"] == -1.0


def test_side_bets_appear_only_when_offered() -> None:
    hand = evaluate(["TS", "TD", "6H", "2C", "5S"])
    assert not set(PayTable.default("commission").payouts(hand)) & set(SIDE_BETS)
    assert set(PayTable.default("ez").payouts(hand)) & set(SIDE_BETS) == {"dragon7", "panda8"}


# --- property: every payout is the pay table's figure for the hand's outcome -------------


def deal(source: list[str]) -> list[str]:
    hand: list[str] = []
    while next_needed(hand) is not None:
        hand.append(source[len(hand)])
    return hand


RANK = {r: i for i, r in enumerate(RANKS)}


def oracle(bet: str, player: list[str], banker: list[str]) -> str | None:
    """The outcome, worked out from the cards alone (independently of HandResult)."""
    pt, bt = total(player), total(banker)
    winner = "player" if pt > bt else "banker" if bt > pt else "tie"
    natural = total(player[:2]) >= 8 or total(banker[:2]) >= 8
    if bet == "dragon7":
        return "win" if winner == "banker" and len(banker) == 3 and bt == 7 else None
    if bet == "panda8":
        return "win" if winner == "player" and len(player) == 3 and pt == 8 else None
    if bet.startswith("dragon_bonus_"):
        side = bet.removeprefix("dragon_bonus_")
        if natural:
            return "natural_win" if winner == side else (
                "natural_tie" if winner == "tie" else None)
        return f"win_by_{abs(pt - bt)}" if winner == side and abs(pt - bt) >= 4 else None
    if bet == "lucky6":
        if winner == "banker" and bt == 6:
            return "two_cards" if len(banker) == 2 else "three_cards"
        return None
    if bet == "perfect_pair":
        n = (player[0] == player[1]) + (banker[0] == banker[1])
        return [None, "one", "both"][n]
    assert bet == "either_pair"
    return "win" if RANK[player[0][0]] == RANK[player[1][0]] or \
        RANK[banker[0][0]] == RANK[banker[1][0]] else None


figure = st.sampled_from([0.0, 0.5, 1.0, 2.0, 7.5, 40.0, 250.0])


@given(source=st.lists(st.sampled_from(ALL_CARDS), min_size=6, max_size=6),
       presets=st.fixed_dictionaries({b: st.sampled_from(sorted(SIDE_BET_PRESETS[b]))
                                      for b in SIDE_BETS}),
       override=st.tuples(st.sampled_from(SIDE_BETS), figure),
       table_type=st.sampled_from(["commission", "super6", "ez"]))
def test_payouts_match_the_pay_table(source: list[str], presets: dict[str, str],
                                     override: tuple[str, float], table_type: str) -> None:
    hand = deal(source)
    result = evaluate(hand)
    bets = []
    for bet in SIDE_BETS:
        changes = {SIDE_BET_OUTCOMES[bet][0]: override[1]} if bet == override[0] else {}
        bets.append(SideBet.preset(bet, presets[bet], changes))
    table = dataclasses.replace(PayTable.default(table_type),  # type: ignore[arg-type]
                                side_bets=tuple(bets))
    paid = table.payouts(result)
    player, banker = list(result.player_cards), list(result.banker_cards)
    for bet in bets:
        outcome = oracle(bet.name, player, banker)
        expected = -1.0 if outcome is None else dict(bet.pays)[outcome]
        assert paid[bet.name] == expected, (bet.name, hand, outcome)
    seven = result.winner == "banker" and len(banker) == 3 and result.banker_total == 7
    if table_type == "ez" and seven:
        assert paid["banker"] == 0.0
    elif result.winner == "banker":
        assert paid["banker"] > 0


# --- config and the command line ----------------------------------------------------------


def write(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    path = tmp_path / "shoed.toml"
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_config_presets_and_overrides(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path, """
[rules]
table_type = "ez"
[rules.side_bets.panda8]
enabled = false
[rules.side_bets.lucky6]
preset = "12/23"
[rules.side_bets.perfect_pair]
preset = "one_25_both_250"
both = 200
[rules.side_bets.dragon_bonus_banker]
win_by_9 = 40
""")
    table = load_settings(path).rules.paytable()
    offered = {b.name: dict(b.pays) for b in table.side_bets}
    assert set(offered) == {"dragon7", "lucky6", "perfect_pair", "dragon_bonus_banker"}
    assert offered["lucky6"] == {"two_cards": 12.0, "three_cards": 23.0}
    assert offered["perfect_pair"] == {"one": 25.0, "both": 200.0}
    assert offered["dragon_bonus_banker"]["win_by_9"] == 40.0
    assert offered["dragon_bonus_banker"]["win_by_8"] == 10.0
    assert table.banker_on_three_card_seven == 0.0


def test_a_side_bet_outcome_can_be_made_to_lose(tmp_path: pathlib.Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """-1 for an outcome: the house does not pay it (outside review: every figure was
    refused below 0, so a Dragon Bonus whose natural tie loses could not be set)."""
    path = write(tmp_path, "[rules.side_bets.dragon_bonus_player]\nnatural_tie = -1\n")
    table = load_settings(path).rules.paytable()
    natural_tie = evaluate(["4S", "5D", "4H", "3C"])  # 8-8
    assert table.payouts(natural_tie)["dragon_bonus_player"] == -1.0
    standard = run_json(capsys, "--side-bets", "dragon_bonus_player")
    losing = run_json(capsys, "--config", str(path))
    p_tie = standard["probabilities"]["dragon_bonus_player_natural_tie"]
    assert losing["house_edge"]["dragon_bonus_player"] == pytest.approx(
        standard["house_edge"]["dragon_bonus_player"] + p_tie, abs=1e-12)


def test_analyze_reads_a_config_without_its_secret_files(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`analyze --config` needs the pay table only: a production config whose password,
    TLS files or card manifest are not there (an auditor's copy) is read (outside review:
    it was refused, `mqtt.password_file: ... does not exist`). `run` still checks them."""
    path = write(tmp_path, "[mqtt]\npassword_file = '/nonexistent/pw'\n"
                           "ca_file = '/nonexistent/ca.pem'\n"
                           "[cards]\nmanifest = '/nonexistent/m.csv'\n"
                           "[rules]\ntable_type = 'ez'\n")
    out = run_json(capsys, "--config", str(path))
    assert out["house_edge"]["banker"] == pytest.approx(0.010183, abs=5e-7)
    with pytest.raises(ConfigError, match=r"mqtt\.password_file"):
        load_settings(path)


def test_analyze_names_a_disabled_bet_at_its_configured_figures(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--side-bets lucky6` on a config whose lucky6 is `enabled = false` analysed the
    preset's figures (12/20), not the configured ones, though the README says "at its
    configured figures"; without --side-bets a disabled bet stays out."""
    path = write(tmp_path, "[rules.side_bets.lucky6]\nenabled = false\npreset = '12/23'\n"
                           "two_cards = 11\n")
    named = run_json(capsys, "--config", str(path), "--side-bets", "lucky6")
    assert named["side_bets"]["lucky6"] == {"two_cards": 11.0, "three_cards": 23.0}
    assert "lucky6" not in run_json(capsys, "--config", str(path))["house_edge"]
    every = run_json(capsys, "--config", str(path), "--side-bets", "all")
    assert every["side_bets"]["lucky6"] == {"two_cards": 11.0, "three_cards": 23.0}


def test_config_without_side_bets_offers_none_except_ez() -> None:
    rules = load_settings(None).rules
    assert rules.paytable().side_bets == ()
    ez = rules.model_copy(update={"table_type": "ez"}).paytable()
    assert [b.name for b in ez.side_bets] == ["dragon7", "panda8"]


@pytest.mark.parametrize(("text", "needle"), [
    ("[rules.side_bets.lucky6]\npreset = '12/24'\n", "rules.side_bets.lucky6.preset"),
    ("[rules.side_bets.dragon7]\nwin = -3\n", "rules.side_bets.dragon7.win"),
    ("[rules.side_bets.dragon7]\nwin = -1.5\n", "rules.side_bets.dragon7.win"),
    ("[rules.side_bets.dragon7]\nlose = 3\n", "rules.side_bets.dragon7.lose"),
    ("[rules.side_bets.dragon9]\nwin = 3\n", "rules.side_bets.dragon9"),
    ("[rules.side_bets.perfect_pair]\nboth = 'lots'\n", "rules.side_bets.perfect_pair.both"),
    ("[rules]\ntable_type = 'dragon'\n", "rules.table_type"),
    ("[rules.payouts]\nbanker_three_card_seven = -1\n",
     "rules.payouts.banker_three_card_seven"),
    ("[integrity]\nmonotone_run = 2\n", "integrity.monotone_run"),
    ("[integrity]\ncusum_suit = -1\n", "integrity.cusum_suit"),
    ("[integrity]\non_unshuffled = 'stop'\n", "integrity.on_unshuffled"),
    ("[integrity]\nsame_colour_run = 5\n", "integrity.same_colour_run"),
])
def test_bad_values_are_refused_naming_the_key(tmp_path: pathlib.Path, text: str,
                                               needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        load_settings(write(tmp_path, text))


def test_integrity_config(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "[integrity]\nsuited_step_run = 0\ncusum_rank_step = 20\n"
                           "on_unshuffled = 'alarm'\n")
    monkeypatch.setenv("SHOED_INTEGRITY__MONOTONE_RUN", "9")
    monkeypatch.setenv("SHOED_RULES__SIDE_BETS__LUCKY6__PRESET", "12/23")
    settings = load_settings(path)
    section = settings.integrity
    assert section.on_unshuffled == "alarm"
    t = section.thresholds()
    assert (t.suited_step_run, t.cusum_rank_step, t.monotone_run) == (0, 20.0, 9)
    lucky6 = settings.rules.paytable().side_bet("lucky6")
    assert lucky6 is not None and dict(lucky6.pays)["three_cards"] == 23.0
    monkeypatch.delenv("SHOED_INTEGRITY__MONOTONE_RUN")
    monkeypatch.delenv("SHOED_RULES__SIDE_BETS__LUCKY6__PRESET")
    assert load_settings(None).integrity.on_unshuffled == "hold"


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, dict[str, float]]:
    assert main(["analyze", *argv, "--json"]) == 0
    out: dict[str, dict[str, float]] = json.loads(capsys.readouterr().out)
    return out


def test_cli_side_bets_all(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "--decks", "8", "--table", "commission", "--side-bets", "all")
    edge, p = out["house_edge"], out["probabilities"]
    assert set(SIDE_BETS) <= set(edge)
    assert edge["lucky6"] == pytest.approx(0.166836, abs=5e-7)  # default preset 12/20
    assert edge["perfect_pair"] == pytest.approx(0.130294, abs=5e-7)  # either 25:1
    assert edge["dragon_bonus_player"] == pytest.approx(0.026517, abs=5e-7)
    for key in ("lucky6_two_cards", "lucky6_three_cards", "dragon_bonus_player_win_by_9",
                "dragon_bonus_banker_natural_win", "dragon7_win", "panda8_win",
                "perfect_pair_one", "perfect_pair_both", "either_pair_win"):
        assert 0 < p[key] < 1, key


def test_cli_ez_and_a_list(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "--table", "ez")
    assert out["house_edge"]["banker"] == pytest.approx(0.010183, abs=5e-7)
    assert {"dragon7", "panda8"} <= set(out["house_edge"])
    out = run_json(capsys, "--table", "super6", "--side-bets", "lucky6,either_pair")
    assert set(out["house_edge"]) & set(SIDE_BETS) == {"lucky6", "either_pair"}
    assert out["house_edge"]["banker"] == pytest.approx(0.014581, abs=5e-7)


def test_cli_takes_the_pay_table_from_a_config(tmp_path: pathlib.Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "[rules]\ndecks = 8\n[rules.side_bets.lucky6]\npreset = '12/23'\n"
                           "[rules.side_bets.perfect_pair]\npreset = 'one_25_both_250'\n")
    out = run_json(capsys, "--config", str(path))
    assert out["house_edge"]["lucky6"] == pytest.approx(0.116985, abs=5e-7)
    assert out["house_edge"]["perfect_pair"] == pytest.approx(0.066235, abs=5e-7)
    # --side-bets all keeps the configured figures and adds the rest at their defaults
    out = run_json(capsys, "--config", str(path), "--side-bets", "all")
    assert out["house_edge"]["lucky6"] == pytest.approx(0.116985, abs=5e-7)
    assert out["house_edge"]["dragon7"] == pytest.approx(0.076113, abs=5e-7)


def test_cli_refuses_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "--side-bets", "lucky7"]) == 2
    assert "lucky7" in capsys.readouterr().err
    for blank in ("", ",", " ", "dragon7,"):  # once analysed nothing, or the defaults
        assert main(["analyze", "--table", "ez", "--side-bets", blank]) == 2
        assert "(an empty name)" in capsys.readouterr().err
    assert main(["analyze", "--side-bets", "dragon7,dragon7"]) == 2
    assert "dragon7 twice" in capsys.readouterr().err
    assert main(["analyze", "--table", "ez", "--side-bets", "none", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["side_bets"] == {}
    with pytest.raises(SystemExit) as leaving:  # argparse refuses it, naming the option
        main(["analyze", "--decks", "13"])
    assert leaving.value.code == 2
    assert "--decks" in capsys.readouterr().err


def test_cli_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "--table", "ez"]) == 0
    text = capsys.readouterr().out
    assert "dragon7" in text and "1.0183%" in text and "win 40" in text


def test_the_engine_settles_the_offered_side_bets_in_every_hand_result(
        tmp_path: pathlib.Path) -> None:
    from table import Table

    path = write(tmp_path, "[rules]\ntable_type = 'ez'\n[rules.side_bets.lucky6]\n")
    rules = load_settings(path).rules
    table = Table(betting_control="none", table_type=rules.table_type,
                  paytable=rules.paytable())
    table.commence("AS", ["2C"])
    for card in ["KD", "TS", "TD", "6H", "2C", "5S"]:  # burn, then a banker three-card 7
        table.draw(card)
    for card in ["KD", "4S", "TD", "5H", "7C"]:  # burn, then a player natural 9
        table.draw(card)
    first, second = (r.payouts for r in table.of("hand_result"))
    assert (first["banker"], first["dragon7"], first["panda8"], first["lucky6"]) == (
        0.0, 40.0, -1.0, -1.0)
    assert (second["player"], second["dragon7"], second["panda8"]) == (1.0, -1.0, -1.0)
    assert set(first) == set(second) == {"banker", "player", "tie", "banker_pair",
                                         "player_pair", "big", "small", "dragon7", "panda8",
                                         "lucky6"}

"""One scenario (at least) per dealing rule, profile and mode: dealing-rules.md section 3."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from table import CUT, UNREAD, Table

from shoed.core.cards import ALL_CARDS
from shoed.core.inputs import DeviceItem, DeviceLink, StorageStatus

# A hand with no third card: P 2+5=7... player 7 stands, banker 0+6=6 stands -> player.
STAND_HAND = ["2S", "TH", "5D", "6C"]
# Natural: player 4+5=9.
NATURAL_HAND = ["4S", "3H", "5D", "4C"]


def ready(mode: str = "none", **config: object) -> Table:
    table = Table(betting_control=mode, **config)
    table.hello()
    table.commence("AS", ["2C"])  # first card A: one burn
    return table


def positions(table: Table, mark: int = 0) -> list[tuple[str | None, str | None]]:
    return [(e.position, e.card) for e in table.of("card", mark)]


# -- rule 1: new shoe ------------------------------------------------------------------

def test_shoe_loaded_starts_and_in_play_alarms() -> None:
    table = Table(betting_control="none")
    table.load()
    assert table.types() == ["shoe_started"]
    table.load()  # before its first card it belongs to that shoe
    assert table.types() == ["shoe_started"]
    table.draw("3S")
    m = table.mark()
    table.load()
    (alarm,) = table.of("alarm", m)
    assert alarm.code == "shoe_loaded_in_play" and alarm.momentary


def test_new_shoe_refused_in_play_and_forced() -> None:
    table = ready()
    out = table.cmd("new_shoe")
    assert not out.ok and out.error is not None and out.error.code == "shoe_in_play"
    m = table.mark()
    out = table.cmd("new_shoe", force=True)
    assert out.ok
    assert table.types(m) == ["shoe_voided", "shoe_report", "shoe_started",
                              "supervisor_action"]
    assert table.of("shoe_voided", m)[0].reason == "replaced"


# -- rule 2: commencement ----------------------------------------------------------------

def test_commencement_burns_by_first_card_value() -> None:
    table = Table(betting_control="none")
    table.load()
    table.draw("KD")
    (com,) = table.of("commencement")
    assert (com.card, com.burn_count) == ("KD", 10)
    for _ in range(10):
        table.draw("3C")
    assert table.state["shoe_state"] == "between_hands"
    assert [p for p, _ in positions(table)] == ["commencement"] + ["commencement_burn"] * 10
    assert [e.card_index for e in table.of("card")] == list(range(1, 12))


def test_unread_commencement_card_waits_for_manual_entry() -> None:
    table = Table(betting_control="none")
    table.load()
    table.draw(UNREAD)
    table.draw("4C")
    table.draw("4D")
    (com,) = table.of("commencement")
    assert (com.card, com.burn_count) == (None, None)
    assert [p for p, _ in positions(table)] == ["commencement", None, None]
    assert table.of("alarm")[0].code == "card_unread"
    m = table.mark()
    out = table.cmd("manual_card", card_index=1, card="2H")
    assert out.ok
    assert table.of("commencement", m)[0].burn_count == 2
    assert [(e.position, e.card_index) for e in table.of("card", m)] == [
        ("commencement", 1), ("commencement_burn", 2), ("commencement_burn", 3)]
    assert table.state["shoe_state"] == "between_hands"
    assert [a.active for a in table.of("alarm")] == [True, False]


# -- rules 3, 4: a burn before every hand, hand 1 included --------------------------------

def test_first_card_of_every_hand_is_its_burn() -> None:
    table = ready()
    for hand_no in (1, 2):
        m = table.mark()
        table.draw("9S")
        for card in STAND_HAND:
            table.draw(card)
        assert [p for p, _ in positions(table, m)] == ["burn", "P1", "B1", "P2", "B2"]
        (result,) = table.of("hand_result", m)
        assert result.hand_no == hand_no and result.winner == "player"
        assert result.payouts["player"] == 1.0 and result.payouts["small"] == 1.5


# -- rule 5: betting control -------------------------------------------------------------

def test_commands_mode_card_during_betting_becomes_burn() -> None:
    table = ready("commands")
    assert table.state["betting"] == "open"
    m = table.mark()
    table.draw("9S")
    assert table.types(m) == ["procedure", "card"]
    proc = table.of("procedure", m)[0]
    assert (proc.rule, proc.action) == ("unnecessary_card", "next_burn")
    assert positions(table, m) == [("burn", "9S")]
    assert table.of("card", m)[0].hand_no == 1
    assert table.state["next_hand"] == {"hand_no": 1, "burn": "9S", "P1": None,
                                        "unnecessary_count": 1}
    out = table.cmd("close_betting", hand_no=1)
    assert out.ok
    for card in STAND_HAND:
        table.draw(card)
    assert table.of("hand_result")[0].hand_no == 1


def test_close_betting_refusals_and_repeat() -> None:
    none = ready("none")
    assert none.cmd("close_betting").error.code == "betting_control_none"  # type: ignore[union-attr]
    table = Table(betting_control="commands")
    table.load()
    assert table.cmd("close_betting").error.code == "not_between_hands"  # type: ignore[union-attr]
    table.draw("AS")
    table.draw("2C")
    assert table.cmd("close_betting", hand_no=5).error.code == "wrong_hand"  # type: ignore[union-attr]
    assert table.cmd("close_betting", hand_no=1).ok
    m = table.mark()
    out = table.cmd("close_betting", hand_no=1)
    assert out.ok and out.result["repeat"] is True
    assert table.types(m) == ["supervisor_action"]
    table.cmd("void_shoe", reason="test")
    assert table.cmd("close_betting").error.code == "shoe_ended"  # type: ignore[union-attr]


# -- rule 6: unnecessary cards -----------------------------------------------------------

def test_burn_then_player_second_card_is_exposed_p1_third_voids() -> None:
    table = ready("commands", unnecessary_cards="burn_then_player")
    table.draw("9S")
    m = table.mark()
    table.draw("5H")
    card = table.of("card", m)[0]
    assert (card.position, card.exposed_during_betting, card.hand_no) == ("P1", True, 1)
    assert table.of("alarm", m)[0].code == "card_exposed_during_betting"
    assert table.of("procedure", m)[0].action == "next_player_first"
    m = table.mark()
    table.draw("6H")
    assert table.of("procedure", m)[0].action == "shoe_voided"
    assert table.of("shoe_voided", m)[0].reason == "unnecessary_cards"
    assert table.state["shoe_state"] == "shoe_voided"


def test_burn_then_void_second_card_voids_and_result_stands() -> None:
    table = ready("none", unnecessary_cards="burn_then_void")
    table.draw("9S")
    # The last card of the hand and two surplus cards in one pull.
    for card in STAND_HAND[:3]:
        table.draw(card)
    m = table.mark()
    table.draw(STAND_HAND[3], "7D", "8D")
    assert table.types(m)[:2] == ["procedure", "card"]  # multi_card_pull, then B2
    assert table.of("hand_result", m)[0].winner == "player"
    procs = [(p.rule, p.action) for p in table.of("procedure", m)]
    assert procs == [("multi_card_pull", "reordered"), ("unnecessary_card", "next_burn"),
                     ("unnecessary_card", "shoe_voided")]
    assert table.state["shoe_state"] == "shoe_voided"
    assert table.state["hands_played"] == 1


def test_none_mode_surplus_of_completing_pull_becomes_next_burn() -> None:
    table = ready("none")
    table.draw("9S")
    for card in STAND_HAND[:3]:
        table.draw(card)
    m = table.mark()
    table.draw(STAND_HAND[3], "7D")
    assert positions(table, m) == [("B2", "6C"), ("burn", "7D")]
    assert table.of("card", m)[1].hand_no == 2
    assert table.state["shoe_state"] == "dealing" and table.state["next_position"] == "P1"


# -- rule 7: multi-card pulls ------------------------------------------------------------

def test_multi_card_pull_upper_card_first_whatever_order_sent() -> None:
    table = ready("none")
    table.draw("9S")
    m = table.mark()
    table.draw("2S", "TH", "5D", order=[2, 0, 1])
    assert positions(table, m) == [("P1", "2S"), ("B1", "TH"), ("P2", "5D")]
    proc = table.of("procedure", m)[0]
    assert (proc.rule, proc.action) == ("multi_card_pull", "reordered")
    assert [c["card"] for c in proc.cards] == ["2S", "TH", "5D"]


# -- rule 8: misorder ----------------------------------------------------------------------

def test_report_misorder_records_and_result_unaffected() -> None:
    table = ready()
    table.draw("9S")
    for card in STAND_HAND:
        table.draw(card)
    m = table.mark()
    assert table.cmd("report_misorder", hand_no=1, detail="B1 on player spot").ok
    proc = table.of("procedure", m)[0]
    assert (proc.rule, proc.action, proc.hand_no) == ("misorder_reported", "recorded", 1)
    assert table.cmd("report_misorder", hand_no=9, detail="x").error.code == "unknown_hand"  # type: ignore[union-attr]
    recall = table.cmd("recall", hands=1).result["hands"][0]
    assert recall["misorders"][0]["detail"] == "B1 on player spot"
    assert recall["result"]["winner"] == "player"


# -- rule 9: the cut card ----------------------------------------------------------------

def test_cut_card_mid_hand_makes_it_the_last() -> None:
    table = ready()
    table.draw("9S")
    table.draw(STAND_HAND[0])
    m = table.mark()
    table.draw(STAND_HAND[1], CUT)
    assert table.of("last_hand", m)[0].hand_no == 1
    for card in STAND_HAND[2:]:
        table.draw(card)
    assert table.types()[-3:] == ["hand_result", "shoe_ended", "shoe_report"]
    m = table.mark()
    table.draw("QS")
    assert positions(table, m) == [("after_shoe_end", "QS")]
    assert table.of("procedure", m)[0].rule == "card_after_shoe_end"


def test_cut_card_between_hands_commands_mode_unnecessary_become_after_end() -> None:
    table = ready("commands")
    table.cmd("close_betting")
    table.draw("9S")
    for card in STAND_HAND:
        table.draw(card)
    table.draw("8S")  # unnecessary: next burn
    m = table.mark()
    table.draw(CUT)
    assert table.types(m) == ["last_hand", "shoe_ended", "card", "procedure", "shoe_report"]
    assert table.of("last_hand", m)[0].hand_no == 1
    assert positions(table, m) == [("after_shoe_end", "8S")]


def test_between_hands_the_state_names_the_newest_hand_finished_voided_or_not() -> None:
    table = ready()
    table.draw("9S")
    for card in STAND_HAND:
        table.draw(card)
    assert table.state["hand_no"] == 1
    table.draw("8S")  # hand 2's burn
    assert table.cmd("void_hand", hand_no=2, reason="dropped card").ok
    assert table.state["shoe_state"] == "between_hands" and table.state["hand_no"] == 2
    m = table.mark()
    table.draw(CUT)  # between hands: the hand just finished, voided, was the last
    assert [e.hand_no for e in table.of("last_hand", m)] == [2]


def test_cut_card_in_commencement_and_second_cut_card() -> None:
    table = Table(betting_control="none")
    table.load()
    table.draw("3S")
    table.draw(CUT)
    assert table.of("alarm")[0].code == "cut_card_in_commencement"
    table2 = ready()
    table2.draw("9S")
    table2.draw(CUT)
    m = table2.mark()
    table2.draw(CUT)
    assert table2.of("procedure", m)[0].rule == "cut_card_ignored"


def test_card_without_shoe() -> None:
    table = Table(betting_control="none")
    table.draw("5S")
    (card,) = table.of("card")
    assert (card.position, card.card_index, card.shoe_id) == ("without_shoe", None, None)
    assert table.of("procedure")[0].rule == "card_without_shoe"


def test_cut_card_command_for_shoes_without_sensor() -> None:
    table = Table(betting_control="none")
    assert table.cmd("cut_card").error.code == "no_shoe"  # type: ignore[union-attr]
    table = ready()
    assert table.cmd("cut_card").ok
    assert table.types()[-4:] == ["last_hand", "shoe_ended", "supervisor_action",
                                 "shoe_report"]


# -- rule 10: holds ------------------------------------------------------------------------

def test_unread_card_holds_and_pending_cards_wait() -> None:
    table = ready()
    table.draw("9S")
    table.draw("2S")
    table.draw(UNREAD)  # B1 unread
    assert table.state["shoe_state"] == "held"
    assert table.state["hold"]["reasons"] == ["card_unread"]
    table.draw("5D")  # P2: determined
    table.draw("6C")  # B2: determined
    table.draw("3H")  # a third card? depends on B1: pending
    assert positions(table)[-3:] == [("P2", "5D"), ("B2", "6C"), (None, "3H")]
    assert table.cmd("resume").error.code == "card_unknown"  # type: ignore[union-attr]
    m = table.mark()
    assert table.cmd("manual_card", card_index=5, card="TH").ok
    # B1 = T: player 7 stands, banker 6 stands -> 3H is surplus -> next burn.
    assert table.of("hand_result", m)[0].banker_cards == ["TH", "6C"]
    assert ("burn", "3H") in positions(table, m)
    alarms = [(a.code, a.active) for a in table.of("alarm")]
    assert alarms == [("card_unread", True), ("card_unread", False)]


def test_unread_burn_needs_no_entry() -> None:
    table = ready()
    table.draw(UNREAD)
    for card in STAND_HAND:
        table.draw(card)
    assert table.of("hand_result")[0].winner == "player"
    assert not table.of("alarm")


def test_cards_lost_between_hands_holds_next_hand_until_resume() -> None:
    table = ready()
    table.gap(1)
    assert table.of("alarm")[0].code == "cards_lost"
    table.draw("9S")
    for card in STAND_HAND:
        table.draw(card)
    assert not table.of("hand_result") and table.state["shoe_state"] == "held"
    m = table.mark()
    assert table.cmd("resume").ok
    assert table.types(m)[:2] == ["alarm", "hand_result"]


def test_incomplete_pull_timeout_and_jam_pause() -> None:
    table = ready()
    table.draw("9S")
    table.draw("2S", "TH", order=[1])  # only the lower card arrives
    table.fault(2, True)  # card jam: the 3 s do not run
    table.tick(10)
    assert not [a for a in table.of("alarm") if a.code == "incomplete_pull"]
    table.fault(2, False)
    table.tick(2.4)  # 0.5 s before the jam + 2.4 s after it: 2.9 s
    assert not [a for a in table.of("alarm") if a.code == "incomplete_pull"]
    table.tick(0.2)
    assert [a.code for a in table.of("alarm") if a.active][-1] == "incomplete_pull"
    assert positions(table)[-1] == ("P1", "TH")
    assert table.state["hold"]["reasons"] == ["incomplete_pull"]


@pytest.mark.parametrize("jam_before_item", [10.0, 0.5])
def test_a_jam_that_began_before_a_pulls_item_pauses_only_its_wait_after_it(
        jam_before_item: float) -> None:
    """Section 4: incomplete when "3 s pass without its next item (not counting time
    while a card-jam fault is active)": the 3 s run from the item, so jam time before it
    is not credited (outside review: a jam 10 s before the item moved the deadline 10 s
    late)."""
    table = ready()
    table.draw("9S")
    table.fault(2, True)  # the jam begins first ...
    table.tick(jam_before_item)
    table.draw("2S", "TH", order=[1])  # ... the pull's first item comes during it (+0.05 s)
    table.tick(0.95)
    table.fault(2, False)  # cleared 1.45 s after the item (fault() steps 0.5 s)
    table.tick(2.9)  # 2.9 s since the clear: not yet
    assert not [a for a in table.of("alarm") if a.code == "incomplete_pull"]
    table.tick(0.2)  # 3.1 s since the clear
    assert [a.code for a in table.of("alarm") if a.active][-1] == "incomplete_pull"


def test_incomplete_pull_when_another_pull_starts() -> None:
    table = ready()
    table.draw("9S")
    table.draw("2S", "TH", order=[1])
    m = table.mark()
    table.draw("5D")
    assert [a.code for a in table.of("alarm", m)] == ["incomplete_pull"]
    assert positions(table, m) == [("P1", "TH"), ("B1", "5D")]


def test_device_reboot_mid_hand_holds() -> None:
    table = ready()
    table.draw("9S")
    table.draw("2S")
    m = table.mark()
    table.hello(boot_id=2)
    assert [a.code for a in table.of("alarm", m)] == ["device_rebooted"]
    assert table.state["hold"]["reasons"] == ["device_rebooted"]
    assert table.cmd("resume").ok and table.state["hold"] is None


def test_cover_open_during_hand_holds_until_resume() -> None:
    table = ready()
    table.draw("9S")
    table.fault(3, True)
    table.fault(3, False)
    assert table.state["hold"]["reasons"] == ["cover_open"]
    for card in STAND_HAND:
        table.draw(card)
    assert not table.of("hand_result")
    table.cmd("resume")
    assert table.of("hand_result")


def test_void_hand_on_held_hand_then_next_burn() -> None:
    table = ready()
    table.draw("9S")
    table.draw(UNREAD)
    m = table.mark()
    assert table.cmd("void_hand", hand_no=1, reason="unreadable").ok
    voided = table.of("hand_voided", m)[0]
    assert (voided.reason, voided.operator, voided.result_withdrawn) == (
        "unreadable", "sup1", False)
    assert [(a.code, a.active) for a in table.of("alarm", m)] == [("card_unread", False)]
    m = table.mark()
    table.draw("4S")
    assert positions(table, m) == [("burn", "4S")] and table.of("card", m)[0].hand_no == 2


# -- rule 11: card integrity -----------------------------------------------------------------

def test_excess_card_in_hand_holds_until_resume() -> None:
    table = ready(decks=1)
    table.draw("9S")
    table.draw("2S")
    table.draw("2C")  # the second 2C of a one-deck shoe (the burn was 2C)
    assert table.state["hold"]["reasons"] == ["excess_card"]
    assert table.cmd("resume").ok
    assert table.state["hold"] is None


def test_foreign_card_holds_until_manual_entry_and_burn_foreign_only_alarms() -> None:
    table = ready()
    table.draw("04AABBCC", foreign=True)  # foreign burn: alarm, no hold
    assert table.of("alarm")[0].code == "foreign_card" and table.of("alarm")[0].momentary
    table.draw("04DDEEFF", foreign=True)  # P1 foreign: hold
    assert table.state["hold"]["reasons"] == ["foreign_card"]
    assert table.cmd("resume").error.code == "card_unknown"  # type: ignore[union-attr]
    assert table.cmd("manual_card", card_index=4, card="2S").ok
    assert table.state["hold"] is None


def test_duplicate_uid() -> None:
    table = ready()
    table.draw("9S")
    for uid, card in (("AA01", "2S"), ("AA01", "TH")):
        table.feed(DeviceItem(at=table.now(), item="card", pull_id=900 + len(card), pull_pos=1,
                              pull_size=1, card=card, uid=uid))
    assert table.state["hold"]["reasons"] == ["duplicate_uid"]


# -- rule 12: supervisor decisions ------------------------------------------------------------

def test_void_resolved_hand_withdraws_result_once() -> None:
    table = ready()
    table.draw("9S")
    for card in STAND_HAND:
        table.draw(card)
    m = table.mark()
    assert table.cmd("void_hand", hand_no=1, reason="missed burn").ok
    assert table.of("hand_voided", m)[0].result_withdrawn is True
    assert table.state["hands_played"] == 0 and table.state["hands_voided"] == 1
    assert table.cmd("void_hand", hand_no=1, reason="x").error.code == "already_voided"  # type: ignore[union-attr]
    assert table.cmd("void_hand", hand_no=7, reason="x").error.code == "unknown_hand"  # type: ignore[union-attr]


def test_void_shoe_and_end_shoe() -> None:
    table = ready()
    table.draw("9S")
    m = table.mark()
    assert table.cmd("end_shoe").ok
    assert table.of("last_hand", m)[0].reason == "end_shoe"
    assert table.cmd("end_shoe").ok  # a repeat answers ok
    for card in STAND_HAND:
        table.draw(card)
    assert table.types()[-3:] == ["hand_result", "shoe_ended", "shoe_report"]
    assert table.cmd("void_shoe", reason="x").error.code == "no_shoe"  # type: ignore[union-attr]
    other = ready()
    other.draw("9S")
    m = other.mark()
    assert other.cmd("void_shoe", reason="marked cards").ok
    assert other.types(m) == ["hand_voided", "shoe_voided", "supervisor_action",
                              "shoe_report"]


def test_realign_voids_interrupted_hand_and_deals_on() -> None:
    table = ready()
    table.draw("9S")  # burn, index 3
    table.draw("2S")  # P1, index 4 -- the dealer says this was really the burn
    m = table.mark()
    assert table.cmd("realign", card_index=4, position="burn").ok
    assert table.of("hand_voided", m)[0].hand_no == 1
    assert positions(table, m)[0] == ("burn", "2S")
    assert table.of("card", m)[0].hand_no == 2
    for card in STAND_HAND:
        table.draw(card)
    assert table.of("hand_result")[0].hand_no == 2
    # realign's one code (mqtt-api.md section 4), the resolved hand named in the message
    refused = table.cmd("realign", card_index=4, position="P1").error
    assert refused is not None and refused.code == "unknown_card"
    assert "already resolved" in refused.message


# -- rules 5, 6, 10: cards drawn while a hand is held, stand-alone ------------------------

def held_then_dealt_on(profile: str, later: list[str], unread: bool = True) -> Table:
    """Stand-alone, no gate: hand 1's B1 (card 5) unread and held; the dealer deals on,
    one card a pull: P2, B2 (7 against 6 once B1 is entered as TH: hand 1 is complete),
    then `later`, the next hand's cards."""
    table = ready("none", unnecessary_cards=profile)
    for card in ["9S", "2S", UNREAD if unread else "TH", "5D", "6C", *later]:
        table.draw(card)
    return table


def test_cards_dealt_on_while_a_hand_is_held_are_the_next_hands() -> None:
    """Rule 5: in stand-alone mode "the next card after a result is its burn; only surplus
    cards of the pull that completed a hand are unnecessary" -- a hold in between changes
    nothing of that (rule 10 places the pending cards when it ends)."""
    for profile, later in (("burn_then_void", ["7H", "8H"]),
                           ("burn_then_player", ["7H", "8H", "9H"])):
        read = held_then_dealt_on(profile, later, unread=False)
        held = held_then_dealt_on(profile, later)
        assert held.state["shoe_state"] == "held"
        assert held.cmd("manual_card", card_index=5, card="TH").ok
        for table in (read, held):
            (result,) = table.of("hand_result")
            assert (result.hand_no, result.winner) == (1, "player")
            assert table.state["shoe_state"] == "dealing" and table.state["hand_no"] == 2
            assert table.of("shoe_voided") == []
            assert [(c["position"], c["card"]) for c in table.state["cards"]] == list(
                zip(["burn", "P1", "B1"], later, strict=False))


def test_a_cover_open_hold_dealt_through_leaves_the_shoe_in_play() -> None:
    table = ready("none", unnecessary_cards="burn_then_void")
    table.draw("9S")
    table.draw("2S")
    table.fault(3, True)  # cover open: held until resume (rule 10)
    table.fault(3, False)
    for card in ["TH", "5D", "6C", "7H", "8H", "9H"]:
        table.draw(card)
    assert table.cmd("resume").ok
    assert [(r.hand_no, r.winner) for r in table.of("hand_result")] == [(1, "player")]
    assert table.of("shoe_voided") == []
    assert [c["card"] for c in table.state["cards"]] == ["7H", "8H", "9H"]


def test_the_completing_pulls_surplus_stays_unnecessary_after_a_hold() -> None:
    """Rule 7: items of the completing pull beyond what the hand needs are unnecessary
    cards, held or not: B2 with two more cards in its pull voids the shoe under
    burn_then_void (the first is the next burn, the second voids)."""
    for unread in (False, True):
        table = ready("none", unnecessary_cards="burn_then_void")
        for card in ["9S", "2S", UNREAD if unread else "TH", "5D"]:
            table.draw(card)
        table.draw("6C", "7H", "8H")
        if unread:
            assert table.of("shoe_voided") == []
            assert table.cmd("manual_card", card_index=5, card="TH").ok
        assert [(r.hand_no, r.winner) for r in table.of("hand_result")] == [(1, "player")]
        (voided,) = table.of("shoe_voided")
        assert voided.reason == "unnecessary_cards"
        assert [(e.position, e.card) for e in table.of("card") if e.card in ("7H", "8H")][-2:] \
            == [("burn", "7H"), ("unnecessary", "8H")]


def test_a_pull_replayed_after_a_hold_that_completes_a_hand_leaves_its_surplus() -> None:
    """The held cards are dealt on pull by pull: a pull among them that completes the
    next hand has its later cards unnecessary, as when nothing was held (rule 7)."""
    outcomes = []
    for unread in (False, True):
        table = ready("none", unnecessary_cards="burn_then_void")
        for card in ["9S", "2S", UNREAD if unread else "TH", "5D", "6C", "7H", "TS", "TD",
                     "8S"]:
            table.draw(card)
        table.draw("TC", "2H", "3H")  # hand 2's B2 (a natural 8), then two more
        if unread:
            assert table.cmd("manual_card", card_index=5, card="TH").ok
        outcomes.append(([(r.hand_no, r.winner) for r in table.of("hand_result")],
                         table.state["shoe_state"],
                         [(e.card_index, e.position) for e in table.of("card")
                          if e.card_index in (13, 14)][-2:]))
    assert outcomes[0] == outcomes[1] == (
        [(1, "player"), (2, "player")], "shoe_voided", [(13, "burn"), (14, "unnecessary")])


def test_a_cut_card_held_back_mid_hand_makes_it_the_last_once_the_hold_ends() -> None:
    """Found by the metamorphic test below (CI, 2026-12-08): hand 2's P1 unread (B1, P2 in
    its pull), the dealer deals on (B2, P3 and the cut card in one pull), then the entry.
    Read, the cut card made hand 2 the last at once; held, `last_hand` waited for hand 2's
    result, though the hold was over and the cut card's place among hand 2's own cards
    known."""
    def deal(table: Table, p1: str) -> None:
        for pull in (["AS"], ["2S"], ["4S"], ["3S", "6H"], ["6S", "7S", "8S"],
                     [p1, "TS", "5H"], ["QS", "KS", CUT]):
            table.draw(*pull)
    read, held = ready("none"), ready("none")
    deal(read, "5D")
    deal(held, UNREAD)
    assert [e.hand_no for e in held.of("last_hand")] == []  # held: its place not known yet
    assert held.cmd("manual_card", card_index=11, card="5D").ok
    for table in (read, held):
        assert [(e.hand_no, e.reason) for e in table.of("last_hand")] == [(2, "cut_card")]
        assert table.state["shoe_state"] == "dealing"
    assert {e.card_index: (e.position, e.hand_no) for e in held.of("card")} == {
        e.card_index: (e.position, e.hand_no) for e in read.of("card")}


@settings(max_examples=200, deadline=None)
@given(st.permutations(ALL_CARDS), st.lists(st.integers(1, 3), min_size=6, max_size=25),
       st.data())
def test_a_late_entry_deals_as_a_read_card_stand_alone(deck: list[str], sizes: list[int],
                                                      data: st.DataObject) -> None:
    """Metamorphic: one hand card unread and entered k pulls later (no gate, the dealer
    deals on; pulls of one to three cards, one deck's cards: no excess card, whose entry
    rule 11 and decisions.md 8 treat apart) gives the results and final positions of the
    same card read: a hold changes when a result is published, not what it is. The cut
    card among them, or not (outside review: a cut card drawn while a hand was held with
    cards pending made the held hand the last, where read it was the next)."""
    cut = data.draw(st.none() | st.integers(0, 24))  # early: among the held hands
    cards = list(deck) if cut is None else [*deck[:cut], CUT, *deck[cut:]]
    pulls, start = [], 0
    for size in sizes:
        if start + size <= len(cards):
            pulls.append(cards[start:start + size])
            start += size
    profile = data.draw(st.sampled_from(["burn_then_void", "burn_then_player"]))
    read = ready("none", unnecessary_cards=profile)
    for pull in pulls:
        read.draw(*pull)
    hand_cards = [e.card_index for e in read.of("card")
                  if e.position in ("P1", "B1", "P2", "B2", "P3", "B3")
                  and e.card_index is not None and e.card_index > 2]
    if not hand_cards:
        return
    chosen = data.draw(st.sampled_from(hand_cards))
    delay = data.draw(st.integers(0, 3))
    held = ready("none", unnecessary_cards=profile)
    flat = [card for pull in pulls for card in pull if card != CUT]
    true_card = flat[chosen - 3]  # cards 1, 2: the commencement
    index, entered, due = 2, False, None
    for number, pull in enumerate(pulls):
        drawn = []
        for card in pull:
            if card != CUT:
                index += 1
            drawn.append(UNREAD if card != CUT and index == chosen else card)
        held.draw(*drawn)
        if due is None and index >= chosen:
            due = number + delay
        if not entered and due is not None and number >= due:
            assert held.cmd("manual_card", card_index=chosen, card=true_card).ok
            entered = True
    if not entered:
        assert held.cmd("manual_card", card_index=chosen, card=true_card).ok

    def outcome(table: Table) -> tuple[Any, ...]:
        results = [(r.hand_no, r.winner, r.player_total, r.banker_total)
                   for r in table.of("hand_result")]
        last = [e.hand_no for e in table.of("last_hand")]
        if table.state["shoe_state"] == "shoe_voided":
            # Cards after a void by unnecessary cards are reported without the shoe; those
            # drawn while held were published as pending first (their final event names
            # no card_index), so only the results and the void are compared.
            return results, last, "shoe_voided"
        final = {e.card_index: (e.position, e.hand_no) for e in table.of("card")}
        return results, last, final, table.state["shoe_state"]

    assert outcome(held) == outcome(read)


def miscounted_commencement(mode: str) -> Table:
    """A commencement card 3 (three burns) with two burned: the dealer's P1 (card 4, 4S)
    was counted as the third burn, and the dealer's B1 (card 5, 5S) came after it."""
    table = Table(betting_control=mode)
    table.hello()
    table.load()
    for card in ["3H", "2C", "2D", "4S", "5S"]:
        table.draw(card)
    return table


def test_realign_reaches_back_into_an_ended_commencement_stand_alone() -> None:
    """mqtt-api.md: realign takes "a card of the current shoe not in a resolved hand": a
    burn of a commencement that ended on the dealer's P1 (decisions.md 7)."""
    table = miscounted_commencement("none")
    table.draw("KD")  # the dealer's P2, the daemon's P1 of hand 1
    assert table.state["hand_no"] == 1 and table.state["cards"][0]["card_index"] == 5
    m = table.mark()
    out = table.cmd("realign", card_index=4, position="P1")
    assert out.ok and out.result == {"hand_no": 2}
    assert table.of("hand_voided", m)[0].hand_no == 1  # the hand it interrupts
    assert [(e.card_index, e.position, e.hand_no) for e in table.of("card", m)] == [
        (4, "P1", 2), (5, "B1", 2), (6, "P2", 2)]
    assert table.state["commencement"] == {"card": "3H", "burn_count": 2, "burns_drawn": 2}
    for card in ["6C", "3D", "2H"]:  # B2; P3 (player 4 draws); B3 (banker 1 draws)
        table.draw(card)
    (result,) = table.of("hand_result")
    assert (result.hand_no, result.winner, result.player_total, result.banker_total) == (
        2, "player", 7, 3)
    assert table.cmd("end_shoe").ok
    (report,) = table.of("shoe_report")
    assert report.cards_by_position["commencement_burn"] == 2
    assert report.cards_by_position["hand"] == 6
    assert (report.hands_played, report.hands_voided) == (1, 1)


def test_realign_into_an_ended_commencement_keeps_an_unbegun_hand_number() -> None:
    """In `commands` mode the dealer's B1 came while betting was open (an unnecessary
    card): hand 1 had not begun, so nothing is voided and the new hand is hand 1."""
    table = miscounted_commencement("commands")
    assert table.state["next_hand"]["unnecessary_count"] == 1
    m = table.mark()
    out = table.cmd("realign", card_index=4, position="P1")
    assert out.ok and out.result == {"hand_no": 1}
    assert table.of("hand_voided", m) == []
    assert [(e.card_index, e.position, e.hand_no) for e in table.of("card", m)] == [
        (4, "P1", 1), (5, "B1", 1)]
    assert table.state["shoe_state"] == "dealing" and table.state["betting"] == "closed"
    for card in ["KD", "6C", "3D", "2H"]:
        table.draw(card)
    assert [(e.hand_no, e.winner) for e in table.of("hand_result")] == [(1, "player")]
    refused = table.cmd("realign", card_index=3, position="burn")
    assert refused.error is not None and refused.error.code == "unknown_card"
    assert "commencement burn" in refused.error.message and "resolved" in refused.error.message
    assert table.cmd("realign", card_index=1, position="burn").error.code == "unknown_card"  # type: ignore[union-attr]


def test_realign_of_an_unbegun_hand_keeps_its_number() -> None:
    """Cards drawn while betting is open belong to the next hand, which has not begun: a
    realign at its first card starts that hand, no hand number is skipped."""
    table = ready("commands")
    table.draw("9S")
    table.draw("8S")
    m = table.mark()
    out = table.cmd("realign", card_index=3, position="burn")
    assert out.ok and out.result == {"hand_no": 1}
    assert table.of("hand_voided", m) == []
    for card in ["2S", "TH", "5D"]:  # P1 8S, B1 2S, P2 TH, B2 5D: 8 against 7
        table.draw(card)
    assert [(e.hand_no, e.winner) for e in table.of("hand_result")] == [(1, "player")]


def test_realign_of_the_last_hand_keeps_it_the_last() -> None:
    """Rule 9: a cut card during a hand makes that hand the last. A realign repairs the
    count of the same cards, so the hand it starts is the last one in its place."""
    for command in ("cut_card", "end_shoe"):
        table = ready()
        table.draw("9S")  # burn (3)
        table.draw("2S")  # P1 (4): the dealer says it was the burn
        if command == "cut_card":
            table.draw(CUT)
        else:
            assert table.cmd("end_shoe").ok
        m = table.mark()
        assert table.cmd("realign", card_index=4, position="burn").ok
        assert [(e.hand_no, e.reason) for e in table.of("last_hand", m)] == [(2, command)]
        assert table.state["last_hand"] is True
        for card in STAND_HAND:
            table.draw(card)
        assert [r.hand_no for r in table.of("hand_result")] == [2]
        assert table.state["shoe_state"] == "shoe_ended"


def test_realign_names_what_it_takes() -> None:
    table = ready()
    out = table.cmd("realign", card_index=99, position="P1")
    assert out.error is not None and out.error.code == "unknown_card"
    assert "commencement burn" in out.error.message and "commencement card" not in \
        out.error.message
    manual = table.cmd("manual_card", card_index=99, card="AS")
    assert manual.error is not None and "the commencement card" in manual.error.message


def test_a_held_commencement_offers_what_can_end_its_hold() -> None:
    """No hand exists in commencement: its hold lists void_shoe, not void_hand, and a
    void_hand there says so (decisions.md 10)."""
    table = Table(betting_control="none")
    table.hello()
    table.load()
    table.draw(UNREAD)
    assert table.state["hold"]["allowed"] == ["manual_card", "void_shoe"]
    table.draw("4C")
    assert table.state["hold"]["allowed"] == ["manual_card", "realign", "void_shoe"]
    out = table.cmd("void_hand", hand_no=1, reason="x")
    assert out.error is not None and out.error.code == "unknown_hand"
    assert "commencement" in out.error.message and "void_shoe" in out.error.message
    assert table.cmd("void_shoe", reason="x").ok


# -- rules 13, 14: faults, storage, gate and indicator --------------------------------------

def test_faults_device_lost_and_storage() -> None:
    table = ready()
    table.fault(4, True)
    table.fault(4, False)
    faults = [(a.code, a.fault_code, a.active) for a in table.of("alarm")]
    assert faults == [("device_fault", 4, True), ("device_fault", 4, False)]
    table.feed(DeviceLink(at=table.now(), connected=False))
    assert table.state["alarms"][0]["code"] == "device_lost"
    table.feed(DeviceLink(at=table.now(), connected=True))
    assert table.state["alarms"] == []
    table.feed(StorageStatus(at=table.now(), ok=False, message="disk full"))
    assert table.cmd("end_shoe").error.code == "storage_failed"  # type: ignore[union-attr]
    assert table.state["gate_locked"] is True


def test_gate_and_indicator_requests() -> None:
    table = Table(betting_control="commands")
    table.hello()
    table.commence("AS", ["2C"])
    gate = [r.value for r in table.requests if r.kind == "gate"]
    assert gate[-1] == 1  # locked while betting is open
    table.requests.clear()
    table.cmd("close_betting")
    assert [(r.kind, r.value) for r in table.requests] == [("gate", 0)]  # indicator: burn
    table.requests.clear()
    table.draw("9S")
    assert [(r.kind, r.value) for r in table.requests] == [("indicator", 2)]  # player next
    table.requests.clear()
    table.hello()  # re-sent after every HELLO
    assert [(r.kind, r.value) for r in table.requests] == [("gate", 0), ("indicator", 2)]


def test_refused_command_changes_nothing() -> None:
    table = ready()
    before = table.engine.snapshot()
    out = table.cmd("manual_card", card_index=99, card="ZZ")
    assert out.error is not None and out.error.code == "bad_card"
    assert "expected a rank" in out.error.message
    assert table.engine.snapshot() == before


def test_hello_clears_device_lost() -> None:
    table = ready()
    table.feed(DeviceLink(at=table.now(), connected=False))
    m = table.mark()
    table.hello()
    assert [(a.code, a.active) for a in table.of("alarm", m)] == [("device_lost", False)]


def _betting_with_a_pull_pending() -> Table:
    """Betting open (commands mode, burn_then_void): one unnecessary card (the next
    burn) dealt, then the first item of a two-card pull, its second still to come."""
    table = ready("commands", unnecessary_cards="burn_then_void")
    table.draw("9S")  # drawn while betting is open: the next hand's burn
    table.draw("5H", "6H", order=[0])  # one item of two: the pull waits for the other
    assert table.state["shoe_state"] == "between_hands"
    return table


def test_void_shoe_whose_pending_pull_voids_the_shoe_first_is_answered_ok() -> None:
    """Found by Hypothesis (test_engine_interleavings): the command applies the pending
    pull first; its card is the second unnecessary one, which voids the shoe under
    burn_then_void; the command then has nothing more to void (it used to fail with an
    engine_error and change nothing)."""
    table = _betting_with_a_pull_pending()
    m = table.mark()
    out = table.cmd("void_shoe", reason="r")
    assert out.ok, out.error
    assert out.result == {"already": "shoe_voided"}
    assert table.state["shoe_state"] == "shoe_voided"
    assert [e.reason for e in table.of("shoe_voided", m)] == ["unnecessary_cards"]
    assert not [a for a in table.of("alarm", m) if a.code == "engine_error"]


def test_new_shoe_forced_whose_pending_pull_voids_the_old_shoe_first() -> None:
    table = _betting_with_a_pull_pending()
    old = table.state["shoe_id"]
    m = table.mark()
    out = table.cmd("new_shoe", force=True)
    assert out.ok, out.error
    assert [e.reason for e in table.of("shoe_voided", m)] == ["unnecessary_cards"]
    assert table.state["shoe_id"] == out.result["shoe_id"] != old
    assert table.state["shoe_state"] == "commencement"
    assert not [a for a in table.of("alarm", m) if a.code == "engine_error"]


# -- rule 10: void_hand while a pull of the held hand is half received -------------------

def _held_hand_with_half_a_pull(mode: str, **config: object) -> tuple[Table, DeviceItem]:
    """Hand 1 held (P1 unread), B1 P2 B2 in; a two-card pull whose lower item came and
    whose upper item (returned) has not: both were drawn before anything that follows."""
    table = ready(mode, **config)
    if mode == "commands":
        table.cmd("close_betting")
    table.draw("9D")
    table.draw(UNREAD)
    table.draw("3H")
    table.draw("4S")
    table.draw("5C")
    table.pull_id += 1
    lower, upper = (DeviceItem(at=table.now(), item="card", pull_id=table.pull_id,
                               pull_pos=pos, pull_size=2, card=card)
                    for pos, card in ((2, "KD"), (1, "QS")))
    table.feed(lower)
    return table, upper


@pytest.mark.parametrize("mode, config", [
    ("none", {}), ("commands", {"unnecessary_cards": "burn_then_void"}),
    ("commands", {"unnecessary_cards": "burn_then_player"})])
def test_void_hand_voids_the_cards_of_a_pull_half_received_before_it(
        mode: str, config: dict[str, object]) -> None:
    """Rule 10: `void_hand` voids the hand "together with every card drawn before the
    command, pending cards included". A pull's items are drawn at once, so an item that
    comes after the command is the voided hand's too (outside review: they became hand 2's
    burn and P1 two cards behind the layout, or, under burn_then_void, voided the shoe)."""
    table, upper = _held_hand_with_half_a_pull(mode, **config)
    m = table.mark()
    assert table.cmd("void_hand", hand_no=1, reason="held too long").ok
    table.feed(upper.model_copy(update={"at": table.now()}))
    cards = [(e.card, e.position, e.hand_no) for e in table.of("card", m)]
    assert cards == [("QS", None, 1), ("KD", None, 1)]  # upper first, the voided hand's
    assert [p.action for p in table.of("procedure", m)
            if p.rule == "card_of_voided_hand"] == ["voided", "voided"]
    assert table.state["shoe_state"] == "between_hands"
    assert not table.of("shoe_voided", m)
    m = table.mark()
    if mode == "commands":
        table.cmd("close_betting")
    table.draw("2D")  # the next card is the next hand's burn
    table.draw("8C")
    assert [(e.position, e.hand_no) for e in table.of("card", m)] == [("burn", 2), ("P1", 2)]
    assert table.state["hold"] is None


def test_void_hand_whose_half_pull_never_completes_alarms_and_holds_no_next_hand() -> None:
    """The missing item of that pull was drawn before the void too: it is the voided
    hand's loss (a momentary `incomplete_pull`), not a hold on the next hand."""
    table, _upper = _held_hand_with_half_a_pull("none")
    m = table.mark()
    assert table.cmd("void_hand", hand_no=1, reason="r").ok
    table.tick(4.0)
    assert [(e.card, e.position, e.hand_no) for e in table.of("card", m)] == [("KD", None, 1)]
    lost = [a for a in table.of("alarm", m) if a.code == "incomplete_pull"]
    assert lost and all(a.momentary for a in lost)
    table.draw("2D")
    table.draw("8C")
    assert [(e.position, e.hand_no) for e in table.of("card", m)][-2:] == [("burn", 2),
                                                                            ("P1", 2)]
    assert table.state["hold"] is None


# -- rules 9 and 10: the cut card drawn while a hand is held with cards pending ----------

@pytest.mark.parametrize("hold", ["none", "unread_p1", "cover_open", "cut_in_a_pull"])
def test_a_cut_card_drawn_while_a_hand_is_held_acts_where_it_came(hold: str) -> None:
    """Hand 1 is a natural at its fourth card; the next card (7H) is hand 2's burn, then
    the cut card: hand 2 is the last. Held at that moment (P1 unread and entered later, or
    a cover-open fault released by `resume`), 7H is pending and the cut card waits for it
    to be placed (outside review: the held hand 1 became the last and hand 2's five cards
    were `after_shoe_end`)."""
    table = ready("none")
    table.draw("9D")
    unread = hold in ("unread_p1", "cut_in_a_pull")  # the latter: the cut inside a pull
    table.draw(UNREAD if unread else "4H")
    if hold == "cover_open":
        table.fault(3, True)
        table.fault(3, False)
    for card in ["3C", "5D", "2C"]:
        table.draw(card)
    if hold == "cut_in_a_pull":
        table.draw("7H", CUT, "4S")
        rest = ["6S", "8D", "TD"]
    else:
        table.draw("7H")
        table.draw(CUT)
        rest = ["4S", "6S", "8D", "TD"]
    m = table.mark()
    for card in rest:
        table.draw(card)
    if unread:
        assert table.cmd("manual_card", card_index=4, card="4H").ok
    elif hold == "cover_open":
        assert table.cmd("resume").ok
    assert [(r.hand_no, r.winner) for r in table.of("hand_result")] == [(1, "player")]
    assert [e.hand_no for e in table.of("last_hand")] == [2]
    assert table.state["shoe_state"] == "dealing" and table.state["hand_no"] == 2
    final = {e.card_index: e.position for e in table.of("card") if e.card_index >= 8}
    assert final == {8: "burn", 9: "P1", 10: "B1", 11: "P2", 12: "B2"}
    if hold != "none":
        assert [p.rule for p in table.of("procedure") if p.rule == "cut_card_held"] \
            == ["cut_card_held"]
    assert not [e for e in table.of("card", m) if e.position == "after_shoe_end"]


def test_a_cut_card_held_back_that_came_during_the_held_hand_makes_it_the_last() -> None:
    """The other way: P1 unread, the held hand needs a P3 (7H), then the cut card: the
    cut came during hand 1, which is the last; the shoe ends with its result."""
    table = ready("none")
    table.draw("9D")
    table.draw(UNREAD)
    for card in ["3C", "TD", "2C", "7H", CUT, "4S", "9H"]:
        table.draw(card)
    # P 2H+TD = 2 draws 7H; B 3C+2C = 5 draws on a 7: 4S is B3 (the cut came between).
    assert table.cmd("manual_card", card_index=4, card="2H").ok
    assert [e.hand_no for e in table.of("last_hand")] == [1]
    assert [(r.hand_no, r.cards_dealt) for r in table.of("hand_result")] == [(1, 6)]
    assert table.state["shoe_state"] == "shoe_ended"
    assert [e.position for e in table.of("card") if e.card == "9H"][-1] == "after_shoe_end"


def test_realign_of_a_held_hand_with_a_cut_card_held_back_makes_the_new_hand_the_last() -> None:
    """A cut card held back in the hand being repaired (rule 12's realign) counts as one
    drawn in it: the new hand is the last, as when the cut card was not held back."""
    table = ready("none")
    table.draw("9D")
    table.draw(UNREAD)
    for card in ["3C", "5D", "2C", "7H", CUT]:
        table.draw(card)
    assert [p.rule for p in table.of("procedure") if p.rule == "cut_card_held"]
    out = table.cmd("realign", card_index=4, position="burn")
    assert out.ok, out.error
    assert [e.hand_no for e in table.of("last_hand")] == [out.result["hand_no"]]


# -- rule 11: a flagged card pending behind a hold ----------------------------------------

@pytest.mark.parametrize("mode", ["none", "commands"])
def test_resume_does_not_clear_the_flag_of_a_card_still_pending(mode: str) -> None:
    """Hand 1 held for `cards_lost`; behind it, pending, the next hand's burn and P1,
    the P1 an excess card (one deck: the commencement's AS again). `resume` releases
    what the hold showed; the excess card, placed as P1 afterwards, raises its alarm and
    holds hand 2, as when nothing was held (outside review: it went into P1 silently)."""
    def deal(held: bool) -> Table:
        table = ready(mode, decks=1, unnecessary_cards="burn_then_player")
        if mode == "commands":
            table.cmd("close_betting")
        table.draw("9S")
        table.draw("2S")
        table.draw("TH")
        if held:
            table.gap(1)
        for card in ["5D", "6C", "9H", "AS"]:
            table.draw(card)
        if held:
            assert table.cmd("resume").ok
        return table

    for table in (deal(False), deal(True)):
        ace = [e for e in table.of("card") if e.card == "AS" and e.card_index != 1]
        assert ace[-1].position == "P1" and ace[-1].hand_no == 2
        alarms = [a for a in table.of("alarm") if a.code == "excess_card"
                  and a.card_index == ace[-1].card_index]
        assert alarms and alarms[-1].active
        assert table.state["hold"]["reasons"] == ["excess_card"]


def test_realign_that_puts_a_hand_in_progress_while_betting_is_open_says_betting_closed(
        ) -> None:
    """Commands mode: a `realign` while betting is open deals the new hand; the game
    server learns that betting is closed from the stream (outside review: only the state
    said so, and a server following the events kept taking bets)."""
    table = ready("commands")
    table.draw("9S")  # drawn while betting is open: the next hand's burn
    m = table.mark()
    out = table.cmd("realign", card_index=3, position="burn")
    assert out.ok, out.error
    (closed,) = table.of("betting_closed", m)
    assert (closed.hand_no, closed.trigger) == (out.result["hand_no"], "realign")
    assert table.state["betting"] == "closed" and table.state["shoe_state"] == "dealing"
    assert table.cmd("close_betting").result["repeat"] is True
    plain = ready("commands")
    assert plain.cmd("close_betting").ok
    assert [e.trigger for e in plain.of("betting_closed")] == ["close_betting"]


def test_recall_records_carry_the_supervisor_actions_and_misorders_of_their_own_hand() -> None:
    """A `void_hand` or `report_misorder` of a resolved hand is in that hand's record,
    not the hand in progress; a misorder reported during a hand is in its record once
    resolved; a hand voided in progress lists its own void (outside review: all three
    went to the wrong hand, or nowhere)."""
    table = ready("none")
    table.draw("9S")
    for card in ["2S", "TH", "5D", "6C"]:  # hand 1: P 7, B 6, no third card
        table.draw(card)
    table.draw("9D")
    table.draw("3S")  # hand 2 in progress: its burn and P1
    assert table.cmd("report_misorder", hand_no=2, detail="B1 placed on P1 spot").ok
    assert table.cmd("report_misorder", hand_no=1, detail="P2/B2 swapped").ok
    assert table.cmd("void_hand", hand_no=1, reason="dispute").ok
    for card in ["TD", "5H", "6D"]:  # hand 2: P 3+5=8, a natural
        table.draw(card)
    assert [r.hand_no for r in table.of("hand_result")] == [1, 2]
    table.draw("8H")  # hand 3: its burn
    assert table.cmd("void_hand", hand_no=3, reason="torn card").ok
    hands = {h["hand_no"]: h for h in table.cmd("recall", hands=3).result["hands"]}
    actions = {n: [(a["command"], a.get("hand_no")) for a in h["supervisor_actions"]]
               for n, h in hands.items()}
    assert actions == {1: [("report_misorder", 1), ("void_hand", 1)],
                       2: [("report_misorder", 2)], 3: [("void_hand", 3)]}
    assert [m["detail"] for m in hands[1]["misorders"]] == ["P2/B2 swapped"]
    assert [m["detail"] for m in hands[2]["misorders"]] == ["B1 placed on P1 spot"]


@pytest.mark.parametrize("phase", ["no_shoe", "shoe_ended", "shoe_voided"])
def test_card_and_hold_commands_without_a_shoe_answer_their_own_codes(phase: str) -> None:
    """mqtt-api.md section 4 lists each command's codes: without a shoe in play,
    `manual_card` and `realign` find no card (`unknown_card`) and `resume` nothing held
    (`not_held`); they answered `no_shoe`, a code neither lists (outside review)."""
    table = Table(betting_control="none")
    table.hello()
    if phase != "no_shoe":
        table.commence("AS", ["2C"])
        table.cmd("end_shoe" if phase == "shoe_ended" else "void_shoe", reason="r")
    codes = {name: table.cmd(name, **fields).error.code  # type: ignore[union-attr]
             for name, fields in (("manual_card", {"card_index": 3, "card": "AS"}),
                                  ("realign", {"card_index": 3, "position": "burn"}),
                                  ("resume", {}))}
    assert codes == {"manual_card": "unknown_card", "realign": "unknown_card",
                     "resume": "not_held"}


def test_a_commencement_repaired_by_realign_says_its_count_and_its_pending_cards_take_entries(
        ) -> None:
    """Behind an unread commencement card the cards wait as pending: `manual_card`
    accepts them, as section 4 says of a pending card (it answered `unknown_card`). A
    `realign` that ends the commencement publishes the count it makes (a second
    `commencement` event) when the commencement card is known; of an unread one,
    mqtt-api.md section 2 keeps card and burn_count null, and no count is said."""
    table = Table(betting_control="none")
    table.hello()
    table.load()
    table.draw(UNREAD)
    table.draw("2C")
    table.draw("3C")
    assert [c["card_index"] for c in table.state["pending_cards"]] == [2, 3]
    assert table.cmd("manual_card", card_index=3, card="3D").ok  # a pending card
    m = table.mark()
    assert table.cmd("realign", card_index=2, position="burn").ok
    assert not table.of("commencement", m)
    assert [(e.position, e.card) for e in table.of("card", m)] == [("burn", "2C"),
                                                                    ("P1", "3D")]
    known = Table(betting_control="none")
    known.hello()
    known.load()
    for card in ["5H", "2C", "3C"]:  # a 5: five burns, the dealer drew two
        known.draw(card)
    m = known.mark()
    assert known.cmd("realign", card_index=3, position="burn").ok
    (com,) = known.of("commencement", m)
    assert (com.card, com.burn_count, com.card_index) == ("5H", 1, 1)


def test_a_flagged_card_of_a_voided_pull_raises_its_alarm() -> None:
    """A card voided with its hand (decision 192) is never placed, yet counted: an
    excess card among them gets its momentary alarm, naming where it went."""
    table, upper = _held_hand_with_half_a_pull("none", decks=1)
    m = table.mark()
    assert table.cmd("void_hand", hand_no=1, reason="r").ok
    table.feed(upper.model_copy(update={"at": table.now(), "card": "AS"}))  # AS again
    (alarm,) = [a for a in table.of("alarm", m) if a.code == "excess_card"]
    assert alarm.momentary and "drawn as voided" in alarm.message


# --- outside review of the cores, 2026-12-07 (evening): decisions.md 220 ------------------


def _ready(mode: str, **config: Any) -> Table:
    table = Table(betting_control=mode, **config)
    table.hello()
    table.commence("AS", ["2C"])
    return table


@pytest.mark.parametrize(("mode", "profile", "pulls", "hand_cards"), [
    ("commands", "burn_then_void", [["KS"], ["2S"], ["3S"], ["4S"]], 4),
    ("commands", "burn_then_player", [["KS"], ["2S"], ["3S"], ["4S"]], 5),  # P1 exposed
    ("commands", "burn_then_void", [["KS", "2S", "3S"]], 4),  # one pull, pending whole
])
def test_cards_pending_past_the_card_that_voids_the_shoe_keep_their_index(
        mode: str, profile: str, pulls: list[list[str]], hand_cards: int) -> None:
    """A held hand with cards pending; the hold ends, the hand completes, and its surplus
    voids the shoe (rule 6). The pending cards after the voiding one were drawn while the
    shoe was in play, each with its card_index already published: they stay this shoe's
    cards, unnecessary, their card_index kept (mqtt-api.md section 2), and the shoe report
    counts them so; before, they were re-published as `without_shoe`, card_index null."""
    table = _ready(mode, unnecessary_cards=profile)
    if mode == "commands":
        assert table.cmd("close_betting").ok
    table.draw("9C")  # burn
    table.draw(UNREAD)  # P1 unread: the hand is held
    for card in ["5H", "5D", "4C"]:  # B1, P2, B2 placed at once
        table.draw(card)
    for pull in pulls:
        table.draw(*pull)
    pending = [card for pull in pulls for card in pull]
    indexes = {c.card: c.card_index for c in table.of("card") if c.card in pending}
    assert sorted(indexes.values()) == list(range(8, 8 + len(pending)))
    mark = table.mark()
    assert table.cmd("manual_card", card_index=4, card="4S").ok  # P 9, a natural: complete
    assert table.of("shoe_voided", mark)
    last = {}
    for event in table.of("card"):
        last[event.card_index] = event
    for card, index in indexes.items():
        event = last[index]
        assert event.position is not None and event.position != "without_shoe", event
        assert event.shoe_id is not None and event.card == card
    assert not [e for e in table.of("card", mark) if e.card_index is None]
    assert not [p for p in table.of("procedure", mark) if p.rule == "card_without_shoe"]
    (report,) = table.of("shoe_report")
    assert report.cards_by_position["hand"] == hand_cards  # not the pending ones
    assert report.cards_drawn == 7 + len(pending)


def test_a_pull_whose_second_card_voids_the_shoe_keeps_its_third_card_s_index() -> None:
    """Betting open after a result (commands mode, burn_then_void): one pull of three
    cards; the first becomes the next burn, the second voids the shoe, the third, of the
    same pull, is an unnecessary card of this shoe with its card_index (its
    multi_card_pull procedure names it), not a card without a shoe."""
    table = _ready("commands", unnecessary_cards="burn_then_void")
    assert table.cmd("close_betting").ok
    for card in ["9C", "4S", "5H", "5D", "4C"]:  # burn, then a natural: hand 1's result
        table.draw(card)
    mark = table.mark()
    table.draw("TD", "AC", "AH")
    (pull,) = [p for p in table.of("procedure", mark) if p.rule == "multi_card_pull"]
    named = [c["card_index"] for c in pull.cards]
    cards = table.of("card", mark)
    assert [c.card_index for c in cards] == named and None not in named
    assert [c.position for c in cards] == ["burn", "unnecessary", "unnecessary"]
    assert all(c.shoe_id == cards[0].shoe_id for c in cards)
    assert table.of("shoe_voided", mark)


def test_a_pull_half_received_when_betting_closes_is_of_the_betting(  # rule 5
        ) -> None:
    """Commands mode: the first item of a three-card pull arrives while betting is open,
    then close_betting, then the pull's other items. The pull left the shoe together,
    while betting was open: its cards are unnecessary cards (the burn, then P1 exposed
    with its alarm, then the shoe voided under burn_then_player); before, they became a
    plain burn, P1 and B1."""
    table = _ready("commands", unnecessary_cards="burn_then_player")
    table.pull_id += 1
    items = [DeviceItem(at=table.now(0.05), item="card", pull_id=table.pull_id, pull_pos=pos,
                        pull_size=3, device_card_index=10 + pos, card=card)
             for pos, card in ((1, "9C"), (2, "4S"), (3, "5H"))]
    table.feed(items[0])
    mark = table.mark()
    assert table.cmd("close_betting").ok
    for item in items[1:]:
        table.feed(item.model_copy(update={"at": table.now(0.05)}))
    cards = {e.card: e for e in table.of("card", mark)}
    assert cards["9C"].position == "burn"
    assert cards["4S"].position == "P1" and cards["4S"].exposed_during_betting
    assert [a.code for a in table.of("alarm", mark)] == ["card_exposed_during_betting"]
    assert cards["5H"].position == "unnecessary"
    assert [v.reason for v in table.of("shoe_voided", mark)] == ["unnecessary_cards"]


@pytest.mark.parametrize("command", ["void_shoe", "new_shoe"])
def test_voiding_the_shoe_voids_no_hand_that_never_began(command: str) -> None:
    """Commands mode: after a result, betting is open and the next hand's burn is drawn
    (an unnecessary card). Voiding the shoe then (void_shoe, new_shoe force) voided "hand
    2", a hand that never began (rule 5: in progress only from close_betting), and counted
    it in hands_voided; without that early burn it did not."""
    table = _ready("commands")
    assert table.cmd("close_betting").ok
    for card in ["9C", "4S", "5H", "5D", "4C"]:  # burn, then a natural: hand 1's result
        table.draw(card)
    assert table.of("hand_result")
    table.draw("2C")  # drawn while betting is open: hand 2's burn
    mark = table.mark()
    fields = {"reason": "supervisor"} if command == "void_shoe" else {"force": True}
    assert table.cmd(command, **fields).ok
    assert table.of("hand_voided", mark) == []
    (voided,) = table.of("shoe_voided", mark)
    assert voided.hand_no is None


def test_a_card_of_a_voided_hand_is_published_voided() -> None:
    """`voided` on a card event was never true (outside review of the cores): an item of a
    pull half received when void_hand voided its hand is published once, already voided."""
    table = _ready("none")
    table.draw("9C")  # burn
    table.pull_id += 1
    items = [DeviceItem(at=table.now(0.05), item="card", pull_id=table.pull_id, pull_pos=pos,
                        pull_size=2, device_card_index=20 + pos, card=card)
             for pos, card in ((1, "4S"), (2, "5H"))]
    table.feed(items[0])
    assert table.cmd("void_hand", hand_no=1, reason="misdeal").ok
    mark = table.mark()
    table.feed(items[1].model_copy(update={"at": table.now(0.05)}))
    voided = [e for e in table.of("card", mark) if e.card in ("4S", "5H")]
    assert voided and all(e.voided and e.position is None and e.hand_no == 1 for e in voided)
    assert not [e for e in table.of("card") if e.voided and e.card not in ("4S", "5H")]

"""The scoreboard in the engine (roads.md): the current shoe's standing results, kept
for the whole shoe and across restarts; the board after every result, void and new
shoe equals `roads_message` of the standing results; the `roads` command."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from table import Table
from test_engine_shoe import shuffled

import shoed.core.engine as engine_module
from shoed.core.cards import commencement_count
from shoed.core.engine import RECORDS_KEPT, ROADS_EVENTS, Engine, Output
from shoed.core.game import next_needed
from shoed.core.inputs import Input
from shoed.core.roads import HandOutcome, roads_message


def standing(events: list[Any]) -> tuple[list[HandOutcome], str | None, int]:
    """The standing results of the current shoe, its id and the last roads event's seq,
    from the event stream alone (what a consumer sees)."""
    results: dict[int, HandOutcome] = {}
    shoe_id: str | None = None
    seq = 0
    for event in events:
        if event.type not in ROADS_EVENTS:
            continue
        seq = event.seq
        if event.type == "shoe_started":
            results, shoe_id = {}, event.shoe_id
        elif event.type == "hand_result":
            results[event.hand_no] = HandOutcome.from_event(event)
        else:
            results.pop(event.hand_no, None)
    return list(results.values()), shoe_id, seq


class CheckedTable(Table):
    """After every input: `roads_changed` says whether the board changed, and the board
    equals the one computed from scratch from the events so far."""

    checks = 0

    def feed(self, inp: Input) -> Output:
        out = super().feed(inp)
        changed = any(e.type in ROADS_EVENTS for e in out.events)
        assert out.roads_changed == changed
        if changed:
            self.check()
        return out

    def check(self) -> None:
        results, shoe_id, seq = standing(self.events)
        config = self.engine.config
        expected = roads_message(results, seq=seq, shoe_id=shoe_id, rows=config.roads_rows,
                                 tail_mode=config.roads_tail_mode)
        # the board a daemon publishes names its journal instance (decisions.md 208)
        assert self.engine.roads_message() == {**expected,
                                               "instance": self.engine.state.instance_id}
        assert self.engine.roads_seq == seq
        CheckedTable.checks += 1


def deal_with_voids(table: CheckedTable, shoe: list[str], seed: int,
                    hands: int | None = None) -> None:
    """Deal a shoe by the rules (stand-alone mode), now and then voiding a hand in
    progress or withdrawing an earlier result."""
    rng = random.Random(seed)
    cards = iter(shoe)
    table.load()
    first = next(cards)
    table.draw(first)
    for _ in range(commencement_count(first)):
        table.draw(next(cards))
    dealt = 0
    while len(shoe) - table.device_index >= 8 and (hands is None or dealt < hands):
        table.draw(next(cards))  # the burn
        hand: list[str] = []
        voided = False
        while next_needed(hand) is not None:
            card = next(cards)
            hand.append(card)
            table.draw(card)
            if len(hand) == 2 and rng.random() < 0.05:
                hand_no = table.state["hand_no"]
                assert table.cmd("void_hand", hand_no=hand_no, reason="dropped card").ok
                voided = True
                break
        dealt += 1
        if not voided and rng.random() < 0.08:
            results = [e.hand_no for e in table.of("hand_result")
                       if e.shoe_id == table.state["shoe_id"]]
            out = table.cmd("void_hand", hand_no=rng.choice(results), reason="review")
            assert out.ok or (out.error is not None and out.error.code == "already_voided")


@pytest.mark.parametrize("tail_mode", ["stay", "drop"])
def test_a_full_shoe_with_voids_the_board_equals_the_standing_results(tail_mode: str) -> None:
    table = CheckedTable(betting_control="none", roads_tail_mode=tail_mode, roads_rows=6)
    table.hello()
    before = CheckedTable.checks
    deal_with_voids(table, shuffled(8, 21), seed=4)
    results = table.of("hand_result")
    voided = table.of("hand_voided")
    assert len(results) > RECORDS_KEPT * 0.6 and voided
    assert any(v.result_withdrawn for v in voided) and any(
        not v.result_withdrawn for v in voided)
    assert CheckedTable.checks - before == 1 + len(results) + len(voided)
    board = table.engine.roads_message()
    assert board["stats"]["hands"] == len(results) - sum(v.result_withdrawn for v in voided)
    assert board["tail_mode"] == tail_mode


def test_the_board_holds_the_whole_shoe_beyond_the_recall_records(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """recall keeps the last RECORDS_KEPT hands; the board keeps every standing result
    of the shoe whatever that is (here 30, so a shoe has far more)."""
    monkeypatch.setattr(engine_module, "RECORDS_KEPT", 30)
    table = CheckedTable(betting_control="none")
    table.hello()
    deal_with_voids(table, shuffled(8, 8), seed=99)
    assert table.engine.roads_message()["stats"]["hands"] > 30
    assert len(table.engine.state.records) == 30
    restored = Engine.restore(table.engine.config, table.engine.snapshot())
    assert restored.roads_message() == table.engine.roads_message()


def test_a_new_shoe_starts_an_empty_board() -> None:
    table = CheckedTable(betting_control="none")
    table.hello()
    deal_with_voids(table, shuffled(8, 2), seed=1, hands=12)
    assert table.cmd("end_shoe").ok
    board = table.engine.roads_message()
    assert board["stats"]["hands"] > 0  # the ended shoe's board stands until the next
    out = table.load()
    assert out.roads_changed
    board = table.engine.roads_message()
    (_, started) = table.of("shoe_started")
    assert (board["shoe_id"], board["seq"], board["bead_plate"], board["big_road"]) == (
        started.shoe_id, started.seq, [], [])


@pytest.mark.parametrize("how", ["snapshot", "replay"])
def test_the_board_survives_a_restart(how: str) -> None:
    table = CheckedTable(betting_control="none")
    table.hello()
    deal_with_voids(table, shuffled(8, 5), seed=7, hands=40)
    before = table.engine.roads_message()
    config = table.engine.config
    if how == "snapshot":
        engine = Engine.restore(config, table.engine.snapshot())
    else:
        engine = Engine(config, instance_id="i1")
        for inp in table.inputs:
            engine.handle(inp)
    assert engine.roads_message() == before
    table.engine = engine
    deal_with_voids_more(table)


def deal_with_voids_more(table: CheckedTable) -> None:
    """Go on dealing after a restart: every check still holds."""
    for hand in (["9S", "2S", "TH", "5D", "6C"], ["4S", "3H", "5D", "4C", "KD"]):
        for card in hand:
            table.draw(card)
    assert table.cmd("void_hand", hand_no=table.of("hand_result")[-1].hand_no,
                     reason="review").ok


def test_a_snapshot_from_before_the_board_rebuilds_it_from_the_records() -> None:
    table = CheckedTable(betting_control="none")
    table.hello()
    deal_with_voids(table, shuffled(8, 13), seed=3, hands=20)
    before = table.engine.roads_message()
    old = json.loads(table.engine.snapshot())
    del old["roads"]
    engine = Engine.restore(table.engine.config, json.dumps(old))
    after = engine.roads_message()
    assert after.pop("seq") == engine.seq
    before.pop("seq")
    assert after == before


def test_the_roads_command_answers_the_board_read_only() -> None:
    table = CheckedTable(betting_control="none")
    table.hello()
    deal_with_voids(table, shuffled(8, 17), seed=2, hands=8)
    m = table.mark()
    out = table.cmd("roads")
    assert out.ok and out.result == table.engine.roads_message()
    assert out.events == [] and not out.roads_changed  # no supervisor_action
    assert table.since(m) == []


def test_a_refused_or_failed_input_leaves_the_board_as_it_was() -> None:
    table = CheckedTable(betting_control="none")
    table.hello()
    deal_with_voids(table, shuffled(8, 19), seed=5, hands=10)
    before = table.engine.roads_message()
    assert not table.cmd("void_hand", hand_no=99, reason="x").ok
    assert table.engine.roads_message() == before
    checkpoint = table.engine.checkpoint(full=True)
    standing_now = [r["hand_no"] for r in table.engine.roads_message()["bead_plate"]]
    out = table.cmd("void_hand", hand_no=standing_now[0], reason="x")
    assert out.ok and out.roads_changed
    assert table.engine.roads_message() != before
    table.engine.roll_back(checkpoint)  # what the shell does when storage fails
    assert table.engine.roads_message() == before


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), rows=st.integers(3, 8),
       tail_mode=st.sampled_from(["stay", "drop"]))
def test_any_shoe_with_voids_keeps_the_board_equal_to_the_standing_results(
        seed: int, rows: int, tail_mode: str) -> None:
    table = CheckedTable(betting_control="none", roads_rows=rows, roads_tail_mode=tail_mode)
    table.hello()
    deal_with_voids(table, shuffled(8, seed), seed=seed, hands=30)
    restored = Engine.restore(table.engine.config, table.engine.snapshot())
    assert restored.roads_message() == table.engine.roads_message()

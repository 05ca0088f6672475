"""An input the engine cannot apply (a bug) changes nothing: the checkpoint taken before
it comes back whole. A device input's checkpoint is the trail (the state pickled some
inputs ago, and the inputs since, handled again on a roll-back): it gives exactly the
state before the input, wherever the trail was begun, and costs no pickle per card."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from table import Table

from shoed.core import checkpoint
from shoed.core.engine import Engine


def _state(engine: Engine) -> dict[str, Any]:
    state = engine.state.model_dump()
    # The engine_error alarm itself takes a seq and an alarm id; the rest must not move.
    for key in ("seq", "alarm_counter"):
        state.pop(key)
    shoe = state["shoe"]
    if shoe is not None and shoe["report"] is not None:  # the shoe report counts it
        shoe["report"]["alarms"].pop("engine_error", None)
        shoe["report"]["alarm_log"] = [a for a in shoe["report"]["alarm_log"]
                                       if a["code"] != "engine_error"]
    return state


def _dealing_table() -> Table:
    table = Table(betting_control="none")
    table.hello()
    table.commence("5S", ["2C", "3D", "4H", "6S", "7C"])
    for hand in (["2S", "TH", "5D", "6C"], ["4S", "3H", "5D", "4C"]):
        table.draw(*hand)
        table.draw("9D")  # the next hand's burn
    table.draw("8S")  # a card into the third hand
    return table


def _broken_once(original: Any) -> Any:
    """`_advance` with a bug the next input triggers: it changes what a device input may
    change, then fails halfway through; the inputs handled again on the roll-back run the
    real code (a bug is the code's answer to that input in that state)."""
    calls = [0]

    def broken(self: Engine, *args: object) -> Any:
        calls[0] += 1
        if calls[0] > 1:
            return original(self, *args)
        shoe = self.state.shoe
        assert shoe is not None
        shoe.card_counter += 100
        if shoe.hand is not None:
            shoe.hand.cards.clear()
        self.state.records.append({"hand_no": 999})
        raise RuntimeError("a bug")

    return broken


@pytest.mark.parametrize("phase", ["commencement", "dealing"])
def test_a_failing_device_input_rolls_back_everything(
        monkeypatch: pytest.MonkeyPatch, phase: str) -> None:
    table = Table(betting_control="none") if phase == "commencement" else _dealing_table()
    if phase == "commencement":
        table.hello()
        table.commence("5S", ["2C"])  # two of the five burns drawn
    engine = table.engine
    before = _state(engine)
    assert engine.state.shoe is not None
    assert (engine.state.shoe.phase == "commencement") == (phase == "commencement")
    records_before = len(engine.state.records)
    monkeypatch.setattr(Engine, "_advance", _broken_once(Engine._advance))
    out = table.draw("KD")[-1]
    errors = [e for e in out.events if e.type == "alarm" and e.code == "engine_error"]
    assert errors and "a bug" in errors[0].message
    assert len(engine.state.records) == records_before
    assert _state(engine) == before


def test_the_rollback_handle_restores_a_device_input() -> None:
    """What the daemon uses when the journal cannot store an input's effect."""
    table = _dealing_table()
    engine = table.engine
    before = engine.state.model_dump()
    table.draw("QC")
    assert engine.state.model_dump() != before
    assert engine.last_rollback is not None
    engine.roll_back(engine.last_rollback)
    assert engine.state.model_dump() == before


def test_a_device_input_pickles_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trail is begun once (prepare_checkpoint, after a card's event has left); the
    cards after it take no pickle of the state until REBASE_EVERY inputs, and a failing
    one still comes back whole."""
    table = _dealing_table()
    engine = table.engine
    engine.prepare_checkpoint()
    pickled: list[str] = []
    original_trail = checkpoint.Trail.of

    def counting_trail(state: Any) -> Any:
        pickled.append("trail")
        return original_trail(state)

    original_take = checkpoint.take

    def counting_take(state: Any, full: bool) -> Any:
        pickled.append("take")
        return original_take(state, full)

    monkeypatch.setattr(checkpoint.Trail, "of", staticmethod(counting_trail))
    monkeypatch.setattr("shoed.core.engine.take", counting_take)
    for card in ("QC", "2D", "3D"):
        table.draw(card)
        engine.prepare_checkpoint()
    assert pickled == []
    before = _state(engine)
    records_before = len(engine.state.records)
    monkeypatch.setattr(Engine, "_advance", _broken_once(Engine._advance))
    table.draw("KD")
    assert len(engine.state.records) == records_before
    assert _state(engine) == before
    assert "trail" not in pickled  # rolled back from the trail; the replay pickles its own


def test_a_new_trail_every_rebase_every_inputs() -> None:
    table = _dealing_table()
    engine = table.engine
    engine.prepare_checkpoint()
    first = engine.last_rollback
    for _ in range(checkpoint.REBASE_EVERY + 1):
        table.tick(0.01)
        engine.prepare_checkpoint()
    rollback = engine.last_rollback
    assert isinstance(rollback, checkpoint.Replayed) and rollback is not first
    assert rollback.covers < checkpoint.REBASE_EVERY  # a roll-back replays at most that many


ACTIONS = st.lists(st.tuples(
    st.sampled_from(["draw", "tick", "prepare", "roll_back", "cmd"]),
    st.sampled_from(["2C", "3D", "4H", "5S", "6C", "7D", "8H", "9S", "TC", "JD", "QH",
                     "KS", "AC"])), max_size=60)


@settings(max_examples=60, deadline=None)
@given(ACTIONS)
def test_every_checkpoint_gives_the_state_before_its_input(actions: list[tuple[str, str]]
                                                           ) -> None:
    """Random cards, ticks, commands, trail starts and roll-backs (as the shell does when
    storage fails): the last input's checkpoint is always the state just before it, and
    a table rolled back goes on exactly like one that never handled the input."""
    table = _dealing_table()
    engine = table.engine
    assert engine.last_rollback is not None
    before = engine.last_rollback().model_dump()  # the state before the last card drawn
    for action, card in actions:
        if action == "prepare":
            engine.prepare_checkpoint()
            continue
        if action == "roll_back":
            if engine.last_rollback is not None:
                engine.roll_back(engine.last_rollback)
                assert engine.state.model_dump() == before
            continue
        before = engine.state.model_dump()
        if action == "draw":
            table.draw(card)
        elif action == "tick":
            table.tick(0.5)
        else:
            table.cmd("resume", operator="t")  # accepted or refused, it rolls back alike
        rollback = engine.last_rollback
        assert rollback is not None and rollback().model_dump() == before

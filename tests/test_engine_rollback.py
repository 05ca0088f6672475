"""An input the engine cannot apply (a bug) changes nothing: the checkpoint taken before
it comes back whole, also the parts a device input's checkpoint keeps by reference."""

from __future__ import annotations

from typing import Any

import pytest
from table import Table

from shoed.core.engine import Engine


def _state(engine: Engine) -> dict[str, Any]:
    state = engine.state.model_dump()
    # The engine_error alarm itself takes a seq and an alarm id; the rest must not move.
    for key in ("seq", "alarm_counter"):
        state.pop(key)
    shoe = state["shoe"]
    if shoe is not None and shoe["report"] is not None:  # the shoe report counts it
        shoe["report"]["alarms"].pop("engine_error", None)
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

    def broken(self: Engine, *args: object) -> None:
        # Change what a device input may change, then fail halfway through.
        shoe = self.state.shoe
        assert shoe is not None
        shoe.card_counter += 100
        if shoe.hand is not None:
            shoe.hand.cards.clear()
        self.state.records.append({"hand_no": 999})
        raise RuntimeError("a bug")

    monkeypatch.setattr(Engine, "_advance", broken)
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


def test_a_prepared_checkpoint_rolls_back_like_one_taken_in_handle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon prepares the next card's checkpoint after an event has left; handle()
    then uses it, and a failing input still comes back whole."""
    table = _dealing_table()
    engine = table.engine
    engine.prepare_checkpoint()
    before = _state(engine)
    records_before = len(engine.state.records)
    taken: list[bool] = []
    original = Engine.checkpoint

    def counting(self: Engine, full: bool) -> Any:
        taken.append(full)
        return original(self, full)

    def broken(self: Engine, *args: object) -> None:
        self.state.records.append({"hand_no": 999})
        assert self.state.shoe is not None
        self.state.shoe.card_counter += 100
        raise RuntimeError("a bug")

    monkeypatch.setattr(Engine, "checkpoint", counting)
    monkeypatch.setattr(Engine, "_advance", broken)
    table.draw("KD")
    assert taken == []  # the prepared one was used
    assert len(engine.state.records) == records_before
    assert _state(engine) == before


def test_a_stale_prepared_checkpoint_is_not_used() -> None:
    """Prepared, then another input handled (or the state replaced): handle() takes its
    own, so a rollback never returns to a state older than the input's."""
    table = _dealing_table()
    engine = table.engine
    engine.prepare_checkpoint()
    table.draw("QC")  # uses it
    engine.prepare_checkpoint()
    table.draw("2D")  # uses the new one
    middle = engine.state.model_dump()
    engine.prepare_checkpoint()
    engine.roll_back(engine.checkpoint(full=True))  # a new state object, as after a rollback
    table.draw("3D")
    assert engine.last_rollback is not None
    assert engine.last_rollback().model_dump() == middle
    engine.prepare_checkpoint()
    before_4d = engine.state.model_dump()
    table.draw("4D")
    table.draw("5D")  # handled without a new prepare: the old one is stale
    assert engine.last_rollback is not None
    assert engine.last_rollback().model_dump() != before_4d

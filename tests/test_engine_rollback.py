"""An input the engine cannot apply (a bug) changes nothing: the checkpoint taken before
it comes back whole, also the parts a device input's checkpoint keeps by reference."""

from __future__ import annotations

from typing import Any

import pytest
from table import Table

from shoed.core.engine import Engine


def _state(engine: Engine) -> dict[str, Any]:
    state = engine.s.model_dump()
    # The engine_error alarm itself takes a seq and an alarm id; the rest must not move.
    for key in ("seq", "alarm_counter"):
        state.pop(key)
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
    assert engine.s.shoe is not None
    assert (engine.s.shoe.phase == "commencement") == (phase == "commencement")
    records_before = len(engine.s.records)

    def broken(self: Engine, *args: object) -> None:
        # Change what a device input may change, then fail halfway through.
        shoe = self.s.shoe
        assert shoe is not None
        shoe.card_counter += 100
        if shoe.hand is not None:
            shoe.hand.cards.clear()
        self.s.records.append({"hand_no": 999})
        raise RuntimeError("a bug")

    monkeypatch.setattr(Engine, "_advance", broken)
    out = table.draw("KD")[-1]
    errors = [e for e in out.events if e.type == "alarm" and e.code == "engine_error"]
    assert errors and "a bug" in errors[0].message
    assert len(engine.s.records) == records_before
    assert _state(engine) == before


def test_the_rollback_handle_restores_a_device_input() -> None:
    """What the daemon uses when the journal cannot store an input's effect."""
    table = _dealing_table()
    engine = table.engine
    before = engine.s.model_dump()
    table.draw("QC")
    assert engine.s.model_dump() != before
    assert engine.last_rollback is not None
    engine.s = engine.last_rollback()
    assert engine.s.model_dump() == before

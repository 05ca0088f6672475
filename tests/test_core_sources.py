"""One source for each fact: the tables the core derives, and the engine's seams."""

from __future__ import annotations

import dataclasses
from typing import get_args

import pytest
from table import Table

import firmware_protocol.messages as wire
from shoed.core import cards, commands, events
from shoed.core.engine import COMMAND_HANDLERS, PHASE_STEPS, RESULT_FIELDS, Engine
from shoed.core.game import HandResult
from shoed.core.state import FINISHED_PHASES, EngineState, Phase


def test_command_tables_follow_the_command_union() -> None:
    classes = get_args(get_args(commands.Command)[0])
    assert classes == commands.COMMAND_CLASSES
    assert {commands.command_name(c) for c in classes} == commands.COMMAND_NAMES
    assert len(commands.COMMAND_NAMES) == len(classes)
    # The engine answers every command but those the shell answers (replay from the
    # journal, whoami from the sender); read-only commands are among the known ones.
    assert set(COMMAND_HANDLERS) == commands.COMMAND_NAMES - commands.SHELL_COMMANDS
    assert commands.READ_ONLY_COMMANDS <= commands.COMMAND_NAMES


def test_event_types_follow_the_event_union() -> None:
    assert get_args(get_args(events.Event)[0]) == events.EVENT_TYPES
    names = [get_args(c.model_fields["type"].annotation)[0] for c in events.EVENT_TYPES]
    assert len(set(names)) == len(names) and "hand_result" in names


def test_hand_result_event_carries_every_result_fact() -> None:
    facts = {f.name for f in dataclasses.fields(HandResult)}
    assert set(RESULT_FIELDS) == facts
    assert facts <= set(events.HandResultEvent.model_fields)


def test_cards_use_the_wire_ranks_and_suits() -> None:
    assert cards.RANKS is wire.RANKS and cards.SUITS is wire.SUITS
    assert wire.OpticalCode(10, 3).notation == "TD" == cards.parse_card("td")


def test_phase_steps_cover_every_phase_and_end_in_finished_ones() -> None:
    phases = set(get_args(Phase))
    assert set(PHASE_STEPS) == phases
    assert all(targets <= phases for targets in PHASE_STEPS.values())
    assert {p for p, targets in PHASE_STEPS.items() if not targets} == FINISHED_PHASES


def test_a_phase_step_outside_the_table_is_an_engine_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    table = Table(betting_control="none")
    table.hello()
    table.load()
    before = table.engine.state.model_dump()

    def wrong(self: Engine) -> None:
        shoe = self.state.shoe
        assert shoe is not None
        self._enter(shoe, "dealing")  # commencement -> dealing skips between_hands

    monkeypatch.setattr(Engine, "_advance_commencement", wrong)
    out = table.draw("5S")[-1]
    (alarm,) = [e for e in out.events if e.type == "alarm"]
    assert alarm.code == "engine_error" and "between_hands" in alarm.message
    after = table.engine.state.model_dump()
    for key in ("seq", "alarm_counter", "pull_arrivals"):
        before.pop(key), after.pop(key)
    assert after["shoe"]["report"]["alarms"].pop("engine_error") == 1  # the report counts it
    logged = after["shoe"]["report"]["alarm_log"].pop()  # and its alarm history holds it
    assert logged["code"] == "engine_error" and logged["seq"] == alarm.seq
    assert after == before


def test_engine_state_is_read_only_and_rolled_back_by_name() -> None:
    table = Table(betting_control="none")
    table.hello()
    engine = table.engine
    with pytest.raises(AttributeError):
        setattr(engine, "state", EngineState(instance_id="x"))  # noqa: B010
    checkpoint = engine.checkpoint(full=True)
    table.commence("AS", ["2C"])
    for card in ["9S", "2S", "TH", "5D", "6C"]:
        table.draw(card)
    assert engine.state.shoe is not None
    engine.roll_back(checkpoint)
    assert engine.state.shoe is None and engine.public_state()["shoe_state"] == "no_shoe"

"""Engine.handle(inp, device_later=True) and settle_device(): the gate's and the indicator's
requests worked out after the input's events (the daemon sends a card's event first), the
same requests, events and state as handle(inp) gives, whenever they are settled."""

from __future__ import annotations

import itertools
import pickle
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from table import UNREAD, Table
from test_engine_interleavings import action, run

import shoed.core.engine as engine_module
from shoed.core.checkpoint import REBASE_EVERY
from shoed.core.engine import Engine, Output
from shoed.core.inputs import DeviceItem, Input


class LaterTable(Table):
    """A table whose engine works the device's requests out later: settled at once, by
    the next input, or by reading the state, as `settle` (a callable) picks for each."""

    def __init__(self, settle: Any = None, **config: Any) -> None:
        super().__init__(**config)
        self.settle = settle or (lambda: "now")
        self.outputs: list[Output] = []

    def feed(self, inp: Input) -> Output:
        self.inputs.append(inp)
        out = self.engine.handle(inp, device_later=True)
        self.outputs.append(out)
        self.events += out.events
        how = self.settle()
        if how == "now":
            self.engine.settle_device()
        elif how == "state":
            assert self.engine.state is not None
        elif how == "snapshot":
            self.engine.snapshot()
        # "next": the next input's handle() settles it
        return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["commands", "none"]), st.booleans(), st.lists(action, max_size=60),
       st.data())
def test_later_or_not_the_same_requests_events_and_state(
        mode: str, commenced: bool, actions: list[tuple[Any, ...]], data: st.DataObject) -> None:
    settles = st.sampled_from(["now", "next", "state", "snapshot"])
    eager = Table(betting_control=mode, decks=1)
    later = LaterTable(lambda: data.draw(settles), betting_control=mode, decks=1)
    eager_outputs: list[Output] = []
    original_feed = eager.feed

    def feed(inp: Input) -> Output:
        out = original_feed(inp)
        eager_outputs.append(out)
        return out

    eager.feed = feed  # type: ignore[method-assign]
    for table in (eager, later):
        table.hello()
        if commenced:
            table.commence("AS", ["2C"])
        for act in actions:
            run(table, act)
    later.engine.settle_device()
    assert [o.device for o in later.outputs] == [o.device for o in eager_outputs]
    assert [e.model_dump() for e in later.events] == [e.model_dump() for e in eager.events]
    assert later.engine.snapshot() == eager.engine.snapshot()
    assert later.state == eager.state


@pytest.mark.parametrize("read", ["state", "snapshot", "checkpoint"])
def test_the_requests_wait_for_the_settle_and_reading_the_state_settles_them(
        read: str) -> None:
    eager, later = Table(decks=1), LaterTable(lambda: "next", decks=1)
    for table in (eager, later):
        table.hello()
        table.commence("AS", ["2C"])
    for card in ["3C", "4D", "5H", "6S", "7C"]:  # a hand: the indicator moves with it
        [want] = eager.draw(card)
        [out] = later.draw(card)
        assert out.events and out.device == []  # the events are there, the requests not yet
        if want.device:
            break
    assert want.device and want.device[-1].kind == "indicator"
    assert later.engine._state.indicator_sent != eager.engine._state.indicator_sent
    if read == "state":
        assert later.engine.state.indicator_sent == eager.engine._state.indicator_sent
    elif read == "snapshot":
        assert later.engine.snapshot() == eager.engine.snapshot()
    else:
        later.engine.checkpoint(full=True)
    assert later.engine._state.indicator_sent == eager.engine._state.indicator_sent
    assert out.device == want.device  # added to the card's own Output
    later.engine.settle_device()
    assert out.device == want.device  # once


def test_a_roll_back_drops_the_requests_of_the_input_it_undoes() -> None:
    """An unread card holds the game and shows stop; undone before its requests were
    settled, it asks for nothing (its holds are not the state's any more)."""
    eager = Table(decks=1)
    eager.hello()
    eager.commence("AS", ["2C"])
    eager.draw("3C")
    [held] = eager.draw(UNREAD)
    assert [r.kind for r in held.device] == ["indicator"]  # what the card does, not undone
    table = LaterTable(lambda: "next", decks=1)
    table.hello()
    table.commence("AS", ["2C"])
    table.draw("3C")
    table.engine.settle_device()
    before = table.engine.snapshot()
    [out] = table.draw(UNREAD)
    table.engine.roll_back(table.engine.last_rollback)  # type: ignore[arg-type]
    table.engine.settle_device()
    assert out.device == []
    assert table.engine.snapshot() == before


@pytest.mark.parametrize("later", [False, True])
def test_an_error_working_the_requests_out_undoes_nothing_and_is_an_alarm_next(
        monkeypatch: pytest.MonkeyPatch, later: bool) -> None:
    """Either way: the card stands (its events may have gone), the gate and indicator stay
    as they were, and the next input raises the engine_error alarm that says why."""
    table = LaterTable(lambda: "now", decks=1) if later else Table(decks=1)
    table.hello()
    table.load()
    shown = table.engine.state.indicator_sent

    def broken(*args: Any) -> int:
        raise RuntimeError("indicator broke")

    monkeypatch.setattr(engine_module, "indicator", broken)
    [out] = table.draw("AS")
    assert "card" in [e.type for e in out.events]
    assert out.device == []
    assert table.engine.state.indicator_sent == shown
    assert table.state["commencement"]["card"] == "AS"  # applied, not rolled back
    monkeypatch.undo()
    mark = table.mark()
    table.draw("2C")
    [alarm] = [e for e in table.of("alarm", mark) if e.code == "engine_error"]
    assert "indicator broke" in alarm.message and "gate and the indicator" in alarm.message
    assert "after input item" in alarm.message
    assert alarm.momentary
    table.draw("3C")
    assert not [e for e in table.of("alarm", mark + 1) if e.code == "engine_error"]


def _failed_step(monkeypatch: pytest.MonkeyPatch, keep: bool = False) -> Table:
    """A table whose last card's gate and indicator step failed (its alarm is due); with
    `keep`, the step keeps failing (as a bug does, in a replay too)."""
    table = LaterTable(lambda: "now", decks=1)
    table.hello()
    table.load()
    table.engine._trail = None
    table.engine.prepare_checkpoint()  # a trail from here: its replay meets the same code

    def broken(*args: Any) -> int:
        raise RuntimeError("indicator broke")

    monkeypatch.setattr(engine_module, "indicator", broken)
    table.draw("AS")
    if not keep:
        monkeypatch.undo()
    return table


def _next_types(engine: Any, card: str, at: float) -> list[tuple[int, str, str | None]]:
    item = DeviceItem(at=at, item="card", pull_id=99, pull_pos=1, pull_size=1,
                      device_card_index=99, card=card)
    return [(e.seq, e.type, getattr(e, "code", None)) for e in engine.handle(item).events]


def test_the_due_alarm_survives_a_restart_from_a_snapshot(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The effect write snapshots between cards: a restart replays the next card from
    there, and must make the events the live engine made (same seq, same alarm)."""
    table = _failed_step(monkeypatch)
    restored = Engine.restore(table.engine.config, table.engine.snapshot())
    live = _next_types(table.engine, "2C", table.now())
    assert ("engine_error" in [code for _, _, code in live])
    assert _next_types(restored, "2C", table.t) == live


@pytest.mark.parametrize("way", ["full", "trail"])
def test_a_roll_back_of_the_alarms_input_brings_the_alarm_back(
        monkeypatch: pytest.MonkeyPatch, way: str) -> None:
    """The input that raised the alarm is undone (its store failed): the next one raises
    it again, at the same seq, from a full checkpoint or from the trail's replay."""
    table = _failed_step(monkeypatch, keep=way == "trail")
    engine = table.engine
    checkpoint = engine.checkpoint(full=True) if way == "full" else None
    first = _next_types(engine, "2C", table.now())
    assert ("engine_error" in [code for _, _, code in first])
    engine.roll_back(checkpoint or engine.last_rollback)  # type: ignore[arg-type]
    assert _next_types(engine, "2C", table.t) == first


def test_a_trail_begun_with_the_alarm_due_replays_it(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _failed_step(monkeypatch)
    engine = table.engine
    engine._trail = None
    engine.prepare_checkpoint()  # a new trail, the alarm still due
    live = _next_types(engine, "2C", table.now())
    after = engine.snapshot()
    engine.roll_back(engine.last_rollback)  # type: ignore[arg-type]
    assert _next_types(engine, "2C", table.t) == live
    assert engine.snapshot() == after


def test_a_new_trail_starts_from_the_settled_state() -> None:
    """The checkpoint's trail (prepare_checkpoint) begins at the state with the due
    requests worked out, as a roll-back to it must find the gate and indicator."""
    eager = Table(decks=8, betting_control="none")
    table = LaterTable(lambda: "next", decks=8, betting_control="none")
    for t in (eager, table):
        t.hello()
        t.commence("AS", ["2C"])
    suits = "CDHS"
    hands = ([f"3{a}", f"9{a}", f"8{a}", f"K{a}", f"K{b}"]  # a burn, two naturals
             for a, b in zip(itertools.cycle(suits), itertools.cycle(suits[1:] + suits[0])))
    for card in itertools.islice(itertools.chain.from_iterable(hands), 80):
        [want] = eager.draw(card)
        table.draw(card)
        trail = table.engine._trail
        if want.device and trail is not None and len(trail.inputs) >= REBASE_EVERY:
            break
    else:
        pytest.fail("no card with a request after a full trail")
    assert table.engine._device_due is not None
    table.engine.prepare_checkpoint()
    assert table.engine._trail is not None
    base = pickle.loads(table.engine._trail.base)
    settled = eager.engine._state
    assert (base.gate_sent, base.indicator_sent) == (settled.gate_sent, settled.indicator_sent)

"""The `table_id_conflict` alarm (issue 13 section 3): another daemon held the table's
MQTT root. A held alarm, raised with the other daemon's run_id and when it was seen,
cleared when this daemon is alone again; it survives a snapshot and a replay."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from table import Table

from shoed.core.engine import Engine, iso
from shoed.core.inputs import INPUT_ADAPTER, RootConflict


def ready() -> Table:
    table = Table(betting_control="none")
    table.hello()
    table.commence("AS", ["2C"])
    return table


def seen(table: Table, other: str = "run-A") -> RootConflict:
    return RootConflict(at=table.now(), mono=100.0, active=True, other_run_id=other,
                        message="this daemon (run_id run-B) does not publish there")


def alone(table: Table) -> RootConflict:
    return RootConflict(at=table.now(), mono=130.0, active=False,
                        message="this daemon (run_id run-B) is alone on the root again")


def test_raised_with_the_other_run_id_and_when_then_cleared() -> None:
    table = ready()
    mark = table.mark()
    raised_at = table.t + 0.5
    table.feed(seen(table))
    (raise_,) = table.of("alarm", mark)
    assert raise_.code == "table_id_conflict" and raise_.active and not raise_.momentary
    assert "run_id run-A" in raise_.message
    assert table.engine.state.alarms[0].since == raise_.ts
    assert raise_.ts == iso(raised_at)  # the input's wall time: when it was seen
    assert f"seen at {raise_.ts}" in raise_.message
    (listed,) = table.state["alarms"]
    assert listed["code"] == "table_id_conflict" and listed["alarm_id"] == raise_.alarm_id
    # Seen again while it lasts (every look at the root): no second raise.
    table.feed(seen(table))
    assert len(table.of("alarm", mark)) == 1
    # The game goes on meanwhile: the alarm holds nothing.
    assert table.state["shoe_state"] == "between_hands"
    table.draw("9S")
    assert table.state["gate_locked"] is False
    table.feed(alone(table))
    clear = table.of("alarm", mark)[-1]
    assert (clear.code, clear.active, clear.alarm_id) == ("table_id_conflict", False,
                                                           raise_.alarm_id)
    assert clear.seq > raise_.seq and clear.message.endswith("alone on the root again")
    assert table.state["alarms"] == []
    # Alone again when it was never raised: nothing.
    before = len(table.events)
    table.feed(alone(table))
    assert len(table.events) == before


def test_it_counts_in_the_shoe_report() -> None:
    table = ready()
    table.feed(seen(table))
    table.feed(alone(table))
    table.cmd("end_shoe")
    table.draw("9S", "2C", "3D", "4H")
    reports = table.of("shoe_report")
    assert reports and reports[-1].alarms.get("table_id_conflict") == 1


def test_restart_mid_conflict_snapshot_and_replay_give_the_same_clear() -> None:
    table = ready()
    table.feed(seen(table))
    snapshot = table.engine.snapshot()
    clear_input = alone(table)
    table.feed(clear_input)
    expected = table.events[-1].model_dump_json()

    restored = Engine.restore(table.engine.config, snapshot)
    assert [a.code for a in restored.state.alarms] == ["table_id_conflict"]
    assert restored.public_state()["alarms"][0]["code"] == "table_id_conflict"
    (clear,) = restored.handle(clear_input).events
    assert clear.model_dump_json() == expected

    # Replay of the journalled inputs (JSON, as the journal stores them): byte for byte.
    replayed = Table(betting_control="none")
    bodies = [inp.model_dump_json() for inp in table.inputs]
    events = [e.model_dump_json() for inp in bodies
              for e in replayed.engine.handle(INPUT_ADAPTER.validate_json(inp)).events]
    assert events == [e.model_dump_json() for e in table.events]


def test_the_input_refuses_what_it_does_not_know() -> None:
    body = seen(Table()).model_dump_json()
    assert INPUT_ADAPTER.validate_json(body).kind == "root_conflict"
    try:
        INPUT_ADAPTER.validate_json(body.replace('"active":true', '"active":true,"x":1'))
    except ValueError as error:
        assert "x" in str(error)
    else:
        raise AssertionError("an unknown field was accepted")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), max_size=12))
def test_any_sequence_of_looks_gives_paired_raises_and_clears(looks: list[bool]) -> None:
    table = ready()
    mark = table.mark()
    for conflict in looks:
        table.feed(seen(table) if conflict else alone(table))
    alarms = [(a.alarm_id, a.active) for a in table.of("alarm", mark)]
    # Alternating raise, clear of one alarm_id each; open only while the last look saw one.
    assert [active for _, active in alarms] == [i % 2 == 0 for i in range(len(alarms))]
    for i in range(0, len(alarms) - 1, 2):
        assert alarms[i][0] == alarms[i + 1][0]
    lasting = bool(looks) and looks[-1]
    assert (len(alarms) % 2 == 1) == lasting
    assert bool(table.state["alarms"]) == lasting
    seqs = [e.seq for e in table.events]
    assert seqs == list(range(1, len(seqs) + 1))

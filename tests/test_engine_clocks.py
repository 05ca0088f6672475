"""The wall clock is stepped by NTP: durations in the engine run on the inputs' `mono`
(the daemon's uptime clock), timestamps on `at` (wall). Old journals carry no `mono`:
then the wall clock is all there is."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from table import Table

from shoed.core.engine import Engine, iso, iso_by_datetime
from shoed.core.inputs import DeviceFault, DeviceItem, Input, Tick
from shoed.core.pulls import PULL_TIMEOUT_S

HOUR = 3600.0


class Clocks:
    """Feeds a table's engine inputs stamped with a wall clock and an uptime clock that
    move apart when the test steps the wall clock."""

    def __init__(self, table: Table, mono: float = 1000.0) -> None:
        self.table = table
        self.wall = table.t + 10.0
        self.mono = mono

    def later(self, seconds: float, wall_step: float = 0.0) -> tuple[float, float]:
        self.mono += seconds
        self.wall += seconds + wall_step
        return self.wall, self.mono

    def item(self, card: str, pull_id: int, pos: int, size: int, seconds: float = 0.05,
             wall_step: float = 0.0) -> None:
        at, mono = self.later(seconds, wall_step)
        self.table.feed(DeviceItem(at=at, mono=mono, item="card", pull_id=pull_id,
                                   pull_pos=pos, pull_size=size, card=card))

    def tick(self, seconds: float, wall_step: float = 0.0) -> None:
        at, mono = self.later(seconds, wall_step)
        self.table.feed(Tick(at=at, mono=mono))

    def jam(self, active: bool, seconds: float = 0.1, wall_step: float = 0.0) -> None:
        at, mono = self.later(seconds, wall_step)
        self.table.feed(DeviceFault(at=at, mono=mono, code=2, active=active))


def dealing() -> tuple[Table, Clocks]:
    table = Table(betting_control="none")
    table.hello()
    table.commence("AS", ["2C"])
    table.draw("9S")  # the first hand's burn
    return table, Clocks(table)


def incomplete(table: Table) -> list[Any]:
    return [a for a in table.of("alarm") if a.code == "incomplete_pull" and a.active]


def test_wall_stepped_back_an_hour_mid_pull_still_times_out_on_mono() -> None:
    table, clocks = dealing()
    clocks.item("TH", pull_id=50, pos=2, size=2)  # the lower card; the upper is missing
    assert table.engine.next_deadline() == pytest.approx(clocks.mono + PULL_TIMEOUT_S)
    clocks.tick(1.0, wall_step=-HOUR)
    clocks.tick(1.9)
    assert not incomplete(table)  # 2.9 s on the uptime clock
    clocks.tick(0.2)
    assert incomplete(table), "the half-received pull waits an hour of wall time"
    assert table.state["hold"]["reasons"] == ["incomplete_pull"]
    assert table.engine.next_deadline() is None
    # Timestamps stay wall time: the alarm's ts is an hour before the item's drawn_at.
    card = table.of("card")[-1]
    assert card.card == "TH" and incomplete(table)[-1].ts < card.drawn_at


def test_wall_stepped_forward_an_hour_mid_pull_does_not_time_out() -> None:
    table, clocks = dealing()
    clocks.item("TH", pull_id=50, pos=2, size=2)
    clocks.tick(0.5, wall_step=+HOUR)  # the daemon's timer finds nothing due
    clocks.item("2S", pull_id=50, pos=1, size=2, seconds=1.0)  # 1.5 s after the first
    assert not incomplete(table)
    assert [(e.position, e.card) for e in table.of("card")][-2:] == [("P1", "2S"),
                                                                     ("B1", "TH")]
    assert table.engine.next_deadline() is None
    assert table.of("procedure")[-1].action == "reordered"


def test_a_card_jam_pauses_the_timeout_on_the_mono_clock() -> None:
    table, clocks = dealing()
    clocks.item("TH", pull_id=50, pos=2, size=2)
    start = clocks.mono
    clocks.jam(True, seconds=0.5, wall_step=-HOUR)
    assert table.engine.next_deadline() is None  # nothing runs while jammed
    clocks.tick(5.0, wall_step=+2 * HOUR)
    clocks.jam(False, seconds=5.0)  # 10 s of jam, whatever the wall clock did
    assert table.engine.next_deadline() == pytest.approx(start + 10.0 + PULL_TIMEOUT_S)
    clocks.tick(2.4, wall_step=-HOUR)  # 0.5 s before the jam + 2.4 s after it
    assert not incomplete(table)
    clocks.tick(0.2)
    assert incomplete(table)


def test_without_mono_the_wall_clock_measures_as_before() -> None:
    """Inputs from a journal written before `mono` existed."""
    table, _ = dealing()
    table.draw("2S", "TH", order=[1])
    assert table.engine.next_deadline() == pytest.approx(table.t + PULL_TIMEOUT_S)  # wall
    table.tick(2.9)
    assert not incomplete(table)
    table.tick(0.2)
    assert incomplete(table)


def test_a_pull_begun_without_mono_is_carried_over_to_it() -> None:
    """An old journal's half-received pull, then a daemon that supplies `mono`: from the
    first input with `mono` on, the deadline is on the uptime clock."""
    table, _ = dealing()
    table.draw("2S", "TH", order=[1])  # no mono
    begun = table.t
    table.feed(Tick(at=begun + 1.0, mono=500.0))
    assert not incomplete(table)
    assert table.engine.next_deadline() == pytest.approx(502.0)
    table.feed(Tick(at=begun - HOUR, mono=501.9))
    assert not incomplete(table)
    table.feed(Tick(at=begun - HOUR, mono=502.0))
    assert incomplete(table)


def test_the_journal_replays_the_same_events_and_restores_mid_pull() -> None:
    table, clocks = dealing()
    clocks.item("TH", pull_id=50, pos=2, size=2)
    begun = clocks.mono
    clocks.tick(1.0, wall_step=-HOUR)
    snapshot = table.engine.snapshot()
    clocks.tick(2.5, wall_step=+HOUR)
    assert incomplete(table)
    # Replaying every recorded input gives the same events, byte for byte.
    again = Engine(table.engine.config, instance_id="i1")
    replayed = [e for inp in table.inputs for e in again.handle(inp).events]
    assert [e.model_dump_json() for e in replayed] == \
        [e.model_dump_json() for e in table.events]
    # A restored snapshot keeps the pull's uptime reading.
    restored = Engine.restore(table.engine.config, snapshot)
    assert restored.next_deadline() == pytest.approx(begun + PULL_TIMEOUT_S)
    out = restored.handle(Tick(at=clocks.wall - 2 * HOUR, mono=begun + 2.9))
    assert not out.events
    out = restored.handle(Tick(at=clocks.wall - 2 * HOUR, mono=begun + 3.0))
    assert any(e.type == "alarm" and e.code == "incomplete_pull" for e in out.events)


# -- property: stepping the wall clock changes timestamps only ------------------------------

STEPS = st.sampled_from([0.0, 0.0, 0.0, -HOUR, +HOUR, -30.0, +30.0])
ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("pull"), st.sampled_from(["2S", "TH", "5D", "6C", "KH", "3D"]),
                  st.floats(0.01, 5.0), STEPS),
        st.tuples(st.just("half"), st.sampled_from(["4S", "9C"]), st.floats(0.01, 5.0),
                  STEPS),
        st.tuples(st.just("tick"), st.just(""), st.floats(0.01, 5.0), STEPS),
        st.tuples(st.just("jam"), st.sampled_from(["on", "off"]), st.floats(0.01, 5.0),
                  STEPS),
    ),
    max_size=30,
)


def _run(actions: list[tuple[str, str, float, float]], stepped: bool) -> list[dict[str, Any]]:
    table = Table(betting_control="none")
    table.hello()
    table.commence("AS", ["2C"])
    wall, mono = table.t, 100.0
    pull_id = 1000
    inputs: list[Input] = []
    for kind, what, seconds, step in actions:
        mono += seconds
        wall += seconds + (step if stepped else 0.0)
        pull_id += 1
        if kind in ("pull", "half"):
            size = 1 if kind == "pull" else 2
            inputs.append(DeviceItem(at=wall, mono=mono, item="card", pull_id=pull_id,
                                     pull_pos=size, pull_size=size, card=what))
        elif kind == "tick":
            inputs.append(Tick(at=wall, mono=mono))
        else:
            inputs.append(DeviceFault(at=wall, mono=mono, code=2, active=what == "on"))
    for inp in inputs:
        table.feed(inp)
    timeless = []
    for event in table.events:
        body = event.model_dump(exclude={"ts", "drawn_at", "shoe_id"})
        timeless.append(body)
    return timeless


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ACTIONS)
def test_stepping_the_wall_clock_changes_only_timestamps(
        actions: list[tuple[str, str, float, float]]) -> None:
    assert _run(actions, stepped=True) == _run(actions, stepped=False)


# -- the events' timestamps -------------------------------------------------------------------


def _both(at: float) -> tuple[object, object]:
    """iso and datetime's way for `at`: each the string, or the type of the error raised."""
    iso.cache_clear()
    out: list[object] = []
    for way in (iso, iso_by_datetime):
        try:
            out.append(way(at))
        except (ValueError, OverflowError, OSError) as error:
            out.append(type(error))
    return out[0], out[1]


@settings(max_examples=3000, deadline=None)
@given(st.one_of(
    st.floats(min_value=-1e10, max_value=3e11, allow_nan=False),
    st.integers(0, 2**38).map(lambda ms: ms / 1000),  # on a millisecond
    st.integers(0, 2**51).map(lambda us: us / 1e6 + 5e-7),  # halfway to the next microsecond
    st.integers(0, 2**41).map(lambda us: us / 1e6 + 0.0009995),  # a hair below a millisecond
))
def test_iso_is_datetimes_string_for_any_time(at: float) -> None:
    """The events' timestamps are made by arithmetic (cheaper on a card's cold path), and
    are the string datetime makes, rounding included, for any time a clock can give."""
    got, want = _both(at)
    assert got == want, at


@pytest.mark.parametrize("at", [
    0.0, 0.0005, 0.9999995, 0.9999994999, 59.9996, 86_399.9999996, 951_782_400.0,
    1_796_311_485.1783428, 4_102_444_800.0, 253_402_300_798.9999999, 253_402_300_799.0,
    253_402_300_799.9995, 253_402_300_800.0, -0.0005, -86_400.5, 1e20,
    float("inf"), float("-inf"), float("nan"),
])
def test_iso_at_the_edges(at: float) -> None:
    """Day and year boundaries, rounding up into the next second, before 1970 and past
    9999 (datetime's way, or its error), and what is not a time at all."""
    got, want = _both(at)
    assert got == want, at

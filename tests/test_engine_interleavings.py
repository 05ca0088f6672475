"""Random interleavings of device inputs and commands: never raise, stay in the table."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from table import CUT, UNREAD, Table

from shoed.core.cards import ALL_CARDS
from shoed.core.engine import TRANSITIONS, Engine
from shoed.core.events import StateSnapshot
from shoed.core.inputs import DeviceLink, Notice, RootConflict, StorageStatus

STATES = {"no_shoe", "commencement", "between_hands", "dealing", "held", "shoe_ended",
          "shoe_voided"}

card = st.sampled_from([*ALL_CARDS, UNREAD, UNREAD, CUT])
small_int = st.integers(-2, 40)
command = st.one_of(
    st.builds(lambda f: ("new_shoe", {"force": f}), st.booleans()),
    st.builds(lambda h: ("close_betting", {} if h is None else {"hand_no": h}),
              st.none() | small_int),
    st.builds(lambda i, c: ("manual_card", {"card_index": i, "card": c}), small_int,
              st.sampled_from(["AS", "KD", "5H", "ZZ", "10S"])),
    st.just(("resume", {})),
    st.builds(lambda h: ("void_hand", {"hand_no": h, "reason": "r"}), small_int),
    st.just(("void_shoe", {"reason": "r"})),
    st.just(("end_shoe", {})),
    st.builds(lambda i, p: ("realign", {"card_index": i, "position": p}), small_int,
              st.sampled_from(["burn", "P1"])),
    st.just(("cut_card", {})),
    st.builds(lambda h: ("report_misorder", {"hand_no": h, "detail": "d"}), small_int),
    st.builds(lambda n: ("recall", {"hands": n}), st.integers(1, 20)),
)
known_card = st.sampled_from(ALL_CARDS)
single_draw = st.tuples(st.just("draw"), st.lists(known_card, min_size=1, max_size=1),
                        st.just([0]))
action = st.one_of(
    # Draws dominate, so that hands complete, results fix and the later rules are reached.
    single_draw, single_draw, single_draw, single_draw, single_draw, single_draw,
    st.tuples(st.just("draw"), st.lists(card, min_size=1, max_size=3),
              st.permutations([0, 1, 2])),
    st.tuples(st.just("draw"), st.lists(card, min_size=1, max_size=1), st.just([0])),
    st.tuples(st.just("cmd"), command),
    st.tuples(st.just("load")),
    st.tuples(st.just("hello"), st.integers(1, 3)),
    st.tuples(st.just("fault"), st.integers(1, 6), st.booleans()),
    st.tuples(st.just("gap")),
    st.tuples(st.just("tick"), st.floats(0, 5)),
    st.tuples(st.just("link"), st.booleans()),
    st.tuples(st.just("storage"), st.booleans()),
    st.tuples(st.just("notice")),
    st.tuples(st.just("root_conflict"), st.booleans()),
    st.tuples(st.just("partial"), st.lists(card, min_size=2, max_size=3)),
)


def run(table: Table, act: tuple[Any, ...]) -> None:
    kind = act[0]
    if kind == "draw":
        cards = act[1]
        order = [i for i in act[2] if i < len(cards)]
        table.draw(*cards, order=order)
    elif kind == "partial":
        table.draw(*act[1], order=[0])
    elif kind == "cmd":
        name, fields = act[1]
        table.cmd(name, **fields)
    elif kind == "load":
        table.load()
    elif kind == "hello":
        table.hello(boot_id=act[1])
    elif kind == "fault":
        table.fault(act[1], act[2])
    elif kind == "gap":
        table.gap(1)
    elif kind == "tick":
        table.tick(act[1])
    elif kind == "link":
        table.feed(DeviceLink(at=table.now(), connected=act[1]))
    elif kind == "storage":
        table.feed(StorageStatus(at=table.now(), ok=act[1], message="disk"))
    elif kind == "notice":
        table.feed(Notice(at=table.now(), code="bad_payload", message="m"))
    elif kind == "root_conflict":
        table.feed(RootConflict(at=table.now(), active=act[1], other_run_id="r", message="m"))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["commands", "none"]),
       st.sampled_from(["burn_then_player", "burn_then_void"]),
       st.booleans(), st.lists(action, max_size=80))
def test_random_interleavings(mode: str, profile: str, commenced: bool,
                              actions: list[tuple[Any, ...]]) -> None:
    table = Table(betting_control=mode, unnecessary_cards=profile, decks=1)
    table.hello()
    if commenced:
        table.commence("AS", ["2C"])
    previous = table.state["shoe_state"]
    for act in actions:
        run(table, act)
        state = table.state
        StateSnapshot.model_validate(state)  # the published schema and the engine agree
        assert state["shoe_state"] in STATES
        assert state["shoe_state"] in TRANSITIONS[previous], (previous, act, state["shoe_state"])
        previous = state["shoe_state"]
        assert not [e for e in table.of("alarm") if e.code == "engine_error"], act
    seqs = [e.seq for e in table.events]
    assert seqs == list(range(1, len(seqs) + 1))
    results = table.of("hand_result")
    assert len({(r.shoe_id, r.hand_no) for r in results}) == len(results)
    restored = Engine.restore(table.engine.config, table.engine.snapshot())
    assert restored.public_state() == table.state

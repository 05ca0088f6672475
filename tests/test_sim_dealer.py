"""The simulated shoe's dealer deals from its own model of the procedure, not the host's
engine: here the two independent readings of dealing-rules.md are compared on random
shoes (multi-card pulls, unnecessary cards, the cut card anywhere), and the dealer's own
drawing table is checked against the rules' worked cases."""

from __future__ import annotations

import ast
import pathlib

from hypothesis import given, settings
from hypothesis import strategies as st

from shoed.core.cards import ALL_CARDS
from shoed.core.commands import CloseBetting
from shoed.core.config import EngineConfig
from shoed.core.engine import Engine
from shoed.core.errors import RulesError
from shoed.core.game import next_needed
from shoed.core.inputs import CommandInput, DeviceItem, DeviceShoeLoaded
from shoed.core.integrity import DETECTORS, IntegrityThresholds
from shoed.sim.shoe import CUT, DealerModel, hand_complete, points

SIMULATOR = pathlib.Path(__file__).resolve().parent.parent / "shoed" / "sim" / "shoe.py"


def test_the_simulator_does_not_import_the_engine() -> None:
    tree = ast.parse(SIMULATOR.read_text())
    imported = {node.module for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module}
    assert not [m for m in imported if m.startswith("core.") and m != "core.cards"], imported


def engine_phase(engine: Engine) -> str:
    state = engine.public_state()["shoe_state"]
    return "ended" if state in ("shoe_ended", "shoe_voided") else state


@settings(max_examples=200, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(1, 2), st.integers(0, 90))
def test_dealer_model_agrees_with_the_engine(rng, decks: int, cut_from_end: int) -> None:
    shoe = list(ALL_CARDS) * decks
    rng.shuffle(shoe)
    shoe.insert(max(1, len(shoe) - cut_from_end), CUT)
    # The shoe-order watch off: random packs here may hold on a short run (4S 5S 6S...),
    # which is the watch's business, not the dealing procedure's that is compared.
    watch_off = IntegrityThresholds(**dict.fromkeys(DETECTORS, 0))
    engine = Engine(EngineConfig(table_id="x", decks=decks, betting_control="none",
                                 integrity=watch_off))
    engine.handle(DeviceShoeLoaded(at=0.0))
    dealer = DealerModel()
    pull_id = 0
    while shoe and dealer.phase != "ended":
        count = rng.choice([1, 1, 1, 2, 3])
        cards, shoe[:count] = shoe[:count], []
        pull_id += 1
        for pos, card in enumerate(cards, start=1):
            item = (DeviceItem(at=0.0, item="cut", pull_id=pull_id, pull_pos=pos,
                               pull_size=len(cards)) if card == CUT else
                    DeviceItem(at=0.0, item="card", card=card, pull_id=pull_id, pull_pos=pos,
                               pull_size=len(cards)))
            engine.handle(item)
        was_dealing = dealer.phase == "dealing"
        completes = dealer.completes_hand(cards)
        done_before = dealer.hands_done
        for card in cards:
            dealer.take(card)
        assert dealer.phase == engine_phase(engine), (cards, dealer)
        if was_dealing:
            assert completes == (dealer.hands_done > done_before)


@given(st.lists(st.sampled_from(ALL_CARDS), min_size=4, max_size=6))
def test_own_drawing_table_agrees_with_the_rules(hand: list[str]) -> None:
    """`hand_complete` (the dealer's table) against the host's `next_needed` on every
    prefix of a hand, where the host's rules say the prefix is a legal hand so far."""
    for size in range(4, len(hand) + 1):
        try:
            needed = next_needed(hand[:size])
        except RulesError:
            return  # more cards than a hand takes
        assert hand_complete(hand[:size]) == (needed is None), hand[:size]


def test_worked_cases() -> None:
    assert [points(c) for c in ("AS", "9H", "TD", "KC")] == [1, 9, 0, 0]
    assert hand_complete(["9S", "2H", "TD", "3C"])  # player natural 9
    assert not hand_complete(["2S", "2H", "3D", "3C"])  # player 5 draws
    assert hand_complete(["2S", "2H", "3D", "3C", "8D"])  # banker 5 stands on P3 8
    assert not hand_complete(["2S", "2H", "3D", "3C", "5D"])  # banker 5 draws on P3 5
    assert hand_complete(["3S", "6H", "4D", "TC"])  # player 7, banker 6: both stand
    assert not hand_complete(["3S", "2H", "4D", "TC"])  # player 7 stands, banker 2 draws
    model = DealerModel()
    for card in ["KS"] + ["2C"] * 10:  # commencement: a king burns ten more
        assert model.phase == "commencement"
        model.take(card)
    assert model.phase == "between_hands"
    model.take(CUT)
    assert model.phase == "ended"


def _run(shoe, host, until: float, step: float = 0.01, ack: bool = True) -> list:
    from firmware_protocol import MessageReceived

    got = []
    t = shoe.now
    while t < until:
        t += step
        shoe.poll(t)
        data = shoe.data_to_send()
        if ack:
            host.receive_data(data, t)
            while (event := host.next_event()) is not None:
                if isinstance(event, MessageReceived):
                    got.append(event)
                    host.ack(event.seq)
            shoe.receive_data(host.data_to_send(), t)
    return got


def test_a_gated_shoe_stops_the_dealer_when_its_buffer_fills() -> None:
    """Nothing ACKed for 3 s at 50 pulls a second: the shoe locks its own gate with room
    for FAULT 6 (no seq spent on a dropped card); once the host takes frames the fault
    clears and dealing goes on, with no gap."""
    from firmware_protocol import Fault, Link, Role
    from firmware_protocol.link import DEVICE_BUFFER
    from shoed.sim.shoe import Script, SimulatedShoe

    shoe = SimulatedShoe(decks=8, seed=3, script=Script(pace_s=0.02), now=0.0)
    host = Link(Role.HOST, 0.0)
    _run(shoe, host, 3.0, ack=False)
    assert shoe.buffer_full
    assert shoe.link.pending_count <= DEVICE_BUFFER
    stopped_at = shoe.cards_dealt
    _run(shoe, host, 3.5, ack=False)
    assert shoe.cards_dealt == stopped_at  # the dealer waits at the locked gate
    host = Link(Role.HOST, 3.5)
    got = _run(shoe, host, 12.0)
    assert not shoe.buffer_full and shoe.cards_dealt > stopped_at
    assert all(e.gap == 0 for e in got)
    faults = [(e.message.code, e.message.active) for e in got if isinstance(e.message, Fault)]
    assert faults[:2] == [(6, 1), (6, 0)]


def test_a_shoe_without_a_gate_drops_what_does_not_fit() -> None:
    from firmware_protocol import Link, Role
    from firmware_protocol.messages import Capability
    from shoed.sim.shoe import ALL_CAPS, Script, SimulatedShoe

    shoe = SimulatedShoe(decks=8, seed=3, script=Script(pace_s=0.02), now=0.0,
                         capabilities=ALL_CAPS & ~Capability.EXIT_GATE)
    _run(shoe, Link(Role.HOST, 0.0), 3.0, ack=False)
    assert not shoe.buffer_full
    assert shoe.link.next_seq > shoe.link.pending_count  # seqs spent on dropped items


def test_in_commands_mode_the_dealer_waits_for_betting_to_open_and_close() -> None:
    """After commencement (and after every hand) the dealer draws again only once the
    host locked the gate (betting open) and opened it (betting closed); a host that never
    locks it is dealt to anyway, BETTING_LOCK_WAIT_S later."""
    from firmware_protocol import Link, Role, SetGate
    from shoed.sim.shoe import BETTING_LOCK_WAIT_S, Script, SimulatedShoe

    shoe = SimulatedShoe(decks=8, seed=3, script=Script(pace_s=0.02, wait_for_betting=True),
                         now=0.0)
    host = Link(Role.HOST, 0.0)
    t = 0.0
    while shoe._dealer is None or shoe._dealer.phase == "commencement":
        t += 0.02
        _run(shoe, host, t)
    assert shoe._dealer.phase == "between_hands"
    waiting = shoe.cards_dealt
    _run(shoe, host, t + 1.0)
    assert shoe.cards_dealt == waiting  # no lock yet: the dealer waits for betting
    host.send(SetGate(1), t + 1.0)
    _run(shoe, host, t + 1.5)
    assert shoe.gate_locked and shoe.cards_dealt == waiting  # betting open
    host.send(SetGate(0), t + 1.5)
    _run(shoe, host, t + 1.6)
    assert shoe.cards_dealt > waiting  # betting closed: the hand is dealt
    hands = shoe._dealer.hands_done
    t = t + 1.6
    while shoe._dealer.hands_done == hands:
        t += 0.02
        _run(shoe, host, t)
    done_at, waiting = t, shoe.cards_dealt
    _run(shoe, host, done_at + BETTING_LOCK_WAIT_S - 0.2)
    assert shoe.cards_dealt == waiting
    _run(shoe, host, done_at + BETTING_LOCK_WAIT_S + 0.2)
    assert shoe.cards_dealt > waiting  # the host never locked the gate: dealt to anyway


def test_without_commands_mode_the_dealer_deals_on_after_a_hand() -> None:
    from firmware_protocol import Link, Role
    from shoed.sim.shoe import Script, SimulatedShoe

    shoe = SimulatedShoe(decks=8, seed=3, script=Script(pace_s=0.02), now=0.0)
    _run(shoe, Link(Role.HOST, 0.0), 2.0)
    assert shoe._dealer is not None and shoe._dealer.hands_done >= 3


def test_the_dealer_waits_for_betting_also_when_a_pull_ran_over_into_the_next_burn() -> None:
    """Every hand's last card drawn with one too many (it becomes the next burn): the
    dealer still waits for betting before that hand's P1, once per hand."""
    from firmware_protocol import Link, Role
    from shoed.sim.shoe import BETTING_LOCK_WAIT_S, Script, SimulatedShoe

    script = Script(pace_s=0.02, wait_for_betting=True, unnecessary_rate=1.0)
    shoe = SimulatedShoe(decks=8, seed=3, script=script, now=0.0)
    _run(shoe, Link(Role.HOST, 0.0), 20.0)  # a host that never locks the gate
    assert shoe._dealer is not None
    hands = shoe._dealer.hands_done
    assert 3 <= hands <= 20.0 / BETTING_LOCK_WAIT_S + 1, hands


def test_in_commands_mode_a_cut_card_after_close_betting_makes_that_hand_the_last() -> None:
    """Rule 5: in commands mode a hand is in progress from close_betting on, before its
    burn; rule 9: a cut card during a hand makes it the last. The dealer's model and the
    engine agree (the model once ended the shoe there and loaded the next one)."""
    watch_off = IntegrityThresholds(**dict.fromkeys(DETECTORS, 0))
    engine = Engine(EngineConfig(table_id="x", betting_control="commands", integrity=watch_off))
    engine.handle(DeviceShoeLoaded(at=0.0))
    dealer = DealerModel()
    cards = ["AS", "2C", CUT, "9S", "2S", "TH", "5D", "6C"]  # commence; cut; burn, a hand
    for pull_id, card in enumerate(cards, start=1):
        if card == CUT:
            engine.handle(CommandInput(at=0.0, command=CloseBetting(
                request_id="c1", operator="gs", command="close_betting")))
            dealer.betting_closed()
            item = DeviceItem(at=0.0, item="cut", pull_id=pull_id, pull_pos=1, pull_size=1)
        else:
            item = DeviceItem(at=0.0, item="card", card=card, pull_id=pull_id, pull_pos=1,
                              pull_size=1)
        engine.handle(item)
        dealer.take(card)
        if card == CUT:
            assert engine.public_state()["last_hand"] is True
            assert dealer.last_hand and dealer.phase == "closed"
    assert dealer.phase == "ended" == engine_phase(engine)
    assert dealer.hands_done == 1

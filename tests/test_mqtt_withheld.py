"""A broker that takes a retained snapshot and never acknowledges it, while the daemon is
idle: the live publisher does not await a snapshot's PUBACK (docs/performance.md, round
two), so the idle publisher must still notice within IDLE_WAKE_S + publish_timeout_s,
drop the connection, reconnect and lose nothing.

Between the daemon and a real Mosquitto sits a relay that parses MQTT packets and, once
armed, drops the broker's PUBACK to the next QoS 1 PUBLISH on one topic."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
import pathlib
import time
from collections.abc import Callable

import pytest
from kit import stop_tasks
from proc import DaemonProcess
from rig import Collector, wait_for
from test_supervision import _collector, daemon

from shoed.mqtt.publisher import IDLE_WAKE_S
from shoed.sim.broker import PrivateMosquitto

pytestmark = [pytest.mark.broker, pytest.mark.timeout(120)]
CONNECT, PUBLISH, PUBACK = 1, 3, 4


async def read_packet(stream: asyncio.StreamReader) -> tuple[bytes, int]:
    """One MQTT control packet, and where its variable header starts."""
    head = await stream.readexactly(1)
    length, shift, size = 0, 0, b""
    while True:
        byte = await stream.readexactly(1)
        size += byte
        length |= (byte[0] & 0x7F) << shift
        shift += 7
        if not byte[0] & 0x80:
            break
    body = await stream.readexactly(length)
    return head + size + body, 1 + len(size)


class PubackThief:
    """Between the daemon and the broker: drops the PUBACK of the next QoS 1 PUBLISH on
    the `armed` topic; holds every PUBACK for `hold_s` before passing it on; writes down,
    in the order they pass, each QoS 1 PUBLISH (its topic and payload) and each PUBACK
    passed on to the daemon (`wire`)."""

    def __init__(self, broker_port: int, hold_s: float = 0.0) -> None:
        self.broker_port = broker_port
        self.port = 0
        self.armed: str | None = None
        self.dropped = 0
        self.stolen_at: float | None = None  # wall time the withheld PUBLISH passed
        self.hold_s = hold_s
        self.wire: list[tuple[str, int, str, bytes]] = []  # (kind, mid, topic, payload)
        self.passed_at: list[float] = []  # the wall time each entry of `wire` passed
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()

    def arm(self, topic: str) -> None:
        self.armed = topic

    def _passed(self, kind: str, mid: int, topic: str, payload: bytes) -> float:
        """Writes down a packet passing now (`wire` and `passed_at` stay in step)."""
        now = time.time()
        self.wire.append((kind, mid, topic, payload))
        self.passed_at.append(now)
        return now

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.broker_port)
        stolen: set[int] = set()
        v5 = False

        def to_broker(packet: bytes, start: int) -> bool:
            nonlocal v5
            if packet[0] >> 4 == CONNECT:
                v5 = packet[start + 6] == 5  # after the protocol's name: its level
            if packet[0] >> 4 == PUBLISH and (packet[0] >> 1) & 3:
                size = int.from_bytes(packet[start:start + 2], "big")
                topic = packet[start + 2:start + 2 + size].decode()
                mid = int.from_bytes(packet[start + 2 + size:start + 4 + size], "big")
                at = start + 4 + size
                if v5:  # the properties: their length (a varint), then them
                    length, shift = 0, 0
                    while True:
                        length |= (packet[at] & 0x7F) << shift
                        shift += 7
                        at += 1
                        if not packet[at - 1] & 0x80:
                            break
                    at += length
                passed = self._passed("publish", mid, topic, packet[at:])
                if topic == self.armed:
                    stolen.add(mid)
                    self.armed, self.stolen_at = None, passed
            return True

        def to_daemon(packet: bytes, start: int) -> bool:
            if packet[0] >> 4 == PUBACK:
                mid = int.from_bytes(packet[start:start + 2], "big")
                if mid in stolen:
                    stolen.discard(mid)
                    self.dropped += 1
                    return False
                self._passed("puback", mid, "", b"")
            return True

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter,
                       keep: Callable[[bytes, int], bool], hold_s: float = 0.0) -> None:
            try:
                while True:
                    packet, start = await read_packet(source)
                    if hold_s and packet[0] >> 4 == PUBACK:
                        await asyncio.sleep(hold_s)
                    if keep(packet, start):
                        sink.write(packet)
                        await sink.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                sink.close()

        await asyncio.gather(pump(reader, up_writer, to_broker),
                             pump(up_reader, writer, to_daemon, self.hold_s))


def _epoch(iso: object) -> float:
    """An ISO 8601 time the daemon wrote (a log line's, an event's), in seconds."""
    return dt.datetime.fromisoformat(str(iso).replace("Z", "+00:00")).timestamp()


async def _noticed_and_back(d: DaemonProcess, thief: PubackThief, timeout_s: float,
                            notice_within_s: float, connects: int) -> None:
    """The daemon `d` counts the connection broken, naming publish_timeout_s, within
    `notice_within_s` (and a second's slack) of the PUBLISH whose PUBACK `thief` withheld,
    and connects again (more than `connects` connections logged)."""
    await wait_for(lambda: d.logged("mqtt_disconnected"), notice_within_s + 5,
                   "the daemon to notice")
    dropped = d.logged("mqtt_disconnected")[0]
    assert f"no PUBACK within {timeout_s:g} s" in str(dropped["error"])
    assert thief.stolen_at is not None
    noticed = _epoch(dropped["timestamp"]) - thief.stolen_at
    assert noticed <= notice_within_s + 1.0, noticed
    await wait_for(lambda: len(d.logged("mqtt_connected")) > connects, 15,
                   "the daemon connected again")


async def _withhold_after_idle(tmp_path: pathlib.Path, broker: PrivateMosquitto,
                               topic: str, notice_within_s: float, timeout_s: float
                               ) -> tuple[Collector, int]:
    """A daemon deals a shoe and falls idle; then a new_shoe, and the broker takes the
    first message of that burst on `topic` and never PUBACKs it. Checks that the daemon
    counts the connection broken within `notice_within_s` of the theft, connects again
    and that every event came, in order, none missing. Returns the collector and the
    seq of the last event before the new shoe."""
    thief = PubackThief(broker.port)
    await thief.start()
    collector, collecting = await _collector(broker)
    try:
        with daemon(tmp_path, f"mqtt://127.0.0.1:{thief.port}",
                    mqtt={"publish_timeout_s": timeout_s}) as d:
            d.start_shoe(seed=5, pace=0.02)
            d.start()
            await wait_for(lambda: collector.of("shoe_ended"), 90, "the shoe dealt")
            await asyncio.sleep(1.0)  # idle: nothing awaits a PUBACK
            connects = len(d.logged("mqtt_connected"))
            assert not d.logged("mqtt_disconnected")
            before = max(e["seq"] for e in collector.raw_events)
            thief.arm(topic)
            answer = await collector.send({"request_id": f"ns-{topic}",
                                           "command": "new_shoe", "operator": "pit"})
            assert answer["ok"], answer
            await wait_for(lambda: thief.dropped == 1, 10, f"the PUBACK on {topic} withheld")
            await _noticed_and_back(d, thief, timeout_s, notice_within_s, connects)
            # Nothing lost or reordered: every event, the new shoe's included, once.
            started = collector.of("shoe_started")[-1]["seq"]
            await wait_for(lambda: collector.retained.get("state", {}).get("seq", 0)
                           >= started, 10, "the state of the new shoe")
            last = collector.retained["state"]["seq"]
            await wait_for(lambda: len(collector.events) >= last, 10, "every event")
            seqs = [e["seq"] for e in collector.events]
            assert seqs == list(range(1, last + 1)), (seqs[-5:], last)
            assert d.stop() == 0
    finally:
        await stop_tasks(collecting)
        await thief.close()
    return collector, before


def test_a_snapshot_puback_withheld_while_idle_is_noticed_and_nothing_is_lost(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    """A new shoe's events, then the state, then the roads (the last send of the
    burst): the broker takes the roads and never says so; noticed within IDLE_WAKE_S
    and publish_timeout_s."""
    timeout_s = 1.0
    collector, _ = asyncio.run(_withhold_after_idle(
        tmp_path, broker, "shoed/T9/roads", IDLE_WAKE_S + timeout_s, timeout_s))
    assert collector.retained["roads"]["seq"] >= collector.of("shoe_ended")[-1]["seq"]


def test_an_event_sent_at_once_whose_puback_is_withheld_is_sent_again_and_none_lost(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    """The idle publisher's first event goes out from where it was applied, and the
    publisher waits for its PUBACK only afterwards (Publisher._outbox_ready): withheld,
    the connection is still counted as broken publish_timeout_s after the send (not
    IDLE_WAKE_S later), the event is sent again on the next connection with its
    event_id, and nothing is lost or reordered."""
    timeout_s = 1.0
    collector, before = asyncio.run(_withhold_after_idle(
        tmp_path, broker, "shoed/T9/events", timeout_s, timeout_s))  # the first event
    # the withheld one came twice (at least once), with one event_id
    again = [e for e in collector.raw_events if e["seq"] == before + 1]
    assert len(again) == 2 and len({e["event_id"] for e in again}) == 1, again


def _published(wire: list[tuple[str, int, str, bytes]], leaf: str) -> list[tuple[int, dict]]:
    """(index on the wire, body) of each QoS 1 PUBLISH on shoed/T9/`leaf`."""
    return [(i, json.loads(body)) for i, (kind, _, topic, body) in enumerate(wire)
            if kind == "publish" and topic == f"shoed/T9/{leaf}"]


def test_each_cards_state_follows_its_events_puback_on_the_wire(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    """While cards are dealt, each card's `state` follows the PUBACK of its events
    (mqtt-api.md: never before the events it reflects; decisions.md 147): a relay that
    holds every PUBACK 20 ms, a card every 0.2 s (+-30 %) from a one-deck shoe, sees, for
    every `state`, the PUBACK of every event up to its seq pass before the `state` arrives
    (a daemon that sent it on the event's PUBLISH alone would be caught by the hold), and
    a `state` after every card (none left out or merged) once the start's backlog is out,
    unless the next card was already read when the PUBACK before it passed (a backlog: a
    shoe's burst, a slow PUBACK, the whole machine stalled; such cards share one `state`,
    as the start's do: decisions.md 154). One more pair a shoe is let pass: a stall of the
    daemon alone from that PUBACK until after the next card came in gives the same wire
    as a `state` left out (the card's `drawn_at` is when the stall ends).
    """

    async def scenario() -> PubackThief:
        thief = PubackThief(broker.port, hold_s=0.02)
        await thief.start()
        collector, collecting = await _collector(broker)
        try:
            with daemon(tmp_path, f"mqtt://127.0.0.1:{thief.port}") as d:
                d.start_shoe(seed=5, pace=0.2)
                d.start()
                await wait_for(lambda: collector.of("shoe_ended"), 90, "the shoe dealt")
                last = collector.of("shoe_ended")[-1]["seq"]
                await wait_for(lambda: collector.retained.get("state", {}).get("seq", 0)
                               >= last, 10, "the last state")
                assert d.stop() == 0
        finally:
            await stop_tasks(collecting)
            await thief.close()
        return thief

    thief = asyncio.run(scenario())
    wire = thief.wire
    acked = {mid: i for i, (kind, mid, _, _) in enumerate(wire) if kind == "puback"}
    events = _published(wire, "events")
    states = _published(wire, "state")
    assert len([1 for _, body in events if body["type"] == "card"]) >= 30 and states
    mid_of = {wire[i][1]: body["seq"] for i, body in events}
    sent = set(mid_of.values())
    puback_of_seq = {seq: acked[mid] for mid, seq in mid_of.items() if mid in acked}
    for at, state in states:
        for seq in range(1, state["seq"] + 1):
            if seq in sent:  # sent on this connection
                assert puback_of_seq.get(seq, len(wire)) < at, (
                    f"state seq {state['seq']} at {at} before the PUBACK of event {seq}")
    state_seqs = sorted(body["seq"] for _, body in states)
    # a card every 0.14-0.26 s leaves time for a hand's end (two events, `state`,
    # `roads`: four holds); the backlog of the start (cards read while connecting) goes
    # as one batch with one `state` (mqtt-api.md section 1: never before its events)
    drawn = {body["seq"]: _epoch(body["drawn_at"]) for _, body in events
             if body["type"] == "card"}
    cards = sorted(seq for seq in drawn if seq > state_seqs[0])
    assert len(cards) >= 25, cards
    unexplained = []
    for card, after in itertools.pairwise(cards):
        if not any(card <= s < after for s in state_seqs):
            # the PUBACK of the last event before `after` (a hand's end: its
            # hand_result's, ~40-60 ms after the card's draw): then the `state` was due
            acked_at = puback_of_seq.get(after - 1)
            if acked_at is None:
                unexplained.append((card, after, None))
                continue
            due = thief.passed_at[acked_at]
            # the next paced card comes >= 80 ms after it; one already read (a backlog)
            # before it, or a loop turn's slack after it
            if drawn[after] - due >= 0.03:
                unexplained.append((card, after, round(drawn[after] - due, 3)))
    assert len(unexplained) <= 1, (
        "no state between these cards (card, next card, s the next was drawn after the "
        f"state was due): {unexplained}", state_seqs[:20])


def test_a_cards_state_whose_puback_is_withheld_mid_shoe_is_noticed_and_none_lost(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    """The broker takes a card's `state` (sent after its event's PUBACK and not awaited
    by the publisher, docs/performance.md, round two) and never says so, ten cards into
    a one-deck shoe, while cards keep coming: the next card's event waits for that
    PUBACK, the connection is counted as broken publish_timeout_s later, and after the
    reconnect every event arrives, in order, none missing."""
    timeout_s = 1.0

    async def scenario() -> None:
        thief = PubackThief(broker.port)
        await thief.start()
        collector, collecting = await _collector(broker)
        try:
            with daemon(tmp_path, f"mqtt://127.0.0.1:{thief.port}",
                        mqtt={"publish_timeout_s": timeout_s}) as d:
                d.start_shoe(seed=5, pace=0.05)
                d.start()
                await wait_for(lambda: len(collector.of("card")) >= 10, 60, "10 cards")
                connects = len(d.logged("mqtt_connected"))
                thief.arm("shoed/T9/state")
                await wait_for(lambda: thief.dropped == 1, 10, "a state's PUBACK withheld")
                await _noticed_and_back(d, thief, timeout_s, timeout_s, connects)
                await wait_for(lambda: collector.of("shoe_ended"), 90, "the shoe dealt")
                last = collector.of("shoe_ended")[-1]["seq"]
                await wait_for(lambda: collector.retained.get("state", {}).get("seq", 0)
                               >= last, 10, "the last state")
                await wait_for(lambda: len(collector.events) >= last, 10, "every event")
                assert d.stop() == 0
            # every event once, in order, the shoe's end and what follows it included
            seqs = [e["seq"] for e in collector.events]
            assert seqs == list(range(1, len(seqs) + 1)) and seqs[-1] >= last, seqs[-5:]
        finally:
            await stop_tasks(collecting)
            await thief.close()

    asyncio.run(scenario())

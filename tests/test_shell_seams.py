"""The shell's rooms through their public seams: the device session, the recorder and
the outbox over the loopback transport with the simulated shoe at the other end, over
several kinds of line (as bellows' test_ash does for its framing); the command desk;
the MQTT service against a real Mosquitto."""

from __future__ import annotations

import asyncio
import json
import pathlib
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiomqtt
import pytest
from rig import Collector, make_settings, wait_for
from test_daemon_e2e import check_shoe

from firmware_protocol import Ack, Nak, NakReason, RawFrame, StreamDecoder, build_frame
from firmware_protocol.messages import decode_message
from shoed.daemon import Daemon
from shoed.desk import Incoming
from shoed.device.loopback import LoopbackTransport
from shoed.sim.broker import PrivateMosquitto
from shoed.sim.shoe import Script, SimulatedShoe
from shoed.store.journal import Journal
from shoed.store.statedir import StorageError

LINES = ["whole", "one_byte_at_a_time", "lossy", "delayed"]


class Line:
    """The wire between the simulated shoe and the daemon's loopback transport."""

    def __init__(self, variant: str, transport: LoopbackTransport) -> None:
        self.variant = variant
        self.transport = transport
        self.rng = random.Random(3)
        self.loop = asyncio.get_running_loop()

    def to_host(self, data: bytes) -> None:
        feed = self.transport.feed
        if self.variant == "one_byte_at_a_time":
            for i in range(len(data)):
                feed(data[i:i + 1])
        elif self.variant == "delayed":
            self.loop.call_later(0.003, feed, data)
        elif self.variant == "lossy" and self.rng.random() < 0.1:
            i = self.rng.randrange(len(data))  # a byte lost on the way
            feed(data[:i] + data[i + 1:])
        else:
            feed(data)


@asynccontextmanager
async def table(tmp_path: pathlib.Path, variant: str, url: str = "mqtt://127.0.0.1:1",
                seed: int = 4, with_mqtt: bool = False, pace_s: float = 0.002,
                **sections: Any
                ) -> AsyncIterator[tuple[Daemon, SimulatedShoe, Callable[..., Any]]]:
    """The daemon's rooms built (not run), the device session serving a loopback line."""
    transport = LoopbackTransport()
    settings = make_settings(tmp_path / "state", url, **sections)
    daemon = Daemon(settings, transport_factory=lambda: transport)
    daemon.build()
    loop = asyncio.get_running_loop()
    shoe = SimulatedShoe(decks=1, seed=seed, script=Script(pace_s=pace_s, shoes=1),
                         now=loop.time())
    line = Line(variant, transport)
    transport.on_write = lambda data: shoe.receive_data(data, loop.time())
    tasks = [asyncio.create_task(daemon.session.run())]
    if with_mqtt:
        tasks.append(asyncio.create_task(daemon.mqtt.run()))
    daemon.session.arm_timer()

    async def deal(cards: int, at_least_s: float = 0.0) -> None:
        target = shoe.cards_dealt + cards
        until = loop.time() + at_least_s
        while (shoe.cards_dealt < target and not shoe.finished) or loop.time() < until:
            shoe.poll(loop.time())
            if data := shoe.data_to_send():
                line.to_host(data)
            await asyncio.sleep(0.001)
        while shoe.link.pending_count:  # until the host ACKed everything
            shoe.poll(loop.time())
            if data := shoe.data_to_send():
                line.to_host(data)
            await asyncio.sleep(0.002)

    try:
        yield daemon, shoe, deal
    finally:
        daemon.mqtt.stopping = True
        daemon.supervisor.stopping = True
        daemon.session.stop_timer()
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        daemon.recorder.close()


@pytest.mark.parametrize("variant", LINES)
def test_session_records_before_ack_and_the_outbox_has_every_card_in_order(
        tmp_path: pathlib.Path, variant: str) -> None:
    async def main() -> None:
        async with table(tmp_path, variant) as (daemon, shoe, deal):
            await deal(25)
            outbox = daemon.outbox
            assert outbox.depth() > 0  # nothing published: no broker
            rows = outbox.take(10_000)
            events = [json.loads(body) for _, body in rows]
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
            check_shoe(events, shoe.dealt)
            cards = [e for e in events if e["type"] == "card" and e["card_index"]]
            assert len(cards) == shoe.cards_dealt  # every ACKed card recorded and applied
            assert daemon.status.device_connected
            if variant == "lossy":
                assert daemon.session.link.discards, "the lost bytes were seen"
            # The broker's PUBACKs: the outbox forgets exactly what was acknowledged.
            outbox.acked(rows[9][0])
            assert outbox.depth() == len(rows) - 10
            assert outbox.take(10_000)[0][0] == 11
            outbox.acked(rows[-1][0])
            assert outbox.depth() == 0
    asyncio.run(main())


def test_a_frame_whose_record_failed_is_never_acked_and_is_taken_once_storage_is_back(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ACK only after the record is durable (firmware-protocol.md section 3): while the
    journal's record cannot be written, the shoe's frame stays unacknowledged (it sends it
    again), and once the journal is back the frame is recorded, ACKed and applied, once
    (outside review of issue 14: no seam test failed with the ACK moved before the
    record)."""
    async def main() -> None:
        async with table(tmp_path, "whole", pace_s=0.05) as (daemon, shoe, deal):
            await deal(3)
            loop = asyncio.get_running_loop()
            real = Journal.record

            def failing(self: Journal, *args: Any, **kwargs: Any) -> Any:
                raise StorageError("injected: the disk is gone")

            monkeypatch.setattr(Journal, "record", failing)
            dealt = shoe.cards_dealt
            until = loop.time() + 10.0
            failed_at = None
            while loop.time() < until and (failed_at is None or loop.time() < failed_at):
                shoe.poll(loop.time())
                if data := shoe.data_to_send():
                    daemon.session.transport.feed(data)
                if failed_at is None and not daemon.status.storage_ok:
                    failed_at = loop.time() + 0.3  # the shoe sends it again meanwhile
                await asyncio.sleep(0.002)
            assert not daemon.status.storage_ok
            assert shoe.link.pending_count >= 1, "a frame whose record failed was ACKed"
            applied = [json.loads(body) for _, body in daemon.outbox.take(10_000)]
            assert sum(e["type"] == "card" for e in applied) == dealt  # none since
            monkeypatch.setattr(Journal, "record", real)
            await deal(5)
            assert daemon.status.storage_ok and shoe.link.pending_count == 0
            events = [json.loads(body) for _, body in daemon.outbox.take(10_000)]
            cards = [e["card_index"] for e in events if e["type"] == "card"]
            assert cards == list(range(1, shoe.cards_dealt + 1))  # each once, in order
            assert shoe.cards_dealt >= dealt + 5
    asyncio.run(main())


@pytest.mark.parametrize("variant", ["whole", "one_byte_at_a_time"])
def test_recorded_frames_survive_a_restart_with_the_same_events(tmp_path: pathlib.Path,
                                                                variant: str) -> None:
    async def first() -> list[tuple[int, str]]:
        async with table(tmp_path, variant) as (daemon, _, deal):
            await deal(15)
            return daemon.outbox.take(10_000)

    async def second() -> list[tuple[int, str]]:
        daemon = Daemon(make_settings(tmp_path / "state", "mqtt://127.0.0.1:1"))
        daemon.build()
        try:
            return daemon.outbox.take(10_000)
        finally:
            daemon.recorder.close()

    before = asyncio.run(first())
    assert asyncio.run(second()) == before


def test_lost_line_raises_and_clears_device_lost(tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        async with table(tmp_path, "whole") as (daemon, _, deal):
            await deal(5)
            transport = daemon.session.transport
            assert isinstance(transport, LoopbackTransport)
            transport.lose()
            await wait_for(lambda: not daemon.status.device_connected, 5, "disconnected")
            await wait_for(lambda: transport.is_open, 5, "reopened")  # the session retries
            await deal(0, 1.5)  # the shoe's hello (to the host's GET_INFO), heartbeats
            await wait_for(lambda: daemon.status.device_connected, 5, "connected again")
            codes = [(e["code"], e["active"]) for _, body in daemon.outbox.take(10_000)
                     if (e := json.loads(body))["type"] == "alarm"]
            assert ("device_lost", True) in codes and ("device_lost", False) in codes
            assert transport.opens == 2
    asyncio.run(main())


def test_a_frame_of_unknown_type_sent_again_raises_one_notice_and_is_acked(
        tmp_path: pathlib.Path) -> None:
    """Spec sections 2 and 3: a frame of an unknown type is NAKed 3 and its seq accepted;
    its retransmission is ACKed again and raises no second protocol_mismatch."""
    async def main() -> None:
        async with table(tmp_path, "whole") as (daemon, shoe, deal):
            await deal(4)
            transport = daemon.session.transport
            assert isinstance(transport, LoopbackTransport)
            to_shoe = transport.on_write
            answers: list[bytes] = []
            transport.on_write = answers.append
            seq = shoe.link.spend_seq()  # the shoe's next seq goes to a frame of a newer type
            unknown = build_frame(0x55, seq, b"\x01")
            transport.feed(unknown)
            transport.feed(unknown)  # its NAK lost: sent again
            transport.feed(unknown[:5])  # and again, in two pieces
            transport.feed(unknown[5:])
            said = [decode_message(f.type_code, f.payload)
                    for f in StreamDecoder().feed(b"".join(answers))
                    if isinstance(f, RawFrame)]
            assert said == [Nak(NakReason.UNSUPPORTED), Ack(seq), Ack(seq)]
            transport.on_write = to_shoe
            await deal(4)  # the shoe's next frames follow on: no gap
            events = [json.loads(body) for _, body in daemon.outbox.take(10_000)]
            alarms = [e["code"] for e in events if e["type"] == "alarm"]
            assert alarms.count("protocol_mismatch") == 1 and "cards_lost" not in alarms
            check_shoe(events, shoe.dealt)
    asyncio.run(main())


def test_desk_answers_once_per_request_id_and_refuses_what_it_cannot_read(
        tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        async with table(tmp_path, "whole") as (daemon, _, deal):
            await deal(8)
            desk = daemon.desk
            bad = desk.handle(b"{not json")
            assert bad.body["ok"] is False and bad.body["error"]["code"] == "invalid_json"
            assert bad.body["request_id"] is None
            command = {"request_id": "c1", "command": "end_shoe", "operator": "sup"}
            first = desk.handle(json.dumps(command))
            again = desk.handle(json.dumps(command))
            assert first.body["ok"] is True and again.body == first.body, first.body
            acts = [e for _, body in daemon.outbox.take(10_000)
                    if (e := json.loads(body))["type"] == "supervisor_action"]
            assert len(acts) == 1  # applied once
            replay = desk.handle(json.dumps({"request_id": "p1", "command": "replay",
                                             "operator": "x", "from_seq": 1, "to_seq": 3}))
            assert replay.body["result"]["count"] == 3
            assert replay.replay is not None
            assert [json.loads(b)["seq"] for chunk in desk.replay_chunks(replay.replay)
                    for b in chunk] == [1, 2, 3]
            out = desk.handle(json.dumps({"request_id": "p2", "command": "replay",
                                          "operator": "x", "from_seq": 10**6}))
            assert out.body["error"]["code"] == "out_of_range" and out.replay is None
            held = out.body["error"]["first_seq"], out.body["error"]["last_seq"]
            assert held == daemon.recorder.journal.event_range() and held[0] == 1
            assert out.body["error"]["message"].endswith(f"got {10**6}..the newest")
            # A retained payload that is not a command, naming an id already answered:
            # answered once all the same, remembered by its hash, not by that id.
            retained = Incoming('{"request_id": "c1", "command": "recall", "hands": NaN}',
                                retained=True)
            first_time = desk.handle(retained)
            assert first_time.body is not None and first_time.body["request_id"] == "c1"
            assert first_time.body["error"]["code"] == "retained_command_ignored"
            assert desk.handle(retained).body is None  # delivered again: answered once
            assert desk.handle(json.dumps(command)).body == first.body  # c1 still c1's
            # A retained command whose request_id another command took: it was never
            # answered (outside review: it went unanswered); once, by its hash.
            reused = Incoming(json.dumps({"request_id": "c1", "command": "void_shoe",
                                          "operator": "sup", "reason": "x"}), retained=True)
            once = desk.handle(reused)
            assert once.body is not None and once.body["request_id"] == "c1"
            assert once.body["error"]["code"] == "retained_command_ignored"
            assert desk.handle(reused).body is None
            # An empty retained message (what clears a retained command) is no command:
            # no answer, which no request would match.
            assert desk.handle(Incoming(b"", retained=True)).body is None
            assert desk.handle(b"").body["error"]["code"] == "invalid_json"  # not retained
    asyncio.run(main())


@pytest.mark.broker
@pytest.mark.parametrize("variant", ["whole", "delayed"])
def test_mqtt_service_publishes_the_outbox_in_order_and_answers_commands(
        tmp_path: pathlib.Path, broker: PrivateMosquitto, variant: str) -> None:
    async def main() -> None:
        collector = Collector(broker.port, "shoed/T9")
        listening = asyncio.create_task(collector.run())
        await wait_for(collector.connected.is_set, 10, "collector")
        async with table(tmp_path, variant, url=broker.url, with_mqtt=True) as (
                daemon, shoe, deal):
            await wait_for(lambda: daemon.status.mqtt_connected, 10, "connected")
            await deal(20)
            await wait_for(lambda: daemon.outbox.depth() == 0, 10, "outbox drained")
            await wait_for(lambda: collector.events and collector.events[-1]["seq"]
                           == daemon.recorder.engine.seq, 10, "every event")
            check_shoe(collector.events, shoe.dealt)
            assert daemon.status.last_publish is not None
            answer = await collector.send({"request_id": "r1", "command": "recall",
                                           "operator": "x"})
            assert answer["ok"]
            status = collector.retained.get("status", {})
            for _ in range(100):  # the shoe's heartbeats keep it alive meanwhile
                status = collector.retained.get("status", {})
                if status.get("device_connected") and status.get("mqtt_connected"):
                    break
                await deal(0, 0.1)
            assert status["device_connected"] is True and status["mqtt_connected"] is True
            assert status["run_id"] == daemon.status.run_id
        listening.cancel()
    asyncio.run(main())


@pytest.mark.broker
def test_a_status_on_the_root_nobody_can_read_is_nobodys_claim(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    """The root's watch (decisions.md 215) reads whatever comes on `{root}/status`, where
    anyone the ACL lets write may publish: not JSON, not an object, an online status whose
    times are no numbers. None ends the connection or takes the root; the daemon answers
    commands and stays connected on its first connection."""
    async def main() -> None:
        async with table(tmp_path, "whole", url=broker.url, with_mqtt=True) as (
                daemon, _shoe, deal):
            await wait_for(lambda: daemon.status.mqtt_connected, 10, "connected")
            async with aiomqtt.Client("127.0.0.1", broker.port) as other:
                for body in (b"not json", b"[1, 2]", b"\xff\xfe", json.dumps(
                        {"online": True, "run_id": "other", "ts": "x",
                         "online_since": "y"}).encode()):
                    await other.publish("shoed/T9/status", body, qos=1)
            await deal(0, 0.5)
            # the test's own reader comes after the garbage (it would read it too)
            collector = Collector(broker.port, "shoed/T9")
            listening = asyncio.create_task(collector.run())
            await wait_for(collector.connected.is_set, 10, "collector")
            answer = await collector.send({"request_id": "w1", "command": "whoami",
                                           "operator": "x"})
            assert answer["ok"]
            assert daemon.status.mqtt_connected and daemon.mqtt.connects == 1
            assert not daemon.status.conflict
        listening.cancel()
    asyncio.run(main())


def test_recall_carries_who_sent_an_action_and_what_they_typed(tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        async with table(tmp_path, "whole") as (daemon, _, deal):
            desk = daemon.desk
            assert desk.settings is not None
            desk.settings = desk.settings.model_copy(update={
                "auth": desk.settings.auth.model_copy(update={"roles": {"pit-1": "supervisor"}})})
            await deal(20)
            hand = 1  # resolved: its record keeps the misorder, with who reported it
            answer = desk.handle(Incoming(json.dumps({
                "request_id": "m1", "command": "report_misorder", "operator": "ANNA",
                "hand_no": hand, "detail": "seen"}), sender="pit-1"))
            assert answer.body is not None and answer.body["ok"], answer.body
            assert answer.body["authenticated_as"] == "pit-1"
            assert answer.body["command"] == "report_misorder"
            await deal(12)
            recall = desk.handle(Incoming(json.dumps({
                "request_id": "r1", "command": "recall", "operator": "x"}), sender="pit-1"))
            assert recall.body is not None
            record = next(h for h in recall.body["result"]["hands"] if h["hand_no"] == hand)
            assert record["misorders"] == [{"detail": "seen", "operator": "ANNA",
                                            "authenticated_as": "pit-1"}], record
            voided = desk.handle(Incoming(json.dumps({
                "request_id": "v1", "command": "void_hand", "operator": "BOB", "hand_no": hand,
                "reason": "r"}), sender="pit-1"))
            assert voided.body is not None and voided.body["ok"], voided.body
            recall = desk.handle(Incoming(json.dumps({
                "request_id": "r2", "command": "recall", "operator": "x"}), sender="pit-1"))
            assert recall.body is not None
            record = next(h for h in recall.body["result"]["hands"] if h["hand_no"] == hand)
            assert record["voided"]["operator"] == "BOB"
            assert record["voided"]["authenticated_as"] == "pit-1"
    asyncio.run(main())


def test_the_sender_comes_from_the_command_topic(tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        async with table(tmp_path, "whole") as (daemon, _, _deal):
            mqtt = daemon.mqtt.inbox
            assert mqtt.sender_of("shoed/T9/cmd") == "anonymous"
            assert mqtt.sender_of("shoed/T9/cmd/by/pit-1") == "pit-1"
            # A user called "anonymous" must not get the bare topic's role.
            assert mqtt.sender_of("shoed/T9/cmd/by/anonymous") is None
            assert mqtt.sender_of("shoed/T9/cmd/by/") is None
            assert mqtt.answer_topic("pit-1", None) == "shoed/T9/cmd/response/pit-1"
            assert mqtt.answer_topic("pit-1", "shoed/T9/cmd/response/pit-1/x") == \
                "shoed/T9/cmd/response/pit-1/x"
            # A response topic elsewhere (a fake event, another user's answers) is refused.
            for elsewhere in ("shoed/T9/events", "shoed/T9/cmd/response/pit-10",
                              "shoed/T9/cmd/response/other",
                              # not a topic name: the broker would drop the daemon
                              "shoed/T9/cmd/response/pit-1/#", "shoed/T9/cmd/response/pit-1/+",
                              "shoed/T9/cmd/response/pit-1/a\x00b"):
                assert mqtt.answer_topic("pit-1", elsewhere) == "shoed/T9/cmd/response/pit-1"
            assert mqtt.answer_topic("anonymous", "shoed/T9/cmd/response/pit-1") == \
                "shoed/T9/cmd/response"
    asyncio.run(main())


def test_a_device_loop_stuck_in_an_open_stops_the_watchdog(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """WATCHDOG=1 only while every loop makes progress (issue 13, section 1): a device
    loop whose transport's open never returns is alive but stuck; the supervisor's health
    (what the watchdog asks before each ping) turns false after the allowed time, and is
    true while the loop serves a line or tries to open one (outside review of issue 13:
    the device loop had no progress check)."""
    import shoed.daemon as daemon_module

    class HangingOpen(LoopbackTransport):
        async def open(self) -> None:
            await asyncio.Event().wait()  # a driver that never answers

    monkeypatch.setattr(daemon_module, "DEVICE_STEP_SLACK_S", 0.3)

    async def main() -> None:
        settings = make_settings(tmp_path / "state", "mqtt://127.0.0.1:1",
                                 device={"reconnect_max_s": 0.05})
        daemon = Daemon(settings, transport_factory=HangingOpen)
        daemon.build()
        daemon.supervisor.start("device", daemon.session.run)
        try:
            await asyncio.sleep(0.15)
            assert daemon.supervisor.healthy()  # trying to open, within its time
            await asyncio.sleep(0.5)
            assert not daemon.supervisor.healthy()  # stuck in the open: no more pings
        finally:
            await daemon.supervisor.stop(timeout=1.0)
            daemon.recorder.close()

    asyncio.run(main())

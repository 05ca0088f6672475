"""shoed.mqtt.window: a window's messages go out without paho's per-message objects (its
DirectLane), byte for byte what paho would send, against a real Mosquitto."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Iterator
from typing import Any

import aiomqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from shoed.errors import BrokerError
from shoed.mqtt.inbox import publish_properties
from shoed.mqtt.window import DirectLane, PublishWindow
from shoed.mqtt.writes import send_when_queued

pytestmark = pytest.mark.broker

V5, V311 = aiomqtt.ProtocolVersion.V5, aiomqtt.ProtocolVersion.V311


def client_for(broker: Any, protocol: Any = V5, **kwargs: Any) -> aiomqtt.Client:
    return aiomqtt.Client("127.0.0.1", broker.port, timeout=5, protocol=protocol,
                          socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
                          **kwargs)


async def collect(subscriber: aiomqtt.Client, count: int) -> list[aiomqtt.Message]:
    got: list[aiomqtt.Message] = []
    async with asyncio.timeout(20):
        async for message in subscriber.messages:
            got.append(message)
            if len(got) == count:
                break
    return got


@pytest.mark.parametrize("protocol", [V5, V311], ids=["mqtt5", "mqtt311"])
def test_lane_messages_arrive_whole_in_order_with_retain_and_properties(
        broker: Any, protocol: Any) -> None:
    """Sizes around the remaining length's byte boundaries (127/128, 16 383/16 384), str
    and bytes bodies, retained and not, the daemon's MQTT 5 properties: as published."""
    props = publish_properties() if protocol == V5 else None
    bodies: list[str | bytes] = ["{}", "é" * 3, b"x" * 100, b"y" * 127, b"z" * 128,
                                 b"w" * 16_300, b"v" * 16_400, bytes(range(256)) * 1000]

    async def scenario() -> tuple[list[aiomqtt.Message], aiomqtt.Message, set[int]]:
        async with client_for(broker, protocol) as subscriber, \
                client_for(broker, protocol) as client:
            await subscriber.subscribe("lane/#", qos=1)
            send_when_queued(client)
            window = PublishWindow(client, 1, 5.0)
            assert window._lane is not None  # paho 2.2: the lane is in use
            for body in bodies:
                await window.publish("lane/events", body, props)
            await window.publish("lane/state", b'{"seq": 9}', props, retain=True)
            got = await collect(subscriber, len(bodies) + 1)
            left = set(window._lane.mids)
            window.close()
        async with client_for(broker, protocol) as late:  # the retained one stays
            await late.subscribe("lane/state", qos=1)
            retained = (await collect(late, 1))[0]
        return got, retained, left

    got, retained, left = asyncio.run(scenario())
    assert [bytes(m.payload) for m in got] == [  # type: ignore[arg-type]
        b.encode() if isinstance(b, str) else b for b in [*bodies, b'{"seq": 9}']]
    assert [m.topic.value for m in got] == ["lane/events"] * len(bodies) + ["lane/state"]
    assert all(m.qos == 1 for m in got)
    assert retained.retain and retained.payload == b'{"seq": 9}'
    if protocol == V5:
        assert got[0].properties.ContentType == "application/json"  # type: ignore[union-attr]
        assert got[0].properties.PayloadFormatIndicator == 1  # type: ignore[union-attr]
    assert left == set()  # every PUBACK came and was taken by the lane


def test_a_window_of_several_and_pahos_own_publishes_share_the_connection(broker) -> None:
    """The lane's packet ids come from paho's counter: aiomqtt's own QoS 1 publishes
    between them get their PUBACKs, and a window of 20 counts only its own."""

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        async with client_for(broker) as subscriber, client_for(broker) as client:
            await subscriber.subscribe("mix/#", qos=1)
            send_when_queued(client)
            window = PublishWindow(client, 20, 5.0)
            for i in range(300):
                await window.send("mix/lane", f"{i}".encode(), None)
                if i % 50 == 0:
                    await client.publish("mix/paho", f"p{i}".encode(), qos=1)
            await window.drain()
            window.close()
            got = await collect(subscriber, 306)
        lane = [bytes(m.payload) for m in got if m.topic.value == "mix/lane"]  # type: ignore[arg-type]
        own = [bytes(m.payload) for m in got if m.topic.value == "mix/paho"]  # type: ignore[arg-type]
        return lane, own

    lane, own = asyncio.run(scenario())
    assert lane == [f"{i}".encode() for i in range(300)]
    assert own == [f"p{i}".encode() for i in range(0, 300, 50)]


def test_what_the_socket_does_not_take_goes_out_behind_pahos_queue(broker) -> None:
    """A full send buffer: the lane's write is partial and paho's writer sends the rest;
    a message sent while paho still holds bytes waits behind them (order kept)."""
    big = bytes(range(256)) * (8 * 4096)  # 8 MiB: never fits a socket's send buffer

    async def scenario() -> tuple[list[bytes], list[int]]:
        async with client_for(broker) as subscriber, client_for(broker) as client:
            await subscriber.subscribe("full/#", qos=1)
            send_when_queued(client)
            paho = client._client
            queue = paho._packet_queue
            queued: list[int] = []  # sizes of the lane's packets left to paho's writer

            def packet_queue(command: int, packet: Any, *rest: Any) -> Any:
                if command == 0x32:
                    queued.append(len(packet))
                return queue(command, packet, *rest)

            paho._packet_queue = packet_queue
            window = PublishWindow(client, 10, 20.0)
            await window.send("full/t", b"first", None)
            await window.send("full/t", big, None)
            for i in range(5):
                await window.send("full/t", f"{i}".encode(), None)
            await window.drain()
            window.close()
            got = await collect(subscriber, 7)
        return [bytes(m.payload) for m in got], queued  # type: ignore[arg-type]

    got, queued = asyncio.run(scenario())
    assert queued and queued[0] < len(big)  # the rest of the big one (and maybe more)
    assert got == [b"first", big] + [f"{i}".encode() for i in range(5)]


def test_a_lost_connection_reaches_the_sender(broker) -> None:
    async def scenario() -> None:
        async with client_for(broker) as client:
            send_when_queued(client)
            window = PublishWindow(client, 1, 2.0)
            await window.publish("lost/t", b"before", None)
            broker.stop()
            with pytest.raises(BrokerError):
                for _ in range(50):  # the first writes may still land in the kernel
                    await window.publish("lost/t", b"after", None)

    asyncio.run(scenario())


@contextlib.contextmanager
def broker_stopped(broker: Any) -> Iterator[None]:
    """Mosquitto stopped with SIGSTOP while inside: the socket takes packets, no PUBACK
    comes."""
    broker.proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        broker.proc.send_signal(signal.SIGCONT)


def test_no_puback_within_the_timeout_is_an_error(broker) -> None:
    """Mosquitto stopped with SIGSTOP: the socket takes the packet, no PUBACK comes."""

    async def scenario() -> None:
        async with client_for(broker, keepalive=60) as client:
            window = PublishWindow(client, 1, 0.5)
            with broker_stopped(broker), \
                    pytest.raises(BrokerError, match=r"no PUBACK within 0\.5 s"):
                await window.publish("slow/t", b"x", None)

    asyncio.run(scenario())


def test_send_now_from_a_callback_and_notify_on_its_puback_or_the_loss(broker) -> None:
    """send_now() hands one message over without awaiting anything (the idle publisher's
    use, from the tty's callback): only while nothing of the window awaits a PUBACK;
    `notify` is called once none does, and when the connection is lost."""

    async def scenario() -> tuple[list[bytes], list[str], bool, bool]:
        notified: list[str] = []
        async with client_for(broker) as subscriber, client_for(broker) as client:
            await subscriber.subscribe("now/#", qos=1)
            send_when_queued(client)
            window = PublishWindow(client, 1, 5.0)
            window.notify = lambda: notified.append("puback")
            assert window.send_now("now/t", b"first", None)
            busy = window.send_now("now/t", b"refused", None)  # first awaits its PUBACK
            await window.drain(1.0)
            assert notified == ["puback"]
            assert window.send_now("now/t", b"second", None)
            await window.drain()
            got = [bytes(m.payload) for m in await collect(subscriber, 2)]  # type: ignore[arg-type]
            window.notify = lambda: notified.append("lost")
            broker.stop()
            for _ in range(200):  # until paho reports the loss (the window hears of it)
                if window._lost is not None:
                    break
                await asyncio.sleep(0.05)
            after_loss = window.send_now("now/t", b"after", None)
        return got, notified, busy, after_loss

    got, notified, busy, after_loss = asyncio.run(scenario())
    assert got == [b"first", b"second"]
    assert busy is False and after_loss is False
    assert notified == ["puback", "puback", "lost"]


def test_a_drain_with_a_shorter_timeout_than_the_windows(broker) -> None:
    """drain(timeout): the time left of a message sent earlier, not the window's own."""

    async def scenario() -> float:
        async with client_for(broker, keepalive=60) as client:
            window = PublishWindow(client, 1, 30.0)
            with broker_stopped(broker):
                assert window.send_now("slow/t", b"x", None)
                started = asyncio.get_running_loop().time()
                with pytest.raises(BrokerError, match=r"no PUBACK within 30 s"):
                    await window.drain(0.3)
                return asyncio.get_running_loop().time() - started

    assert asyncio.run(scenario()) < 5.0


def test_pahos_parts_missing_means_paho_publishes() -> None:
    class Bare:
        pass

    assert DirectLane.install(Bare(), set()) is None


class Captured:
    """A socket that takes every byte sent to it."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> int:
        self.sent.append(bytes(data))
        return len(data)

    def close(self) -> None:  # paho closes its socket when it is collected
        pass


def lane_on_a_captured_socket() -> tuple[DirectLane, Captured]:
    import paho.mqtt.client as mqtt

    paho = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    paho._sock = sock = Captured()  # type: ignore[assignment]
    lane = DirectLane.install(paho, set())
    assert lane is not None
    return lane, sock


def test_properties_packed_once_per_object() -> None:
    """The daemon's properties are made once and never changed (inbox.PackedOnce): the
    lane writes their first packing; other properties are packed as they are."""
    props = publish_properties(content_type="text/plain")
    expected = bytes(props.pack())
    lane, sock = lane_on_a_captured_socket()

    def packed(properties: Properties) -> bytes:  # the properties of the packet just sent
        packet = sock.sent[-1]
        start = packet.index(b"t/p") + 3 + 2  # after the topic and the packet id
        return packet[start:start + len(expected) if properties is props else start + 1]

    lane.publish("t/p", b"", props, False)
    assert packed(props) == expected
    props.ContentType = "changed"  # what the lane would not see: the first packing stays
    lane.publish("t/p", b"", props, False)
    assert packed(props) == expected
    other = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    lane.publish("t/p", b"", other, False)
    assert packed(other) == b"\x00"  # another object: packed on its own (empty)


def test_a_message_too_large_for_mqtt_is_refused_naming_its_topic(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from shoed.mqtt import window

    lane, sock = lane_on_a_captured_socket()
    monkeypatch.setattr(window, "MAX_REMAINING", 100)  # MQTT's 256 MiB, made small
    with pytest.raises(ValueError, match=r"a message on t/big is too large for MQTT "
                                         r"\(1\d\d bytes\)"):
        lane.publish("t/big", b"x" * 100, None, False)
    assert sock.sent == [] and lane.mids == set()  # nothing sent, no id kept

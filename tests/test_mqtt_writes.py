"""shoed.mqtt.writes: packets leave when paho queues them, against a real Mosquitto."""

from __future__ import annotations

import asyncio
import socket

import aiomqtt
import pytest

from shoed.mqtt.writes import send_when_queued

pytestmark = pytest.mark.broker


def client_for(broker, **kwargs) -> aiomqtt.Client:
    return aiomqtt.Client("127.0.0.1", broker.port, timeout=5,
                          socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)], **kwargs)


async def queued_after_first_step(client: aiomqtt.Client) -> bool:
    """Start a QoS 1 publish, let it run up to its first wait, and say whether paho still
    holds the packet (it has not reached the socket)."""
    task = asyncio.create_task(client.publish("t/step", b"x", qos=1))
    await asyncio.sleep(0)  # the task runs up to awaiting the PUBACK
    still_queued = client._client.want_write()
    await task
    return still_queued


def test_a_publish_is_on_the_socket_before_the_loop_turns(broker) -> None:
    async def scenario() -> tuple[bool, bool]:
        async with client_for(broker) as plain:
            without = await queued_after_first_step(plain)
        async with client_for(broker) as client:
            send_when_queued(client)
            with_it = await queued_after_first_step(client)
        return without, with_it

    without, with_it = asyncio.run(scenario())
    assert without is True  # aiomqtt alone: the packet waits for a writer callback
    assert with_it is False  # written at once


def test_a_large_message_and_a_burst_arrive_whole_and_in_order(broker) -> None:
    """A 4 MiB payload does not fit the socket's send buffer: the rest goes through
    aiomqtt's writer, and the small messages queued behind it keep their order."""
    big = bytes(range(256)) * (4 * 4096)

    async def scenario() -> list[bytes]:
        got: list[bytes] = []
        async with client_for(broker) as subscriber, client_for(broker) as client:
            await subscriber.subscribe("t/burst", qos=1)
            send_when_queued(client)
            sends = [client.publish("t/burst", b"first", qos=1),
                     client.publish("t/burst", big, qos=1)]
            sends += [client.publish("t/burst", f"{i}".encode(), qos=1) for i in range(200)]
            await asyncio.gather(*sends)
            async with asyncio.timeout(20):
                async for message in subscriber.messages:
                    got.append(bytes(message.payload))  # type: ignore[arg-type]
                    if len(got) == 202:
                        break
        return got

    got = asyncio.run(scenario())
    assert got[0] == b"first"
    assert got[1] == big
    assert got[2:] == [f"{i}".encode() for i in range(200)]


def test_a_lost_broker_is_reported_as_an_mqtt_error(broker) -> None:
    async def scenario() -> None:
        async with client_for(broker) as client:
            send_when_queued(client)
            await client.publish("t/lost", b"before", qos=1)
            broker.stop()
            with pytest.raises(aiomqtt.MqttError):
                for _ in range(50):  # the first write may still land in the kernel
                    await client.publish("t/lost", b"after", qos=1, timeout=1)
                    await asyncio.sleep(0.05)

    try:
        asyncio.run(scenario())
    except* aiomqtt.MqttError:
        pass  # leaving `async with` on a dead connection may raise too; that is expected



@pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"), reason="TCP_QUICKACK is Linux's")
def test_after_every_read_our_ack_is_asked_to_leave_at_once(broker) -> None:
    """ack_at_once: after each of paho's reads, TCP_QUICKACK is set on its socket (the
    kernel then sends the ACK for what was read at once, and leaves quick-ACK mode again
    by itself), in that order; reads return what paho returned; a socket closed
    meanwhile is paho's to report. Then against a real Mosquitto: messages flow."""
    from shoed.mqtt.writes import ack_at_once

    calls: list[tuple[str, object]] = []

    class Sock:
        closed = False

        def setsockopt(self, level: int, option: int, value: int) -> None:
            if self.closed:
                raise OSError(9, "Bad file descriptor")
            calls.append(("setsockopt", (level, option, value)))

    class Paho:
        sock = Sock()

        def socket(self) -> Sock:
            return self.sock

        def loop_read(self, max_packets: int = 1) -> int:
            calls.append(("read", max_packets))
            return 7

    class Client:
        _client = Paho()

    fake = Client()
    assert ack_at_once(fake)  # type: ignore[arg-type]
    assert fake._client.loop_read() == 7 and fake._client.loop_read(3) == 7
    quick = ("setsockopt", (socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1))
    assert calls == [("read", 1), quick, ("read", 3), quick]
    fake._client.sock.closed = True
    assert fake._client.loop_read() == 7  # no OSError out of the read

    async def main() -> None:
        async with client_for(broker) as sub, client_for(broker) as pub:
            assert ack_at_once(sub)
            await sub.subscribe("t/ack", qos=1)
            for i in range(3):
                await pub.publish("t/ack", f"m{i}".encode(), qos=1)
            got = []
            async for message in sub.messages:
                got.append(message.payload)
                if len(got) == 3:
                    break
            assert got == [b"m0", b"m1", b"m2"]
        assert not ack_at_once(client_for(broker))  # not connected: nothing to set

    asyncio.run(main())


@pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"), reason="TCP_QUICKACK is Linux's")
def test_no_quick_ack_after_the_puback_of_the_last_message_in_flight() -> None:
    """With paho's parts to look at: a read that brought only PUBACKs, with nothing of
    ours still awaiting one, leaves our ACK to our next packet (or the kernel's delayed
    ACK); any other packet (a command's PUBLISH, a PINGRESP), or a PUBACK while paho or
    the lane still awaits another, gets the quick ACK as before."""
    from shoed.mqtt.writes import ack_at_once

    calls: list[str] = []

    class Sock:
        def setsockopt(self, level: int, option: int, value: int) -> None:
            assert (level, option, value) == (socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
            calls.append("quick")

    class Lane:
        mids: set[int] = set()

    class Paho:
        def __init__(self) -> None:
            self.sock = Sock()
            self._in_packet: dict[str, int] = {"command": 0}
            self._out_messages: dict[int, object] = {}
            self.incoming: list[int] = []  # packet types the next read brings

        def socket(self) -> Sock:
            return self.sock

        def _packet_handle(self) -> int:
            calls.append(f"handled {self._in_packet['command']:#x}")
            return 0

        def loop_read(self, max_packets: int = 1) -> int:
            for command in self.incoming:  # as paho's _packet_read does, per packet
                self._in_packet = {"command": command}
                self._packet_handle()
            self.incoming = []
            return 0

    class Client:
        _client = Paho()

    fake = Client()
    paho = fake._client
    assert ack_at_once(fake)  # type: ignore[arg-type]

    def read(*commands: int) -> list[str]:
        calls.clear()
        paho.incoming = list(commands)
        assert paho.loop_read() == 0
        return [c for c in calls if c == "quick"]

    assert read(0x20) == ["quick"]  # the CONNACK's read (or the first): quick
    assert read(0x40) == []  # the last PUBACK awaited: our next PUBLISH carries the ACK
    assert read(0x40, 0x40) == []
    assert read(0x32) == ["quick"]  # a command (QoS 1 PUBLISH): quick, as before
    assert read(0x40, 0xD0) == ["quick"]  # a PINGRESP among them
    paho._out_messages[7] = object()  # aiomqtt's own publish still awaits its PUBACK
    assert read(0x40) == ["quick"]
    paho._out_messages.clear()
    paho._shoed_lane = Lane()  # type: ignore[attr-defined]
    Lane.mids = {3}  # a window's message still awaits its PUBACK
    assert read(0x40) == ["quick"]
    Lane.mids = set()
    assert read(0x40) == []
    assert "handled 0x40" in calls  # paho's own handler still ran


def test_a_buffered_read_serves_paho_whole_packets_from_one_recv() -> None:
    """read_buffered, against a fake paho that reads as paho does (type byte, length
    byte, body): two PUBACKs that arrived together are one recv(2), and the loop_read
    goes on until nothing of them is left in the buffer; an ask larger than what is
    held gets what is held; a closed connection still reads as b""."""
    from shoed.mqtt.reads import READ_SIZE, read_buffered

    class Sock:
        def __init__(self) -> None:
            self.chunks: list[bytes] = []
            self.asked: list[int] = []

        def recv(self, size: int) -> bytes:
            self.asked.append(size)
            if not self.chunks:
                raise BlockingIOError
            return self.chunks.pop(0)

    class Paho:
        def __init__(self) -> None:
            self._sock = Sock()
            self.packets: list[bytes] = []

        def socket(self) -> Sock:
            return self._sock

        def _sock_recv(self, size: int) -> bytes:
            return self._sock.recv(size)

        def loop_read(self, max_packets: int = 1) -> int:
            try:
                header = self._sock_recv(1)
                if not header:
                    return 7  # paho: connection lost
                length = self._sock_recv(1)[0]
                body = b""
                while len(body) < length:
                    body += self._sock_recv(length - len(body))
            except BlockingIOError:
                return 0
            self.packets.append(header + body)
            return 0

    class Client:
        def __init__(self) -> None:
            self._client = Paho()

    client = Client()
    paho = client._client
    assert read_buffered(client)  # type: ignore[arg-type]
    assert read_buffered(client)  # type: ignore[arg-type]  # once is enough
    paho._sock.chunks = [b"\x40\x02\x00\x01\x40\x02\x00\x02"]
    assert paho.loop_read() == 0
    assert paho.packets == [b"\x40\x00\x01", b"\x40\x00\x02"]
    assert paho._sock.asked == [READ_SIZE]  # one read for both
    # A packet split over two arrivals: what is held, then the socket again.
    paho._sock.chunks, paho._sock.asked = [b"\x30\x05ab", b"cde"], []
    assert paho.loop_read() == 0
    assert paho.packets[-1] == b"\x30abcde"
    paho._sock.chunks = [b""]
    assert paho.loop_read() == 7  # closed: paho's own answer


def test_a_buffered_client_reads_a_burst_and_a_large_message_whole(broker) -> None:
    """Against a real Mosquitto: PUBACKs of a burst cost fewer reads than packets, and a
    4 MiB message and the small ones behind it arrive whole and in order."""
    from shoed.mqtt.reads import read_buffered

    big = bytes(range(256)) * (4 * 4096)

    async def scenario() -> tuple[list[bytes], int, int]:
        got: list[bytes] = []
        async with client_for(broker) as subscriber, client_for(broker) as client:
            paho = client._client
            original = paho._sock_recv
            recvs = asks = 0

            def socket_read(size: int) -> bytes:  # what reaches the socket
                nonlocal recvs
                recvs += 1
                return original(size)

            paho._sock_recv = socket_read
            assert read_buffered(subscriber) and read_buffered(client)
            buffered = paho._sock_recv

            def paho_read(size: int) -> bytes:  # what paho asks for
                nonlocal asks
                asks += 1
                return buffered(size)

            paho._sock_recv = paho_read
            await subscriber.subscribe("t/buffered", qos=1)
            recvs = asks = 0
            await asyncio.gather(*[client.publish("t/buffered", f"{i}".encode(), qos=1)
                                   for i in range(100)])
            burst = (recvs, asks)
            await client.publish("t/buffered", big, qos=1)
            await client.publish("t/buffered", b"after", qos=1)
            async with asyncio.timeout(20):
                async for message in subscriber.messages:
                    got.append(bytes(message.payload))  # type: ignore[arg-type]
                    if len(got) == 102:
                        break
        return got, *burst

    got, recvs, asks = asyncio.run(scenario())
    assert asks >= 3 * 100  # paho asked three times a PUBACK ...
    assert recvs < 100  # ... and the socket was read fewer times than PUBACKs came
    assert got[:100] == [f"{i}".encode() for i in range(100)]
    assert got[100] == big and got[101] == b"after"


class _ReadingPaho:
    """A paho that reads as paho does (type byte, one length byte, body) and hands each
    packet to its own handler; a PUBACK of its own is counted there."""

    def __init__(self, protocol: int = 5) -> None:
        import threading

        self._sock = _ChunkSock()
        self._protocol = protocol
        self._in_packet: dict[str, int] = {"command": 0}
        self._msgtime_mutex = threading.Lock()
        self._last_bytes_received = 0.0
        self.packets: list[bytes] = []  # what paho's own reading handled

    def socket(self) -> _ChunkSock:
        return self._sock

    def _sock_recv(self, size: int) -> bytes:
        return self._sock.recv(size)

    def loop_read(self, max_packets: int = 1) -> int:
        try:
            header = self._sock_recv(1)
            if not header:
                return 7  # paho: connection lost
            self._in_packet = {"command": header[0]}
            length = self._sock_recv(1)[0]
            body = b""
            while len(body) < length:
                body += self._sock_recv(length - len(body))
        except BlockingIOError:
            return 0
        except OSError:
            return 7
        self.packets.append(header + body)
        self._in_packet = {"command": 0}
        return 0


class _ChunkSock:
    def __init__(self) -> None:
        self.chunks: list[bytes | BaseException] = []
        self.reads = 0

    def recv(self, size: int) -> bytes:
        self.reads += 1
        if not self.chunks:
            raise BlockingIOError
        chunk = self.chunks.pop(0)
        if isinstance(chunk, BaseException):
            raise chunk
        return chunk


class _Lane:
    def __init__(self, *mids: int) -> None:
        self.mids = set(mids)
        self.taken: list[int] = []

    def acked(self, mid: int) -> bool:
        if mid not in self.mids:
            return False
        self.mids.discard(mid)
        self.taken.append(mid)
        return True


def _buffered(protocol: int = 5) -> _ReadingPaho:
    from shoed.mqtt.reads import read_buffered

    class Client:
        def __init__(self) -> None:
            self._client = _ReadingPaho(protocol)

    client = Client()
    assert read_buffered(client)  # type: ignore[arg-type]
    return client._client


def test_the_lanes_plain_pubacks_are_taken_without_pahos_read() -> None:
    """While a window's message awaits its PUBACK, what one recv(2) brought is taken
    from the front as long as it is plain PUBACKs of the lane's packet ids: paho reads
    none of them, its keepalive clock still moves. Whatever follows (a PUBLISH, a
    PUBACK of paho's own message, one with a failure reason or properties, a PUBACK
    split over two arrivals) is left to paho's reading, whole and in order."""
    paho = _buffered()
    paho._shoed_lane = lane = _Lane(1, 2, 3, 4, 5, 6, 7)  # type: ignore[attr-defined]
    sock = paho._sock
    # Two of the lane's, plain (MQTT 5: bare, and with "no matching subscribers").
    sock.chunks = [b"\x40\x02\x00\x01\x40\x03\x00\x02\x10"]
    assert paho.loop_read() == 0
    assert lane.taken == [1, 2] and paho.packets == [] and sock.reads == 1
    assert paho._last_bytes_received > 0
    # One of the lane's, then a command's PUBLISH: the PUBLISH goes to paho.
    sock.chunks = [b"\x40\x04\x00\x03\x00\x00\x32\x03abc"]
    assert paho.loop_read() == 0
    assert lane.taken == [1, 2, 3] and paho.packets == [b"\x32abc"]
    # paho's own message's PUBACK first: it and everything after it are paho's.
    sock.chunks = [b"\x40\x02\x00\x63\x40\x02\x00\x04"]
    assert paho.loop_read() == 0
    assert lane.taken == [1, 2, 3] and paho.packets[-2:] == [b"\x40\x00\x63", b"\x40\x00\x04"]
    # A failure reason (0x87, not authorized) or properties: paho decodes those.
    # (the properties: an empty reason string, 0x1F with a zero length)
    with_properties = b"\x40\x07\x00\x06\x00\x03\x1f\x00\x00"
    sock.chunks = [b"\x40\x03\x00\x05\x87", with_properties]
    assert paho.loop_read() == 0
    assert paho.loop_read() == 0
    assert paho.packets[-2:] == [b"\x40\x00\x05\x87", b"\x40" + with_properties[2:]]
    # Split over two arrivals: nothing taken here, paho reads it whole.
    sock.chunks = [b"\x40\x02", b"\x00\x07"]
    assert paho.loop_read() == 0
    assert paho.packets[-1] == b"\x40\x00\x07" and 7 not in lane.taken


def test_the_fast_read_leaves_a_closed_or_failed_connection_to_paho() -> None:
    """Nothing there (BlockingIOError): nothing read by paho either. The connection
    closed (b"") or failed (an OSError): paho's own read meets exactly that and
    reports the loss as always. No lane message awaited: paho reads as before."""
    paho = _buffered()
    paho._shoed_lane = lane = _Lane(1)  # type: ignore[attr-defined]
    sock = paho._sock
    assert paho.loop_read() == 0 and paho.packets == [] and sock.reads == 1
    sock.chunks = [ConnectionResetError(104, "reset")]
    assert paho.loop_read() == 7 and sock.reads == 2  # paho got the one error, no re-read
    sock.chunks = [b"", b""]  # a closed socket reads b"" every time
    assert paho.loop_read() == 7
    lane.mids.clear()
    sock.chunks, sock.reads = [b"\x40\x02\x00\x01"], 0
    assert paho.loop_read() == 0 and paho.packets == [b"\x40\x00\x01"]
    assert lane.taken == []


def test_a_puback_taken_before_a_failing_one_is_never_read_again() -> None:
    """If telling the lane of a PUBACK raises, the PUBACKs taken before it are gone from
    the buffer: paho's next read does not hand them to anyone a second time."""
    paho = _buffered()

    class Failing(_Lane):
        def acked(self, mid: int) -> bool:
            if mid == 2:
                raise RuntimeError("a window failed")
            return super().acked(mid)

    paho._shoed_lane = lane = Failing(1, 2)  # type: ignore[attr-defined]
    paho._sock.chunks = [b"\x40\x02\x00\x01\x40\x02\x00\x02"]
    with pytest.raises(RuntimeError):
        paho.loop_read()
    assert lane.taken == [1]
    paho._shoed_lane = None  # type: ignore[attr-defined]
    assert paho.loop_read() == 0
    assert paho.packets == [b"\x40\x00\x02"]  # the failing one, read by paho; 1 is not


def test_with_real_paho_a_packet_split_over_two_reads_is_finished_by_paho() -> None:
    """Real paho over a socketpair, a lane message awaiting its PUBACK: a PUBLISH whose
    first part came in one read and whose payload (bytes that look like a PUBACK of the
    lane's packet id) comes in the next is finished by paho's own read; the fast read
    never takes a packet's middle for a PUBACK. Then a real PUBACK is taken."""
    import paho.mqtt.client as mqtt

    from shoed.mqtt.reads import read_buffered
    from shoed.mqtt.window import DirectLane

    paho = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    ours, broker_end = socket.socketpair()
    try:
        ours.setblocking(False)
        paho._sock = ours
        lane = DirectLane.install(paho, set())
        assert lane is not None
        paho._shoed_lane = lane
        lane.mids.add(1)
        messages: list[bytes] = []
        paho.on_message = lambda client, userdata, message: messages.append(message.payload)
        handled = count_handled(paho)

        class Client:
            _client = paho

        assert read_buffered(Client())  # type: ignore[arg-type]
        broker_end.sendall(b"\x30\x08\x00\x01t\x00")  # QoS 0 PUBLISH on "t": 4 bytes to come
        assert paho.loop_read() == 0
        assert paho._in_packet["command"] == 0x30 and handled == []
        broker_end.sendall(b"\x40\x02\x00\x01")  # its payload
        assert paho.loop_read() == 0
        assert messages == [b"\x40\x02\x00\x01"] and handled == [0x30]
        assert lane.mids == {1}  # not taken for a PUBACK
        broker_end.sendall(b"\x40\x02\x00\x01")  # the PUBACK itself
        assert paho.loop_read() == 0
        assert lane.mids == set() and handled == [0x30]  # taken, paho read none of it
    finally:
        ours.close()
        broker_end.close()


def test_under_mqtt311_only_the_two_byte_puback_is_plain() -> None:
    paho = _buffered(protocol=4)
    paho._shoed_lane = lane = _Lane(1, 2)  # type: ignore[attr-defined]
    paho._sock.chunks = [b"\x40\x02\x00\x01\x40\x03\x00\x02\x00"]
    assert paho.loop_read() == 0
    assert lane.taken == [1] and paho.packets == [b"\x40\x00\x02\x00"]


@pytest.mark.parametrize("protocol", [aiomqtt.ProtocolVersion.V5,
                                      aiomqtt.ProtocolVersion.V311], ids=["mqtt5", "mqtt311"])
def test_a_windows_pubacks_from_mosquitto_skip_pahos_read(broker, protocol) -> None:
    """Against a real Mosquitto, a window of one (the live publisher's) and of twenty (a
    replay's) with aiomqtt's own QoS 1 publishes between: every message arrives once, in
    order; paho's reading handles only the PUBACKs of its own messages, the lane's are
    taken by the buffered read (retained ones nobody subscribed to included: MQTT 5's
    "no matching subscribers")."""
    from shoed.mqtt.reads import read_buffered
    from shoed.mqtt.window import PublishWindow

    async def scenario() -> tuple[list[bytes], int]:
        async with client_for(broker, protocol=protocol) as subscriber, \
                client_for(broker, protocol=protocol) as client:
            await subscriber.subscribe("fast/events", qos=1)
            send_when_queued(client)
            assert read_buffered(client)
            handled = count_handled(client._client)
            live = PublishWindow(client, 1, 5.0)
            for i in range(40):
                await live.publish("fast/events", f"{i}".encode(), None)
                await live.publish("fast/unheard", b"{}", None, retain=True)
                if i % 10 == 0:
                    await client.publish("fast/events", f"p{i}".encode(), qos=1)
            live.close()
            replay = PublishWindow(client, 20, 5.0)
            for i in range(200):
                await replay.send("fast/events", f"r{i}".encode(), None)
            await replay.drain()
            replay.close()
            got = await collect_payloads(subscriber, 40 + 4 + 200)
            by_paho = handled.count(0x40)
            await client.publish("fast/unheard", b"", qos=1, retain=True)  # cleared
        return got, by_paho

    got, pubacks_read_by_paho = asyncio.run(scenario())
    expected = []
    for i in range(40):
        expected.append(f"{i}".encode())
        if i % 10 == 0:
            expected.append(f"p{i}".encode())
    assert got == expected + [f"r{i}".encode() for i in range(200)]
    assert pubacks_read_by_paho == 4  # aiomqtt's own four, none of the lane's 280


def count_handled(paho) -> list[int]:  # type: ignore[no-untyped-def]
    """The type of every packet paho's own reading handles on `paho` from now on."""
    handle = paho._packet_handle
    handled: list[int] = []

    def counted() -> int:
        handled.append(paho._in_packet["command"] & 0xF0)
        return handle()  # type: ignore[no-any-return]

    paho._packet_handle = counted
    return handled


async def collect_payloads(subscriber: aiomqtt.Client, count: int) -> list[bytes]:
    got: list[bytes] = []
    async with asyncio.timeout(20):
        async for message in subscriber.messages:
            got.append(bytes(message.payload))  # type: ignore[arg-type]
            if len(got) == count:
                break
    return got


def test_a_paho_without_the_fast_reads_parts_reads_every_packet_itself() -> None:
    """A paho lacking a part the fast read stands on (here its keepalive clock's lock):
    the buffered read is installed, and paho reads the lane's PUBACKs itself."""
    from shoed.mqtt.reads import read_buffered

    class Bare(_ReadingPaho):
        def __getattribute__(self, name: str):  # type: ignore[no-untyped-def]
            if name == "_msgtime_mutex":
                raise AttributeError(name)
            return super().__getattribute__(name)

    class Client:
        def __init__(self) -> None:
            self._client = Bare()

    client = Client()
    assert read_buffered(client)  # type: ignore[arg-type]
    bare = client._client
    bare._shoed_lane = lane = _Lane(1)  # type: ignore[attr-defined]
    bare._sock.chunks = [b"\x40\x02\x00\x01"]
    assert bare.loop_read() == 0
    assert bare.packets == [b"\x40\x00\x01"] and lane.taken == []

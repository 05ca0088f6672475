"""QoS 1 publishes with several awaiting their PUBACK, without a task or a future each.

A `replay` page re-sends thousands of events; through aiomqtt's ``publish`` each one is a
coroutine in its own task, awaiting its own future: most of the replay's CPU (about 5 000
events/s on the table PC, docs/performance.md). :class:`PublishWindow` hands the packet to
paho directly and counts PUBACKs in paho's ``on_publish`` (wrapped, aiomqtt's own still
runs): one future for the sender to wait on when the window is full or at the end. The
live publisher uses one of size 1 (send, then drain): no ``asyncio.wait_for`` per
message, which aiomqtt's ``publish`` pays twice a card.

The packets leave in call order and the broker answers in that order; nothing here marks
anything done (the live publisher marks the outbox after each drain, in seq order), so
the order of PUBACKs only matters for knowing that all came. One sender per window: a
second one waiting at once is not supported (a second window is). A connection that
drops, or no PUBACK for `timeout` seconds while some are awaited, raises BrokerError in
the sender; a PUBACK whose reason is a failure (MQTT 5: the broker refused the message,
e.g. 0x87 Not authorized by its ACL) raises PublishRefused there: that message was not
delivered, and the window takes no more (whoever marks the outbox marks nothing past
it, and the next connection sends it again).

A window's message does not go through paho's ``publish`` either (:class:`DirectLane`):
paho makes an ``MQTTMessage``, an ``MQTTMessageInfo`` with its ``threading.Condition``,
two debug log calls and a queue entry per message, and on the PUBACK looks the message
up, calls three callbacks and notifies the condition; a window needs none of it (it
counts packet ids, and the outbox, not paho, sends again after a reconnect). The lane
writes the PUBLISH packet (the same bytes paho writes: MQTT 3.1.1 section 3.3 / MQTT 5
section 3.3) to the socket itself when nothing of paho's is queued ahead of it, else
queues it behind paho's packets, and takes the PUBACKs of its own packet ids before
paho looks for them. A card's PUBLISH/PUBACK Python was the largest share of the
daemon's left after the engine (docs/performance.md, "Tenth pass").
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import aiomqtt
from paho.mqtt.client import MQTT_ERR_SUCCESS
from paho.mqtt.enums import MQTTProtocolVersion
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from shoed.aio import TimedWait
from shoed.errors import BrokerError, PublishRefused
from shoed.mqtt import acks
from shoed.mqtt.acks import SUCCESS, puback_of

PUBLISH_QOS1 = 0x32  # PUBLISH, QoS 1, not DUP (| 1: retained)
MAX_REMAINING = 268_435_455  # MQTT's largest remaining length


class PublishWindow:
    """`size` QoS 1 messages awaiting their PUBACK at most, on one client; close() it when
    done. Several windows may share a client (the live publisher's and a replay's on the
    daemon's connection): paho's callbacks are wrapped once per client, and each window
    counts only the mids it sent."""

    def __init__(self, client: aiomqtt.Client, size: int, timeout: float) -> None:
        # aiomqtt documents no way to this; paho's callbacks are public (decisions.md 30).
        self._paho = client._client
        self.size = size
        self.timeout = timeout
        self._awaited: dict[int, str] = {}  # mid -> topic: sent, PUBACK not yet received
        self._wait = TimedWait()  # the sender's, until a PUBACK, the loss, or the timeout
        self._lost: BrokerError | None = None
        self._windows = _windows_of(self._paho)
        self._windows.add(self)
        self._lane: DirectLane | None = getattr(self._paho, "_shoed_lane", None)
        # Called when no message awaits its PUBACK any more, or the connection is lost:
        # how a sender that handed a message over with send_now() and went on waiting
        # for something else learns of it.
        self.notify: Callable[[], None] | None = None

    def close(self) -> None:
        """No more messages through this window (its client's callbacks forget it)."""
        self._windows.discard(self)

    def _acked(self, mid: int, reason: ReasonCode = SUCCESS) -> None:
        topic = self._awaited.pop(mid, None)
        if topic is not None:
            if reason.is_failure and self._lost is None:
                self._lost = PublishRefused(topic, reason.getName(), reason.value)
            self._wake()

    def _connection_lost(self, why: str) -> None:
        if self._lost is None:
            self._lost = BrokerError(f"the connection was lost ({why})")
        self._wake()

    def _wake(self) -> None:
        if len(self._awaited) < self.size or self._lost is not None:
            self._wait.wake()
        if self.notify is not None and (not self._awaited or self._lost is not None):
            self.notify()

    def send_now(self, topic: str, payload: str | bytes, properties: Properties | None,
                 retain: bool = False) -> bool:
        """Send one QoS 1 message at once, from a plain callback (no await): only through
        the lane, only when no message of this window awaits its PUBACK and the
        connection was not lost. False when nothing was sent; raises as the lane does
        (not connected, too large), also with nothing sent."""
        lane = self._lane
        if lane is None or self._awaited or self._lost is not None:
            return False
        self._awaited[lane.publish(topic, payload, properties, retain)] = topic
        return True

    async def send(self, topic: str, payload: str | bytes, properties: Properties | None,
                   retain: bool = False) -> None:
        """Send one QoS 1 message (through the lane, or paho's publish without one),
        once fewer than `size` await their PUBACK."""
        if len(self._awaited) >= self.size or self._lost is not None:
            await self._wait_below(self.size)
        lane = self._lane
        if lane is not None:
            self._awaited[lane.publish(topic, payload, properties, retain)] = topic
            return
        info = self._paho.publish(topic, payload, 1, retain, properties)
        if info.rc != MQTT_ERR_SUCCESS:
            raise BrokerError(f"could not publish on {topic}: paho rc {info.rc}")
        if not info.is_published():
            self._awaited[info.mid] = topic

    async def publish(self, topic: str, payload: str | bytes, properties: Properties | None,
                      retain: bool = False) -> None:
        """One message, returning once it has its PUBACK (a window of one's use)."""
        await self.send(topic, payload, properties, retain)
        await self.drain()

    async def drain(self, timeout: float | None = None) -> None:
        """Returns once every message sent has its PUBACK (raises when none came for
        `timeout` seconds, the window's own by default)."""
        await self._wait_below(1, timeout)

    async def _wait_below(self, limit: int, timeout: float | None = None) -> None:
        wait = self.timeout if timeout is None else timeout
        while True:
            if self._lost is not None:
                raise self._lost
            if len(self._awaited) < limit:
                return
            awaited = len(self._awaited)
            await self._wait.wait(wait)
            wait = self.timeout
            if self._lost is None and len(self._awaited) >= awaited:
                raise BrokerError(f"no PUBACK within {self.timeout:g} s "
                                  f"({awaited} messages awaiting one)")


async def publish_once(client: aiomqtt.Client, topic: str, payload: str | bytes,
                       properties: Properties | None, timeout: float,
                       retain: bool = False) -> None:
    """One QoS 1 message through a window of its own, returning once it has its PUBACK:
    unlike aiomqtt's ``publish``, a PUBACK that refuses it raises PublishRefused."""
    window = PublishWindow(client, 1, timeout)
    try:
        await window.publish(topic, payload, properties, retain)
    finally:
        window.close()


def _windows_of(paho: Any) -> set[PublishWindow]:
    """The windows open on a paho client; its on_publish and on_disconnect are wrapped
    once, the first time (aiomqtt's own callbacks still run after them)."""
    windows: set[PublishWindow] | None = getattr(paho, "_shoed_windows", None)
    if windows is not None:
        return windows
    opened: set[PublishWindow] = set()
    paho._shoed_windows = opened
    inner_publish: Any = paho.on_publish
    inner_disconnect: Any = paho.on_disconnect

    def on_publish(c: Any, userdata: Any, mid: int, *rest: Any) -> None:
        # paho's VERSION2 callback (aiomqtt's): the PUBACK's reason code comes next
        reason = rest[0] if rest and isinstance(rest[0], ReasonCode) else SUCCESS
        for window in tuple(opened):
            window._acked(mid, reason)
        inner_publish(c, userdata, mid, *rest)

    def on_disconnect(c: Any, userdata: Any, *rest: Any) -> None:
        why = str(rest[1] if len(rest) > 1 else rest)
        for window in tuple(opened):
            window._connection_lost(why)
        inner_disconnect(c, userdata, *rest)

    paho.on_publish = on_publish
    paho.on_disconnect = on_disconnect
    paho._shoed_lane = DirectLane.install(paho, opened)
    return opened


class DirectLane:
    """QoS 1 PUBLISH packets of the windows of one paho client, written without paho's
    per-message objects (module docstring). Used on the event loop's thread only, as
    aiomqtt drives paho there."""

    def __init__(self, paho: Any, windows: set[PublishWindow]) -> None:
        self.paho = paho
        self.windows = windows
        self.mids: set[int] = set()  # sent here, PUBACK not yet received
        self.v5 = paho._protocol == MQTTProtocolVersion.MQTTv5
        self._topics: dict[str, bytes] = {}  # topic -> its length-prefixed UTF-8
        self._handle_puback = paho._handle_pubackcomp
        self._thread = threading.get_ident()

    @classmethod
    def install(cls, paho: Any, windows: set[PublishWindow]) -> DirectLane | None:
        """On a paho client that has the parts the lane stands on (paho-mqtt 2.2's), on
        the loop's thread; None (paho publishes as before) otherwise."""
        needed = ("_handle_pubackcomp", "_packet_queue", "_mid_generate", "_out_packet",
                  "_out_messages", "_sock_send", "_in_packet", "_protocol",
                  "_pack_remaining_length")
        if not acks.DECODER or not all(hasattr(paho, name) for name in needed):
            return None
        lane = cls(paho, windows)
        paho._handle_pubackcomp = lane._on_pubackcomp
        return lane

    def publish(self, topic: str, payload: str | bytes, properties: Properties | None,
                retain: bool) -> int:
        """Send one QoS 1 message; its packet id (its PUBACK goes to the windows)."""
        paho = self.paho
        if paho._sock is None:
            raise BrokerError(f"could not publish on {topic}: not connected")
        head = self._topics.get(topic)
        if head is None:
            encoded = topic.encode()
            head = self._topics[topic] = struct.pack("!H", len(encoded)) + encoded
        body = payload.encode() if isinstance(payload, str) else bytes(payload)
        props = b""
        if self.v5:  # the daemon's are inbox.PackedOnce: packed at their first publish
            props = b"\x00" if properties is None else \
                bytes(properties.pack())  # type: ignore[no-untyped-call]
        mid: int = paho._mid_generate()
        while mid in self.mids or mid in paho._out_messages:  # still in flight: skip it
            mid = paho._mid_generate()
        remaining = len(head) + 2 + len(props) + len(body)
        if remaining > MAX_REMAINING:
            raise ValueError(f"a message on {topic} is too large for MQTT "
                             f"({remaining} bytes)")
        packet = paho._pack_remaining_length(bytearray((PUBLISH_QOS1 | retain,)), remaining)
        packet += head
        packet += struct.pack("!H", mid)
        packet += props
        packet += body
        self.mids.add(mid)
        self._write(packet, mid)
        return mid

    def _write(self, packet: bytearray, mid: int) -> None:
        """At once when nothing of paho's waits to go out before it (on the loop's
        thread), else behind paho's packets; what the socket does not take, and any
        failure, is left to paho's writer, which reports a lost connection as always."""
        paho = self.paho
        sent = 0
        if not paho._out_packet and threading.get_ident() == self._thread:
            try:
                sent = paho._sock_send(packet)
            except (OSError, ValueError, AttributeError):  # BlockingIOError is one
                sent = 0  # paho's writer tries it again, and reports a failure
            else:
                paho._last_msg_out = time.monotonic()  # paho's keepalive clock
        if sent < len(packet):
            paho._packet_queue(PUBLISH_QOS1, packet[sent:], mid, 1)

    def _on_pubackcomp(self, cmd: str) -> Any:
        """paho's PUBACK/PUBCOMP handler, in front: a PUBACK of ours goes to the
        windows; anything else (paho's own messages, PUBCOMP) to paho."""
        if cmd == "PUBACK" and self.mids:
            in_packet = self.paho._in_packet
            mid, reason = puback_of(in_packet["command"], in_packet["packet"],
                                    self.paho._protocol)
            if self.acked(mid, reason):
                return MQTT_ERR_SUCCESS
        return self._handle_puback(cmd)

    def acked(self, mid: int, reason: ReasonCode = SUCCESS) -> bool:
        """A PUBACK came for `mid` (with `reason`): True if it was one of ours (its
        windows are told)."""
        if mid not in self.mids:
            return False
        self.mids.discard(mid)
        for window in tuple(self.windows):
            window._acked(mid, reason)
        return True

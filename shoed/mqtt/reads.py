"""Read what the broker sent in one recv(2), not one per byte of a packet's header.

paho-mqtt reads a packet in three steps: ``recv(1)`` for its type, ``recv(1)`` for each
byte of its remaining length, ``recv(n)`` for the rest. A PUBACK is four bytes and costs
three system calls; a card brings two of them (its event's and its retained `state`'s),
so six of the daemon's ~40 system calls a card were these reads (``strace -c``,
docs/performance.md, "Ninth pass").

:func:`read_buffered` gives a connected client's paho a ``_sock_recv`` that takes
whatever the socket holds (up to READ_SIZE) in one call and serves paho's small reads
from it. What paho does with the bytes is unchanged: the same packets, decoded by the
same code, in the same order. Since bytes can now wait in that buffer where the event
loop cannot see them, the client's ``loop_read`` goes on reading packets until the
buffer is empty before it returns (as aiomqtt already does for an SSL socket's pending
bytes). A refill goes through paho's own ``_sock_recv``, so a TLS socket's want-read /
want-write and a closed connection are reported as paho always reported them. The
buffer belongs to the socket it was filled from: a client whose socket changed reads
from the new socket directly.

The PUBACKs of the live publisher's and a replay's messages (``shoed.mqtt.window``'s
lane) are most of what the broker sends: a plain one (``0x40 0x02`` and the packet id,
MQTT 3.1.1 section 3.4, MQTT 5 section 3.4.2.1: success, no properties) of a packet id
the lane awaits is taken straight from the buffer when paho is about to read a new
packet, without paho's three reads, its packet dict and its handler. Anything else (a
PUBACK with a reason code or properties, one of paho's own messages, any other packet)
stops that and is left to paho, in order.
"""

from __future__ import annotations

import time
from typing import Any

import aiomqtt

READ_SIZE = 4096  # at most this much is taken from the socket at once (or what paho asks)


class _Buffered:
    """The bytes read from `sock` and not yet handed to paho."""

    __slots__ = ("data", "pos", "sock")

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.data = b""
        self.pos = 0

    def __bool__(self) -> bool:
        return self.pos < len(self.data)


def read_buffered(client: aiomqtt.Client) -> bool:
    """Install the buffered read on `client` (connected, on the loop's thread, before
    :func:`shoed.mqtt.writes.ack_at_once`, so the quick ACK follows the whole read).
    True if installed; False when there is no socket yet or paho lacks the hooks."""
    paho: Any = client._client
    sock = paho.socket()
    original = getattr(paho, "_sock_recv", None)
    read = getattr(paho, "loop_read", None)
    if sock is None or original is None or read is None:
        return False
    if getattr(original, "_shoed_buffered", False):
        return True
    held = _Buffered(sock)
    # paho 2.2's packet being read (a dict, replaced for each packet); without it, no
    # PUBACK is taken here (the lane's are then taken by its handler, after paho's read)
    fast = isinstance(getattr(paho, "_in_packet", None), dict)

    def take_acks(lane: Any) -> bool:
        """The lane's plain PUBACKs at the front of the buffer (filled from the socket
        when empty; raises as paho's read of a packet's first byte does), taken. False:
        the connection closed. Raises BlockingIOError when they were all it held: paho
        then ends this read as when the socket has nothing more (if it has, the event
        loop sees it readable, and calls the read again, without a recv that fails)."""
        if not held:
            if paho._sock is not held.sock:
                return True
            data = bytes(original(READ_SIZE))
            if not data:
                return False
            held.data, held.pos = data, 0
        data, pos, end = held.data, held.pos, len(held.data)
        start = pos
        while pos + 4 <= end and data[pos] == 0x40 and data[pos + 1] == 0x02 and \
                lane.take(data[pos + 2] << 8 | data[pos + 3]):
            pos += 4
        held.pos = pos
        if pos == start:
            return True
        paho._last_bytes_received = time.monotonic()  # as paho's read of a packet
        if not held:
            raise BlockingIOError  # all taken: paho's read ends (MQTT_ERR_AGAIN)
        return True

    def sock_recv(bufsize: int) -> bytes:
        if fast and bufsize == 1 and paho._in_packet["command"] == 0:  # a packet's first
            lane = paho.__dict__.get("_shoed_lane")
            if lane is not None and lane.mids and not take_acks(lane):
                return b""  # closed: paho reports the lost connection
        if held:
            start = held.pos
            held.pos = end = min(start + bufsize, len(held.data))
            return held.data[start:end]
        if paho._sock is not held.sock:
            return bytes(original(bufsize))  # another socket: nothing of ours is in it
        data = bytes(original(max(bufsize, READ_SIZE)))  # raises as paho's own read does
        if len(data) <= bufsize:
            return data  # all of it asked for (or b"": the connection closed)
        held.data, held.pos = data, bufsize
        return data[:bufsize]

    def loop_read(max_packets: int = 1) -> Any:
        rc = read(max_packets)
        # Bytes of ours the loop cannot see: read on while the connection is good.
        while held and rc == 0 and paho._sock is held.sock:
            rc = read(max_packets)
        return rc

    sock_recv._shoed_buffered = True  # type: ignore[attr-defined]
    paho._sock_recv = sock_recv
    paho.loop_read = loop_read
    return True

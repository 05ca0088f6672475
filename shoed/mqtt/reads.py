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
"""

from __future__ import annotations

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

    def sock_recv(bufsize: int) -> bytes:
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

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

While a message of the window's lane (shoed/mqtt/window.py) awaits its PUBACK, what the
socket brings is nearly always that PUBACK alone: four or five bytes. Then the read
takes the plain PUBACKs of the lane's packet ids from the front of what one recv(2)
brought (:func:`take_pubacks`: acks.py's test of "plain") and tells the lane, without
paho's three small reads, its packet dict and its dispatch, and sets paho's keepalive
clock as its own read does; what follows them (anything else: a command, a PUBACK of
paho's own message or with a failure reason, a packet split across arrivals) stays in
the buffer for paho, whole and in order. A recv that raises is handed to paho's next
read unchanged, so a lost connection is reported as always (docs/performance.md,
"Seventeenth pass").
"""

from __future__ import annotations

import time
from typing import Any

import aiomqtt

from shoed.mqtt.acks import plain_puback

PUBACK = 0x40  # an MQTT PUBACK's first byte (its type; no flags)
READ_SIZE = 4096  # at most this much is taken from the socket at once (or what paho asks)


class _Buffered:
    """The bytes read from `sock` and not yet handed to paho; or what the socket's last
    read raised, for paho to be given on its next read (the fast path's read)."""

    __slots__ = ("data", "error", "pos", "sock")

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.data = b""
        self.pos = 0
        self.error: BaseException | None = None

    def __bool__(self) -> bool:
        return self.pos < len(self.data) or self.error is not None


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
    # The parts of paho the fast read of a window's PUBACKs stands on (beside the lane's
    # own, which window.DirectLane.install looks for): without them paho reads them all.
    fast = all(hasattr(paho, name) for name in (
        "_in_packet", "_protocol", "_msgtime_mutex", "_last_bytes_received"))

    def sock_recv(bufsize: int) -> bytes:
        if held.error is not None:
            error, held.error = held.error, None
            raise error
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
        lane = paho.__dict__.get("_shoed_lane") if fast else None
        if lane is not None and lane.mids and not held and paho._sock is held.sock \
                and paho._in_packet["command"] == 0:
            # A window's message awaits its PUBACK: what came is most likely that PUBACK
            # alone, taken here without paho's reading of it (module docstring).
            try:
                data = bytes(original(READ_SIZE))
            except BlockingIOError:
                return 0  # nothing there after all: paho's answer to it
            except Exception as error:  # paho's read below meets it
                held.error = error
            else:  # b"" (closed): paho's read below reads it again from the socket
                held.data, held.pos = data, 0
                if data and take_pubacks(held, lane, paho):
                    return 0
        rc = read(max_packets)
        # Bytes of ours the loop cannot see: read on while the connection is good.
        while held and rc == 0 and paho._sock is held.sock:
            rc = read(max_packets)
        return rc

    sock_recv._shoed_buffered = True  # type: ignore[attr-defined]
    paho._sock_recv = sock_recv
    paho.loop_read = loop_read
    return True


def take_pubacks(held: _Buffered, lane: Any, paho: Any) -> bool:
    """Take the plain PUBACKs of the lane's messages from the front of what was read
    (`held`); True when that was all of it. The rest is left for paho to read."""
    data, pos, size = held.data, held.pos, len(held.data)
    protocol = paho._protocol
    taken = False
    while size - pos >= 4 and data[pos] == PUBACK and data[pos + 1] <= 4:
        end = pos + 2 + data[pos + 1]
        if end > size:
            break
        plain = plain_puback(data[pos + 2:end], protocol)
        if plain is None or not lane.acked(plain[0]):
            break
        # Taken: gone from the buffer at once, so paho never reads it a second time even
        # if a later one's acking raises.
        held.pos = pos = end
        taken = True
    if taken:
        with paho._msgtime_mutex:  # paho's keepalive clock, as its own read sets it
            paho._last_bytes_received = time.monotonic()
    return pos == size

"""Send MQTT packets when paho queues them, not two event-loop turns later.

aiomqtt drives paho-mqtt from the asyncio loop: when paho has a packet to send it asks
for a writer (``on_socket_register_write``), and aiomqtt answers with
``loop.call_soon_threadsafe(loop.add_writer, ...)`` (it may be called from the connect
thread). A publish then waits one loop turn for the writer to be added and another for
the socket to be reported writable before its first byte leaves: 0.31 ms at p50 on the
table PC, a fifth of shoed's card-to-event time above the floor's (docs/performance.md).

:func:`send_when_queued` wraps those two callbacks on a connected client. On the loop's
own thread the packet is written at once, which is what paho itself does when it has no
external loop. Only what the socket does not take (a full send buffer), a call from
another thread, or a write that fails falls through to aiomqtt's writer, which then
sends the rest in order and reports a broken connection as it always does.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

import aiomqtt


def send_when_queued(client: aiomqtt.Client) -> None:
    """Install the immediate write on `client`, once, after it connected (inside
    ``async with``, on the loop's thread)."""
    # aiomqtt keeps its paho client private and documents no hook for this; these are
    # paho's public callbacks, wrapped, not replaced (docs/decisions.md, item 30).
    paho = client._client
    register_writer = paho.on_socket_register_write
    unregister_writer = paho.on_socket_unregister_write
    if register_writer is None or unregister_writer is None:
        return  # not driven by an external loop: paho writes at once by itself
    loop_thread = threading.get_ident()
    writing = False  # a write now is in progress (paho calls back from inside it)
    writer_added = False  # aiomqtt's writer was asked for and not yet given back

    def on_register_write(paho_client: Any, userdata: Any, sock: Any) -> None:
        nonlocal writing, writer_added
        if not writing and threading.get_ident() == loop_thread:
            writing = True
            try:
                paho_client.loop_write()
            except Exception:  # aiomqtt's writer tries again and reports the failure
                pass
            finally:
                writing = False
            if paho_client.socket() is None:
                return  # the write found the connection lost; paho has reported it
            if not paho_client.want_write():
                return  # all sent; paho has already marked the writer unneeded
        writer_added = True
        register_writer(paho_client, userdata, sock)

    def on_unregister_write(paho_client: Any, userdata: Any, sock: Any) -> None:
        nonlocal writer_added
        if writer_added:
            writer_added = False
            unregister_writer(paho_client, userdata, sock)

    paho.on_socket_register_write = on_register_write
    paho.on_socket_unregister_write = on_unregister_write


QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)  # Linux
PUBACK = 0x40  # an MQTT PUBACK's packet type (its first byte's high half)


def ack_at_once(client: aiomqtt.Client) -> bool:
    """After a read from the broker that needs it, our TCP ACK for it leaves at once
    (Linux ``TCP_QUICKACK``, which the kernel drops again by itself, so it is set after
    each such read). A broker without TCP_NODELAY (Mosquitto's default) holds its next
    small packet until the one before is acknowledged, and a delayed ACK waits up to
    40 ms: a command's PUBLISH to the daemon, not answered at once (a `replay` is
    answered after its events), held the PUBACK of a retained snapshot, and with it the
    next card's event, ~20 ms (docs/performance.md, "A big replay").

    Needed after a read that brought anything but a PUBACK (a command, a SUBACK, a
    PINGRESP), or while something of ours still awaits its PUBACK (the broker's next
    packet is then on its way). Not after the PUBACK of the last message in flight:
    the broker then sends nothing until our next packet, which carries the ACK (a card's
    event after its `state`'s PUBACK), or the kernel's delayed ACK leaves by itself. A
    card's two PUBACKs thus cost no setsockopt and no ACK segment of their own
    (docs/performance.md, "Thirteenth pass"; decisions.md 148). A paho without the
    parts this looks at gets the quick ACK after every read, as before. True if
    installed (after the connect, on the loop's thread)."""
    paho: Any = client._client
    sock = paho.socket()
    if QUICKACK is None or not hasattr(sock, "setsockopt"):
        return False  # not Linux, or not a TCP socket (none yet, or a websocket's)
    read = paho.loop_read
    handle: Any = getattr(paho, "_packet_handle", None)
    watched = handle is not None and hasattr(paho, "_in_packet") \
        and isinstance(getattr(paho, "_out_messages", None), dict)
    other = True  # a packet other than a PUBACK was read since the last quick ACK

    def packet_handle() -> Any:
        nonlocal other
        if paho._in_packet["command"] & 0xF0 != PUBACK:
            other = True
        return handle()

    def loop_read(max_packets: int = 1) -> Any:
        nonlocal other
        rc = read(max_packets)
        if other or not watched or paho._out_messages or _lane_awaits(paho):
            other = False
            # closed meanwhile: paho reports the lost connection itself
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, QUICKACK, 1)
        return rc

    if watched:
        paho._packet_handle = packet_handle
    paho.loop_read = loop_read
    return True


def _lane_awaits(paho: Any) -> bool:
    """A window's message (shoed.mqtt.window's lane) still awaits its PUBACK."""
    lane = paho.__dict__.get("_shoed_lane")
    return lane is not None and bool(lane.mids)

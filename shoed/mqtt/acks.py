"""A plain PUBACK decoded without building paho's objects for it.

paho-mqtt (2.2) decodes every PUBACK into a new ``ReasonCode`` (twice under MQTT 5,
each copying its table of 45 names) and a new ``Properties``, which nobody on this
connection reads: the live publisher and a replay count PUBACKs by packet id
(window.py), aiomqtt resolves its futures by packet id. In a profile of a card's path
that was 12 % of the daemon's Python time (docs/performance.md, "Round two").

Nearly every PUBACK a broker sends is plain: the packet id alone (success, no
properties: MQTT 5 section 3.4.2.1, and every MQTT 3.1.1 PUBACK), or with reason 0x00
and an empty property length, or under MQTT 5 with reason 0x10, "No matching
subscribers", a success too: Mosquitto sends it for a retained `state` or `roads`
nobody is subscribed to at the moment, half the PUBACKs of a card then.
:func:`install` puts a decoder in front of paho's that answers those with one shared
``ReasonCode`` per reason and one shared empty ``Properties``; anything else (a
failure reason, properties, a malformed packet) goes to paho's own decoder, which
raises what it always raised. It replaces a function of
paho's private ``_packet`` module (docs/decisions.md, item 129): when that is not
there, or not what was tested, nothing is installed and paho decodes as before.
"""

from __future__ import annotations

from typing import Any

from paho.mqtt.enums import MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

try:
    from paho.mqtt import _packet
except ImportError:  # a paho without it (2.1): its own decoding stays
    _packet = None  # type: ignore[assignment]

# Shared by every plain PUBACK: read, never changed, by whoever gets them (aiomqtt's
# on_publish, the windows': neither looks at them).
SUCCESS = ReasonCode(PacketTypes.PUBACK)
NO_SUBSCRIBERS = ReasonCode(PacketTypes.PUBACK, identifier=0x10)
PLAIN_REASONS = {0x00: SUCCESS, 0x10: NO_SUBSCRIBERS}
NO_PROPERTIES = Properties(PacketTypes.PUBACK)  # type: ignore[no-untyped-call]


def plain_puback(packet: bytes | bytearray, protocol: int) -> tuple[int, ReasonCode] | None:
    """The packet id and reason of a plain PUBACK (`packet` is everything after the
    fixed header), or None when it is anything else."""
    size = len(packet)
    if size == 2:
        return (packet[0] << 8) | packet[1], SUCCESS
    if protocol == MQTTProtocolVersion.MQTTv5 and (size == 3 or (size == 4 and packet[3] == 0)):
        reason = PLAIN_REASONS.get(packet[2])
        if reason is not None:
            return (packet[0] << 8) | packet[1], reason
    return None


#: paho's PUBACK decoder is there (paho-mqtt 2.2's private module): puback_of can work.
DECODER = _packet is not None and hasattr(_packet, "decode_puback")


def puback_of(command: int, packet: bytes | bytearray, protocol: Any) -> tuple[int, ReasonCode]:
    """The packet id and reason of a PUBACK (`packet`: everything after the fixed header):
    a plain one read here, anything else (a failure reason: the broker refused the
    message) by paho's decoder, which raises on a malformed packet as it always did
    (only where DECODER is true)."""
    plain = plain_puback(packet, protocol)
    if plain is not None:
        return plain
    decoded = _packet.decode_puback(command, packet, protocol)
    return decoded.mid, decoded.reason


def install() -> bool:
    """Put the plain-PUBACK decoder in front of paho's (once); True if it is there."""
    if _packet is None:
        return False
    current = getattr(_packet, "decode_puback", None)
    if current is None or not hasattr(_packet, "PubackPacket"):
        return False
    if getattr(current, "_shoed_plain", False):
        return True
    paho_decode = current
    puback = _packet.PubackPacket

    def decode_puback(header: int, packet: bytes | bytearray, protocol: Any) -> Any:
        plain = plain_puback(packet, protocol)
        if plain is None:
            return paho_decode(header, packet, protocol)
        return puback(mid=plain[0], reason=plain[1], properties=NO_PROPERTIES)

    decode_puback._shoed_plain = True  # type: ignore[attr-defined]
    decode_puback.paho_decode = paho_decode  # type: ignore[attr-defined]
    _packet.decode_puback = decode_puback
    return True

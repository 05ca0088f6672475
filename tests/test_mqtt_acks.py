"""The plain-PUBACK decoder answers exactly as paho's own, for every packet."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from paho.mqtt import _packet
from paho.mqtt.enums import MQTTProtocolVersion

from shoed.mqtt import acks

PROTOCOLS = [MQTTProtocolVersion.MQTTv311, MQTTProtocolVersion.MQTTv5]
PUBACK = 0x40


def decoded(decode, packet: bytes, protocol: int):  # type: ignore[no-untyped-def]
    try:
        result = decode(PUBACK, packet, protocol)
    except Exception as error:  # what paho raises is compared
        return type(error).__name__
    return (result.mid, result.reason.packetType, result.reason.value,
            result.properties.pack())


def test_installed_once_in_front_of_paho() -> None:
    assert acks.install() and acks.install()
    assert _packet.decode_puback._shoed_plain  # type: ignore[attr-defined]
    assert not getattr(_packet.decode_puback.paho_decode, "_shoed_plain", False)  # type: ignore[attr-defined]


@given(packet=st.one_of(
    st.binary(min_size=0, max_size=8),
    st.tuples(st.binary(min_size=2, max_size=2), st.sampled_from([b"", b"\x00", b"\x00\x00",
                                                                  b"\x10", b"\x10\x00",
                                                                  b"\x10\x01", b"\x87\x00"]))
    .map(lambda parts: parts[0] + parts[1])),
    protocol=st.sampled_from(PROTOCOLS))
def test_plain_or_not_the_answer_is_pahos(packet: bytes, protocol: int) -> None:
    acks.install()
    paho_decode = _packet.decode_puback.paho_decode  # type: ignore[attr-defined]
    assert decoded(_packet.decode_puback, packet, protocol) == decoded(
        paho_decode, packet, protocol)


def test_plain_pubacks_share_one_success_and_no_properties() -> None:
    acks.install()
    for protocol, packet in [(MQTTProtocolVersion.MQTTv311, b"\x01\x02"),
                             (MQTTProtocolVersion.MQTTv5, b"\x01\x02"),
                             (MQTTProtocolVersion.MQTTv5, b"\x01\x02\x00"),
                             (MQTTProtocolVersion.MQTTv5, b"\x01\x02\x00\x00")]:
        result = _packet.decode_puback(PUBACK, packet, protocol)
        assert result.mid == 0x0102
        assert result.reason is acks.SUCCESS and result.properties is acks.NO_PROPERTIES
    # Success with nobody subscribed (a retained snapshot): shared too, with its name.
    for packet in (b"\x01\x02\x10", b"\x01\x02\x10\x00"):
        result = _packet.decode_puback(PUBACK, packet, MQTTProtocolVersion.MQTTv5)
        assert result.mid == 0x0102 and result.reason is acks.NO_SUBSCRIBERS
        assert result.reason.getName() == "No matching subscribers"
        assert result.properties is acks.NO_PROPERTIES
    # Under 3.1.1 a third byte is malformed: paho's to refuse.
    assert decoded(_packet.decode_puback, b"\x01\x02\x10",
                   MQTTProtocolVersion.MQTTv311) == "MalformedPacket"
    # A failure reason is paho's to decode: its own object, its own name.
    failed = _packet.decode_puback(PUBACK, b"\x00\x07\x87", MQTTProtocolVersion.MQTTv5)
    assert failed.reason is not acks.SUCCESS and failed.reason.getName() == "Not authorized"


@given(packet=st.one_of(
    st.binary(min_size=0, max_size=8),
    st.tuples(st.binary(min_size=2, max_size=2), st.sampled_from([b"", b"\x00", b"\x10",
                                                                  b"\x87\x00", b"\x10\x01"]))
    .map(lambda parts: parts[0] + parts[1])),
    protocol=st.sampled_from(PROTOCOLS))
def test_puback_of_is_pahos_mid_and_reason_or_pahos_error(packet: bytes, protocol: int
                                                          ) -> None:
    """The direct lane's PUBACKs (window.py): the packet id and reason paho would read
    (a failure reason too: the window refuses to count that message), or what paho's
    decoder raises for a malformed packet."""
    acks.install()
    paho_decode = _packet.decode_puback.paho_decode  # type: ignore[attr-defined]
    expected = decoded(paho_decode, packet, protocol)
    try:
        mid, reason = acks.puback_of(PUBACK, packet, protocol)
    except Exception as error:
        assert expected == type(error).__name__
    else:
        assert isinstance(expected, tuple) and mid == expected[0]
        assert reason.value == expected[2]

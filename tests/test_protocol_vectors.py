"""Every vector of protocol-vectors.json, through framing, messages and the decoder."""

from __future__ import annotations

import pytest

from firmware_protocol import (
    Card,
    Discarded,
    Link,
    MessageReceived,
    ProtocolMismatch,
    Role,
    StreamDecoder,
    Unsupported,
    crc16,
    decode_message,
    encode_payload,
    parse_frame,
)
from firmware_protocol.framing import RawFrame, build_frame
from firmware_protocol.messages import KNOWN_TYPES, OpticalCode, RfidCode, UnidentifiedCode


def test_crc_check_value(vectors: dict) -> None:
    check = vectors["crc16_check"]
    assert crc16(check["input_ascii"].encode()) == int(check["crc"], 16)


def _valid(vectors: dict) -> list[dict]:
    return vectors["valid_frames"]


@pytest.mark.parametrize("index", range(20))
def test_valid_frame_decodes_and_reencodes(vectors: dict, index: int) -> None:
    frames = _valid(vectors)
    if index >= len(frames):
        pytest.skip("fewer vectors")
    vector = frames[index]
    encoded = bytes.fromhex(vector["encoded_hex"])
    frame = parse_frame(encoded[:-1], KNOWN_TYPES)
    assert frame.type_code == vector["type"]
    assert frame.seq == vector["seq"]
    assert frame.payload.hex() == vector["payload_hex"]
    message = decode_message(frame.type_code, frame.payload)
    fields = dict(vector["fields"])
    expected_card = fields.pop("card", "absent")
    code_hex = fields.pop("code_hex", None)
    for name, value in fields.items():
        assert getattr(message, name) == value, name
    if code_hex is not None:
        assert isinstance(message, Card)
        assert message.code.hex() == code_hex
        identity = message.identity
        if expected_card is None:
            assert isinstance(identity, UnidentifiedCode)
            assert message.payload_problem
        elif expected_card != "absent":
            assert isinstance(identity, OpticalCode)
            assert identity.notation == expected_card
        else:
            assert isinstance(identity, RfidCode)
            assert identity.uid.hex() == code_hex
    assert build_frame(frame.type_code, frame.seq, encode_payload(message)) == encoded


def test_vector_count_is_covered(vectors: dict) -> None:
    assert len(_valid(vectors)) <= 20


@pytest.mark.parametrize("index", range(6))
def test_invalid_frame_gives_listed_nak(vectors: dict, index: int) -> None:
    vector = vectors["invalid_frames"][index]
    results = StreamDecoder().feed(bytes.fromhex(vector["encoded_hex"]))
    assert len(results) == 1
    result = results[0]
    if vector["nak_reason"] == 3:
        assert isinstance(result, Unsupported)
    else:
        assert isinstance(result, Discarded)
        assert result.nak_reason == vector["nak_reason"]


def test_invalid_frames_make_the_host_link_nak(vectors: dict) -> None:
    for vector in vectors["invalid_frames"]:
        link = Link(Role.HOST, 0.0)
        link.receive_data(bytes.fromhex(vector["encoded_hex"]), 0.0)
        out = StreamDecoder().feed(link.data_to_send())
        assert len(out) == 1 and isinstance(out[0], RawFrame)
        nak = decode_message(out[0].type_code, out[0].payload)
        assert getattr(nak, "reason", None) == vector["nak_reason"], vector["name"]


def test_stream_resync_yields_exactly_what_it_says(vectors: dict) -> None:
    stream = bytes.fromhex(vectors["stream_resync"]["hex"])
    decoder = StreamDecoder()
    results = decoder.feed(stream)
    kinds = [
        (r.reason, r.nak_reason) if isinstance(r, Discarded) else ("frame", r.type_code, r.seq)
        for r in results
        if not isinstance(r, Unsupported)
    ]
    assert kinds == [
        ("malformed", 2),
        ("frame", 0x02, 10),
        ("oversize", 2),
        ("frame", 0x10, 9),
    ]
    assert decoder.discards["empty"] == 1
    assert decoder.buffered == 0


def test_stream_resync_byte_by_byte(vectors: dict) -> None:
    stream = bytes.fromhex(vectors["stream_resync"]["hex"])
    whole = StreamDecoder().feed(stream)
    decoder = StreamDecoder()
    piecewise = [r for b in stream for r in decoder.feed(bytes([b]))]
    assert piecewise == whole


def test_unknown_type_is_accepted_seq_on_host(vectors: dict) -> None:
    bad_type = next(v for v in vectors["invalid_frames"] if "0x55" in v["name"])
    link = Link(Role.HOST, 0.0)
    link.receive_data(bytes.fromhex(bad_type["encoded_hex"]), 0.0)
    event = link.next_event()
    assert isinstance(event, ProtocolMismatch)
    assert event.type_code == 0x55
    # The sender's next frame (seq + 1) shows no gap.
    link.receive_data(build_frame(0x02, event.seq + 1, b"\x00" * 6), 0.1)
    received = link.next_event()
    assert isinstance(received, MessageReceived)
    assert received.gap == 0


def test_nak_reasons_are_the_enum() -> None:
    """Every refusal carries a NakReason member, never a bare number."""
    from firmware_protocol import NakReason

    frame = bytearray(build_frame(0x02, 1, bytes(6)))
    frame[3] ^= 0xFF  # breaks the CRC
    results = StreamDecoder().feed(bytes(frame) + b"\x01\x00" + b"\x05" * 400 + b"\x00")
    reasons = [r.nak_reason for r in results if isinstance(r, Discarded)]
    assert reasons and all(isinstance(r, NakReason) for r in reasons), reasons
    assert NakReason.CRC_ERROR in reasons and NakReason.MALFORMED in reasons


@pytest.mark.parametrize("crc_good, reason", [(False, 1), (True, 2)])
def test_a_payload_over_255_bytes_is_checked_after_the_crc(crc_good: bool, reason: int) -> None:
    """Section 2's order (COBS, size >= 8, size = 8+N, CRC, version, type) decides the
    NAK: a frame with N = 256 and a bad CRC is reason 1 (outside review: it was 2); with
    a good CRC it breaks "maximum payload N is 255", a size fault: reason 2."""
    import struct

    from firmware_protocol.framing import cobs_encode

    body = struct.pack("<BBHH", 1, 0x01, 7, 256) + bytes(256)
    crc = crc16(body) ^ (0 if crc_good else 0xFFFF)
    encoded = cobs_encode(body + struct.pack("<H", crc)) + b"\x00"
    assert len(encoded) - 1 <= 300  # within the encoded frame's limit
    (result,) = StreamDecoder().feed(encoded)
    assert isinstance(result, Discarded) and result.nak_reason == reason

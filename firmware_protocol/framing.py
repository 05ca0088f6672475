"""Framing: COBS byte stuffing, CRC-16/CCITT-FALSE and the frame header (spec section 2).

A frame on the wire is ``cobs(version, type, seq, length, payload, crc) + b"\\x00"``.
:func:`parse_frame` applies the receiver's checks in the spec's order (COBS, size >= 8,
size = 8 + N, CRC, version, type); the first failure decides the NAK reason.
"""

from __future__ import annotations

import binascii
import struct
from dataclasses import dataclass

from .errors import CobsError, EncodeError, FrameError, NakReason

PROTOCOL_VERSION = 1
HEADER = struct.Struct("<BBHH")
HEADER_SIZE = HEADER.size  # 6
CRC_SIZE = 2
MIN_FRAME = HEADER_SIZE + CRC_SIZE  # 8
MAX_PAYLOAD = 255
MAX_ENCODED = 300
DELIMITER = b"\x00"


def crc16(data: bytes) -> int:
    """CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, no reflection, xorout 0)."""
    return binascii.crc_hqx(data, 0xFFFF)


def cobs_encode(data: bytes) -> bytes:
    """COBS-encode `data` (no delimiter). A final full 254-byte block gets no extra code."""
    out = bytearray()
    index = 0
    length = len(data)
    while True:
        limit = min(index + 254, length)
        zero = data.find(0, index, limit)
        if zero == -1:
            run = data[index:limit]
            out.append(len(run) + 1)
            out += run
            index = limit
            if index == length:
                return bytes(out)
            # A full 254-byte run implies no zero: the next block starts right here.
        else:
            out.append(zero - index + 1)
            out += data[index:zero]
            index = zero + 1
            if index == length:
                # The data ends in a zero: one empty block encodes it.
                out.append(1)
                return bytes(out)


def cobs_decode(data: bytes) -> bytes:
    """Decode one COBS chunk (without its delimiter).

    Accepts a final 254-byte block with or without a trailing ``0x01`` code byte,
    as the spec requires. Raises :class:`CobsError` naming the problem.
    """
    out = bytearray()
    index = 0
    length = len(data)
    while index < length:
        code = data[index]
        if code == 0:
            raise CobsError(f"expected a non-zero COBS code byte at offset {index}, got 0x00")
        end = index + code
        if end > length:
            raise CobsError(
                f"COBS code 0x{code:02x} at offset {index} needs {code - 1} bytes, "
                f"only {length - index - 1} remain"
            )
        out += data[index + 1 : end]
        index = end
        if code != 0xFF and index < length:
            out.append(0)
    return bytes(out)


@dataclass(frozen=True, slots=True)
class RawFrame:
    """A frame that passed every framing check: its header fields and payload."""

    version: int
    type_code: int
    seq: int
    payload: bytes


def build_frame(type_code: int, seq: int, payload: bytes) -> bytes:
    """Encode a frame for the wire, delimiter included."""
    if not 0 <= type_code <= 0xFF:
        raise EncodeError(f"type must be 0..255, got {type_code}")
    if not 0 <= seq <= 0xFFFF:
        raise EncodeError(f"seq must be 0..65535, got {seq}")
    if len(payload) > MAX_PAYLOAD:
        raise EncodeError(f"payload must be at most {MAX_PAYLOAD} bytes, got {len(payload)}")
    body = HEADER.pack(PROTOCOL_VERSION, type_code, seq, len(payload)) + payload
    body += struct.pack("<H", crc16(body))
    return cobs_encode(body) + DELIMITER


def parse_frame(chunk: bytes, known_types: frozenset[int] | None = None) -> RawFrame:
    """Check one COBS chunk (delimiter stripped) and return its frame.

    Raises :class:`FrameError` with the NAK reason of the first failing check.
    `known_types` is the set of acceptable type codes (None accepts any).
    """
    if len(chunk) > MAX_ENCODED:
        raise FrameError(
            f"expected an encoded frame of at most {MAX_ENCODED} bytes, got {len(chunk)}",
            NakReason.MALFORMED,
        )
    decoded = cobs_decode(chunk)
    if len(decoded) < MIN_FRAME:
        raise FrameError(
            f"expected a decoded frame of at least {MIN_FRAME} bytes, got {len(decoded)}",
            NakReason.MALFORMED,
        )
    version, type_code, seq, length = HEADER.unpack_from(decoded)
    if len(decoded) != MIN_FRAME + length:
        raise FrameError(
            f"expected {MIN_FRAME + length} bytes for payload length {length}, "
            f"got {len(decoded)}",
            NakReason.MALFORMED,
        )
    (received_crc,) = struct.unpack_from("<H", decoded, HEADER_SIZE + length)
    computed = crc16(decoded[: HEADER_SIZE + length])
    if received_crc != computed:
        raise FrameError(
            f"expected CRC 0x{computed:04x}, got 0x{received_crc:04x}", NakReason.CRC_ERROR
        )
    if length > MAX_PAYLOAD:
        # Not in section 2's list of checks, whose order decides the NAK: a size fault
        # (reason 2), after the CRC, so a damaged frame is still reason 1.
        raise FrameError(
            f"expected a payload of at most {MAX_PAYLOAD} bytes, got {length}", NakReason.MALFORMED
        )
    if version != PROTOCOL_VERSION:
        raise UnsupportedFrame(
            f"expected protocol version {PROTOCOL_VERSION}, got {version}", seq, version, type_code
        )
    if known_types is not None and type_code not in known_types:
        raise UnsupportedFrame(
            f"expected a known message type, got 0x{type_code:02x}", seq, version, type_code
        )
    return RawFrame(version, type_code, seq, bytes(decoded[HEADER_SIZE : HEADER_SIZE + length]))


class UnsupportedFrame(FrameError):
    """Good CRC, but a version or type this side does not know (NAK reason 3)."""

    def __init__(self, message: str, seq: int, version: int, type_code: int) -> None:
        super().__init__(message, NakReason.UNSUPPORTED)
        self.seq = seq
        self.version = version
        self.type_code = type_code

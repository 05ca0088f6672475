"""Message types of spec section 4: one frozen dataclass each, one table keyed by type code.

Decoding never raises for a known type code: a payload too short to read becomes
:class:`Malformed`, and a CARD whose code cannot be read decodes with an
:class:`UnidentifiedCode` identity and a `problem` text (spec: payload problems in a frame
with a good CRC are ACKed, recorded and alarmed as `bad_payload`, never NAKed).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import ClassVar

from .errors import EncodeError, PayloadError
from .errors import NakReason as NakReason  # NAK's reason byte; defined beside FrameError

# --- enums and flags -----------------------------------------------------------------


class Capability(enum.IntFlag):
    OPTICAL_READER = 1 << 0
    RFID_READER = 1 << 1
    EXIT_GATE = 1 << 2
    INDICATOR_LIGHT = 1 << 3
    CUT_CARD_SENSOR = 1 << 4


class HeartbeatStatus(enum.IntFlag):
    CARDS_PRESENT = 1 << 0
    GATE_LOCKED = 1 << 1
    COVER_OPEN = 1 << 2


class FaultCode(enum.IntEnum):
    SENSOR_DIRTY = 1
    CARD_JAM = 2
    COVER_OPEN = 3
    READER_FAILURE = 4
    LOW_VOLTAGE = 5
    BUFFER_FULL = 6


#: What each fault is called in alarms (spec section 4's FAULT table).
FAULT_NAMES: dict[int, str] = {
    FaultCode.SENSOR_DIRTY: "sensor dirty",
    FaultCode.CARD_JAM: "card jam",
    FaultCode.COVER_OPEN: "cover open (tamper)",
    FaultCode.READER_FAILURE: "reader failure",
    FaultCode.LOW_VOLTAGE: "low voltage",
    FaultCode.BUFFER_FULL: "buffer full",
}


class IndicatorPattern(enum.IntEnum):
    OFF = 0
    BURN = 1
    PLAYER = 2
    BANKER = 3
    LAST_HAND = 4
    STOP = 5


class UnreadReason(enum.IntEnum):
    NO_CODE = 1
    CONFLICTING_CODES = 2


class CodeKind(enum.IntEnum):
    OPTICAL = 1
    RFID = 2


RANKS = "A23456789TJQK"  # index + 1 is the optical rank code
SUITS = "SHDC"  # index + 1 is the optical suit code

# --- card codes ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpticalCode:
    """An optical rank/suit code; `notation` is the two-character card (section 5)."""

    rank: int
    suit: int

    @property
    def notation(self) -> str:
        return RANKS[self.rank - 1] + SUITS[self.suit - 1]


@dataclass(frozen=True, slots=True)
class RfidCode:
    """An RFID tag UID, to be looked up in the operator's deck manifest."""

    uid: bytes

    @property
    def uid_hex(self) -> str:
        return self.uid.hex().upper()


@dataclass(frozen=True, slots=True)
class UnidentifiedCode:
    """A code that names no card: the item counts as an unread card."""

    reason: str


CardCode = OpticalCode | RfidCode | UnidentifiedCode


def decode_card_code(code_kind: int, code: bytes) -> CardCode:
    """Turn a CARD's `code_kind` and `code` into a card identity; never raises."""
    if code_kind == CodeKind.OPTICAL:
        if len(code) != 2:
            return UnidentifiedCode(f"optical code_len must be 2, got {len(code)}")
        rank, suit = code[0], code[1]
        if not 1 <= rank <= 13:
            return UnidentifiedCode(f"optical rank must be 1..13, got {rank}")
        if not 1 <= suit <= 4:
            return UnidentifiedCode(f"optical suit must be 1..4, got {suit}")
        return OpticalCode(rank, suit)
    if code_kind == CodeKind.RFID:
        if not 4 <= len(code) <= 10:
            return UnidentifiedCode(f"RFID code_len must be 4..10, got {len(code)}")
        return RfidCode(bytes(code))
    return UnidentifiedCode(f"code_kind must be 1 (optical) or 2 (RFID), got {code_kind}")


def optical_code(notation: str) -> bytes:
    """The 2-byte optical code of a card in section-5 notation (``"TD"`` -> ``0a 03``)."""
    if len(notation) != 2 or notation[0] not in RANKS or notation[1] not in SUITS:
        raise EncodeError(
            f"expected a card like 'TD' (rank A23456789TJQK, suit SHDC), got {notation!r}"
        )
    return bytes([RANKS.index(notation[0]) + 1, SUITS.index(notation[1]) + 1])


# --- messages --------------------------------------------------------------------------

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32_U16 = struct.Struct("<IH")
_U32 = struct.Struct("<I")
_PULL = struct.Struct("<IHHBB")  # uptime, card_index, pull_id, pull_pos, pull_size
_CUT = struct.Struct("<IHBB")
_FAULT = struct.Struct("<IHB")
_HELLO_HEAD = struct.Struct("<BIH")


def _need(payload: bytes, size: int, what: str) -> None:
    if len(payload) < size:
        raise PayloadError(f"{what} needs at least {size} payload bytes, got {len(payload)}")


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise EncodeError(f"{name} must be {low}..{high}, got {value}")


@dataclass(frozen=True, slots=True)
class Hello:
    TYPE: ClassVar[int] = 0x01
    proto_version: int
    boot_id: int
    capabilities: int
    fw_version: str
    serial_no: str

    def encode_payload(self) -> bytes:
        fw = self.fw_version.encode("ascii")
        sn = self.serial_no.encode("ascii")
        if len(fw) + len(sn) > 246:
            raise EncodeError(
                f"HELLO strings must total at most 246 bytes, got {len(fw) + len(sn)}"
            )
        return (
            _HELLO_HEAD.pack(self.proto_version, self.boot_id, self.capabilities)
            + bytes([len(fw)]) + fw + bytes([len(sn)]) + sn
        )

    @classmethod
    def decode_payload(cls, payload: bytes) -> Hello:
        _need(payload, _HELLO_HEAD.size + 2, "HELLO")
        proto, boot_id, caps = _HELLO_HEAD.unpack_from(payload)
        offset = _HELLO_HEAD.size
        strings = []
        for name in ("fw_version", "serial_no"):
            _need(payload, offset + 1, f"HELLO {name} length")
            n = payload[offset]
            _need(payload, offset + 1 + n, f"HELLO {name}")
            strings.append(payload[offset + 1 : offset + 1 + n].decode("ascii", "replace"))
            offset += 1 + n
        return cls(proto, boot_id, caps, strings[0], strings[1])


@dataclass(frozen=True, slots=True)
class Heartbeat:
    TYPE: ClassVar[int] = 0x02
    uptime_ms: int
    status: int

    def encode_payload(self) -> bytes:
        return _U32_U16.pack(self.uptime_ms, self.status)

    @classmethod
    def decode_payload(cls, payload: bytes) -> Heartbeat:
        _need(payload, _U32_U16.size, "HEARTBEAT")
        return cls(*_U32_U16.unpack_from(payload))


@dataclass(frozen=True, slots=True)
class ShoeLoaded:
    TYPE: ClassVar[int] = 0x03
    uptime_ms: int

    def encode_payload(self) -> bytes:
        return _U32.pack(self.uptime_ms)

    @classmethod
    def decode_payload(cls, payload: bytes) -> ShoeLoaded:
        _need(payload, _U32.size, "SHOE_LOADED")
        return cls(*_U32.unpack_from(payload))


def pull_problem(pull_pos: int, pull_size: int) -> str | None:
    """Why a pull's fields are out of range (spec section 4), or None when they are fine."""
    if not 1 <= pull_size <= 3:
        return f"pull_size must be 1..3, got {pull_size}"
    if not 1 <= pull_pos <= pull_size:
        return f"pull_pos must be 1..{pull_size}, got {pull_pos}"
    return None


@dataclass(frozen=True, slots=True)
class Card:
    """A card item. `identity` is what the code names; `problem` says why it is unread."""

    TYPE: ClassVar[int] = 0x10
    uptime_ms: int
    card_index: int
    pull_id: int
    pull_pos: int
    pull_size: int
    code_kind: int
    code: bytes
    quality: int
    problem: str | None = field(default=None, compare=False)

    @property
    def identity(self) -> CardCode:
        if self.problem is not None:
            return UnidentifiedCode(self.problem)
        return decode_card_code(self.code_kind, self.code)

    @property
    def payload_problem(self) -> str | None:
        """The bad_payload reason (code or pull fields), or None for a clean item."""
        if self.problem is not None:
            return self.problem
        identity = self.identity
        if isinstance(identity, UnidentifiedCode):
            return identity.reason
        return pull_problem(self.pull_pos, self.pull_size)

    def encode_payload(self) -> bytes:
        _check_range("code length", len(self.code), 0, 255)
        return (
            _PULL.pack(self.uptime_ms, self.card_index, self.pull_id, self.pull_pos, self.pull_size)
            + bytes([self.code_kind, len(self.code)]) + self.code + bytes([self.quality])
        )

    @classmethod
    def decode_payload(cls, payload: bytes) -> Card:
        _need(payload, _PULL.size, "CARD")
        uptime, index, pull_id, pos, size = _PULL.unpack_from(payload)

        def card(kind: int, code: bytes, quality: int, problem: str | None = None) -> Card:
            return cls(uptime, index, pull_id, pos, size, kind, code, quality, problem)

        offset = _PULL.size
        if len(payload) < offset + 2:
            return card(0, b"", 0, "CARD has no code_kind/code_len")
        kind, code_len = payload[offset], payload[offset + 1]
        offset += 2
        code = bytes(payload[offset : offset + code_len])
        if len(code) < code_len:
            return card(kind, code, 0, f"code_len {code_len} runs past the payload "
                                       f"({len(code)} bytes left)")
        offset += code_len
        if len(payload) < offset + 1:
            return card(kind, code, 0, "CARD has no quality byte")
        return card(kind, code, payload[offset])


@dataclass(frozen=True, slots=True)
class CardUnread:
    TYPE: ClassVar[int] = 0x11
    uptime_ms: int
    card_index: int
    pull_id: int
    pull_pos: int
    pull_size: int
    reason: int

    @property
    def payload_problem(self) -> str | None:
        return pull_problem(self.pull_pos, self.pull_size)

    def encode_payload(self) -> bytes:
        return _PULL.pack(self.uptime_ms, self.card_index, self.pull_id, self.pull_pos,
                          self.pull_size) + bytes([self.reason])

    @classmethod
    def decode_payload(cls, payload: bytes) -> CardUnread:
        _need(payload, _PULL.size + 1, "CARD_UNREAD")
        uptime, index, pull_id, pos, size = _PULL.unpack_from(payload)
        return cls(uptime, index, pull_id, pos, size, payload[_PULL.size])


@dataclass(frozen=True, slots=True)
class CutCard:
    TYPE: ClassVar[int] = 0x12
    uptime_ms: int
    pull_id: int
    pull_pos: int
    pull_size: int

    @property
    def payload_problem(self) -> str | None:
        return pull_problem(self.pull_pos, self.pull_size)

    def encode_payload(self) -> bytes:
        return _CUT.pack(self.uptime_ms, self.pull_id, self.pull_pos, self.pull_size)

    @classmethod
    def decode_payload(cls, payload: bytes) -> CutCard:
        _need(payload, _CUT.size, "CUT_CARD")
        return cls(*_CUT.unpack_from(payload))


@dataclass(frozen=True, slots=True)
class Fault:
    TYPE: ClassVar[int] = 0x20
    uptime_ms: int
    code: int
    active: int

    def encode_payload(self) -> bytes:
        return _FAULT.pack(self.uptime_ms, self.code, self.active)

    @classmethod
    def decode_payload(cls, payload: bytes) -> Fault:
        _need(payload, _FAULT.size, "FAULT")
        return cls(*_FAULT.unpack_from(payload))


@dataclass(frozen=True, slots=True)
class GetInfo:
    TYPE: ClassVar[int] = 0x81

    def encode_payload(self) -> bytes:
        return b""

    @classmethod
    def decode_payload(cls, payload: bytes) -> GetInfo:
        return cls()


@dataclass(frozen=True, slots=True)
class SetGate:
    TYPE: ClassVar[int] = 0x82
    locked: int

    def encode_payload(self) -> bytes:
        return bytes([self.locked])

    @classmethod
    def decode_payload(cls, payload: bytes) -> SetGate:
        _need(payload, 1, "SET_GATE")
        return cls(payload[0])


@dataclass(frozen=True, slots=True)
class SetIndicator:
    TYPE: ClassVar[int] = 0x83
    pattern: int

    def encode_payload(self) -> bytes:
        return bytes([self.pattern])

    @classmethod
    def decode_payload(cls, payload: bytes) -> SetIndicator:
        _need(payload, 1, "SET_INDICATOR")
        return cls(payload[0])


@dataclass(frozen=True, slots=True)
class Ack:
    TYPE: ClassVar[int] = 0x7E
    acked_seq: int

    def encode_payload(self) -> bytes:
        return _U16.pack(self.acked_seq)

    @classmethod
    def decode_payload(cls, payload: bytes) -> Ack:
        _need(payload, 2, "ACK")
        return cls(*_U16.unpack_from(payload))


@dataclass(frozen=True, slots=True)
class Nak:
    TYPE: ClassVar[int] = 0x7F
    reason: int

    def encode_payload(self) -> bytes:
        return bytes([self.reason])

    @classmethod
    def decode_payload(cls, payload: bytes) -> Nak:
        _need(payload, 1, "NAK")
        return cls(payload[0])


@dataclass(frozen=True, slots=True)
class Malformed:
    """A known type whose payload is too short to read (spec: ACKed, alarm bad_payload)."""

    type_code: int
    payload: bytes
    problem: str

    def encode_payload(self) -> bytes:
        return self.payload


Message = (
    Hello | Heartbeat | ShoeLoaded | Card | CardUnread | CutCard | Fault
    | GetInfo | SetGate | SetIndicator | Ack | Nak | Malformed
)

#: The one schema table: type code -> message class.
MESSAGE_TYPES: dict[int, type[Message]] = {
    cls.TYPE: cls
    for cls in (Hello, Heartbeat, ShoeLoaded, Card, CardUnread, CutCard, Fault,
                GetInfo, SetGate, SetIndicator, Ack, Nak)
}
KNOWN_TYPES = frozenset(MESSAGE_TYPES)
DEVICE_TO_HOST = frozenset({0x01, 0x02, 0x03, 0x10, 0x11, 0x12, 0x20})
HOST_TO_DEVICE = frozenset({0x81, 0x82, 0x83})
LINK_CONTROL = frozenset({Ack.TYPE, Nak.TYPE})
#: Items of a pull: each takes a place in the dealing procedure.
PULL_ITEM_TYPES = frozenset({Card.TYPE, CardUnread.TYPE, CutCard.TYPE})


def type_code_of(message: Message) -> int:
    if isinstance(message, Malformed):
        return message.type_code
    return message.TYPE


def decode_message(type_code: int, payload: bytes) -> Message:
    """Decode the payload of a known type; never raises (see :class:`Malformed`)."""
    cls = MESSAGE_TYPES.get(type_code)
    if cls is None or cls is Malformed:
        return Malformed(type_code, payload, f"unknown message type 0x{type_code:02x}")
    try:
        return cls.decode_payload(payload)  # type: ignore[union-attr]
    except PayloadError as error:
        return Malformed(type_code, payload, str(error))


def encode_payload(message: Message) -> bytes:
    """The payload bytes of a message; raises :class:`EncodeError` if a field does not fit."""
    try:
        return message.encode_payload()
    except (struct.error, ValueError, OverflowError) as error:
        # struct's ranges, bytes([n]) of a u8 out of range, a non-ASCII HELLO string
        # (UnicodeEncodeError is a ValueError): all a field that does not fit
        raise EncodeError(f"{type(message).__name__}: {error}") from error

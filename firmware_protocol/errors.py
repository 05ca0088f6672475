"""The one exception tree of firmware_protocol.

Every error names what was expected and what was found. Nothing in the receive path
raises these out to the caller: the decoder and the link turn them into counted
discards, NAKs and events. They surface only from explicit encode/decode calls.
"""

from __future__ import annotations

import enum


class NakReason(enum.IntEnum):
    """The reason byte of a NAK (spec section 3): what a refused frame is answered with."""

    CRC_ERROR = 1
    MALFORMED = 2
    UNSUPPORTED = 3


class ProtocolError(Exception):
    """Base of every error raised by firmware_protocol."""


class FrameError(ProtocolError):
    """A frame that cannot be accepted; `nak_reason` is what the receiver answers."""

    def __init__(self, message: str, nak_reason: NakReason) -> None:
        super().__init__(message)
        self.nak_reason = nak_reason


class CobsError(FrameError):
    """The COBS encoding is broken (a code byte runs past the end, a zero inside)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, nak_reason=NakReason.MALFORMED)


class PayloadError(ProtocolError):
    """A payload that cannot be read or built for its message type."""


class EncodeError(ProtocolError):
    """A message whose fields do not fit the wire format."""


class LinkError(ProtocolError):
    """Misuse of the link layer (acknowledging a frame that was never delivered, ...)."""


class BufferFull(LinkError):
    """The device role's 64-frame buffer has no free slot for this message."""

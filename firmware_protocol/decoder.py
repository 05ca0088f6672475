"""Stream decoder: bytes in any chunking -> frames in order, never raising.

Invariants:
- the buffer never holds more than ``MAX_ENCODED`` bytes: past that the decoder
  discards up to the next delimiter and reports one oversize discard (one NAK 2);
- every discarded chunk is counted by reason in :attr:`StreamDecoder.discards`;
- synchronisation is regained at the next ``0x00`` whatever came before.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .errors import FrameError, NakReason
from .framing import MAX_ENCODED, RawFrame, UnsupportedFrame, parse_frame
from .messages import KNOWN_TYPES


@dataclass(frozen=True, slots=True)
class Discarded:
    """A chunk that was not a frame. `nak_reason` is what to answer (None: answer nothing)."""

    reason: str
    detail: str
    nak_reason: NakReason | None


@dataclass(frozen=True, slots=True)
class Unsupported:
    """Good CRC, unknown version or type: NAK 3, yet its `seq` counts as accepted."""

    seq: int
    version: int
    type_code: int
    detail: str
    frame: bytes = b""  # as received (COBS, no delimiter): a retransmission is this again


DecodeResult = RawFrame | Discarded | Unsupported


class StreamDecoder:
    """Incremental COBS frame splitter with bounded memory."""

    def __init__(self, known_types: frozenset[int] = KNOWN_TYPES) -> None:
        self._buffer = bytearray()
        self._overflowing = False
        self._known_types = known_types
        self.discards: Counter[str] = Counter()
        self.frames = 0

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def reset(self) -> None:
        """Forget a partial frame (the line it came from is gone); the counts stay."""
        self._buffer.clear()
        self._overflowing = False

    def feed(self, data: bytes) -> list[DecodeResult]:
        """Consume `data`; return what it completed, in order."""
        results: list[DecodeResult] = []
        start = 0
        while start < len(data):
            zero = data.find(0, start)
            if zero == -1:
                self._append(data[start:], results)
                break
            self._append(data[start:zero], results)
            self._end_chunk(results)
            start = zero + 1
        return results

    def _append(self, piece: bytes, results: list[DecodeResult]) -> None:
        if self._overflowing:
            return
        room = MAX_ENCODED - len(self._buffer)
        if len(piece) > room:
            self._buffer.clear()
            self._overflowing = True
            self._discard(
                results, "oversize", f"more than {MAX_ENCODED} bytes without a delimiter",
                NakReason.MALFORMED,
            )
            return
        self._buffer += piece

    def _end_chunk(self, results: list[DecodeResult]) -> None:
        if self._overflowing:
            self._overflowing = False
            return
        if not self._buffer:
            self.discards["empty"] += 1  # two delimiters in a row: ignored silently
            return
        chunk = bytes(self._buffer)
        self._buffer.clear()
        try:
            frame = parse_frame(chunk, self._known_types)
        except UnsupportedFrame as error:
            self.discards["unsupported"] += 1
            results.append(Unsupported(error.seq, error.version, error.type_code, str(error),
                                           chunk))
            return
        except FrameError as error:
            reason = "crc" if error.nak_reason is NakReason.CRC_ERROR else "malformed"
            self._discard(results, reason, str(error), error.nak_reason)
            return
        self.frames += 1
        results.append(frame)

    def _discard(self, results: list[DecodeResult], reason: str, detail: str,
                 nak: NakReason) -> None:
        self.discards[reason] += 1
        results.append(Discarded(reason, detail, nak))

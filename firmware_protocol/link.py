"""Link layer (spec section 3), usable in both roles, with time passed in.

Drive it like h11/aioquic: feed bytes with :meth:`Link.receive_data`, queue messages
with :meth:`Link.send`, write out :meth:`Link.data_to_send`, drain
:meth:`Link.next_event`, and call :meth:`Link.handle_timer` at :meth:`Link.get_timer`.

Invariants:
- at most one own frame is in flight (stop-and-wait); the next one goes out only after
  the ACK whose `acked_seq` equals the in-flight `seq`;
- own `seq` starts at 0 and wraps 65535 -> 0; ACK/NAK carry seq 0 and are never queued;
- a retransmission is the same bytes: every 250 ms for 2 s, then every 1 s; a NAK CRC_ERROR or
  MALFORMED retransmits at once at most 3 times per frame, a NAK UNSUPPORTED drops the frame;
- host role: a device frame is delivered once. It is ACKed only when the caller says its
  effect is durable (:meth:`Link.ack`, in delivery order); a copy arriving before that
  gets no ACK, a copy of the last accepted frame of the same boot is ACKed again and
  not delivered (a byte-identical copy of a frame of an unknown type too: NAKed 3 once,
  reported once);
  :meth:`Link.refuse` forgets an unrecorded frame (and any after it);
- device role: every host frame is executed (delivered) and ACKed, duplicates included;
- the decoder and the link never raise out of :meth:`receive_data`.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass

from .decoder import Discarded, StreamDecoder, Unsupported
from .errors import BufferFull, LinkError, NakReason
from .framing import build_frame
from .messages import (
    DEVICE_TO_HOST,
    HOST_TO_DEVICE,
    LINK_CONTROL,
    Ack,
    Hello,
    Message,
    Nak,
    decode_message,
    encode_payload,
    type_code_of,
)

SEQ_MODULO = 65536
RETRY_FAST_S = 0.25
FAST_PHASE_S = 2.0
RETRY_SLOW_S = 1.0
NAK_RETRIES = 3
#: A NAK for these asks for the same bytes again; UNSUPPORTED drops the frame.
RETRY_REASONS = frozenset({NakReason.CRC_ERROR, NakReason.MALFORMED})
LIVENESS_S = 5.0
DEVICE_BUFFER = 64


class Role(enum.Enum):
    HOST = "host"
    DEVICE = "device"


@dataclass(frozen=True, slots=True)
class DedupState:
    """What the host must persist to keep duplicate detection across restarts."""

    boot_id: int | None = None
    last_seq: int | None = None


@dataclass(frozen=True, slots=True)
class MessageReceived:
    """A new frame from the peer. Host role: record it with `dedup_after`, then ack(seq).

    `gap` counts frames lost before this one within the same boot (0: none).
    """

    message: Message
    seq: int
    gap: int
    dedup_after: DedupState


@dataclass(frozen=True, slots=True)
class ProtocolMismatch:
    """A frame with a good CRC and an unknown version/type: NAKed 3, its seq accepted.

    `gap` counts frames lost before it within the same boot, as for a
    :class:`MessageReceived` (its seq is accepted, so the next frame cannot show them).
    """

    seq: int
    version: int
    type_code: int
    detail: str
    dedup_after: DedupState
    gap: int = 0


@dataclass(frozen=True, slots=True)
class FrameRejected:
    """A chunk discarded by the decoder (counted; a NAK went out where the spec says)."""

    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class Delivered:
    """An own frame was acknowledged by the peer."""

    seq: int
    message: Message


@dataclass(frozen=True, slots=True)
class Dropped:
    """An own frame was refused with NAK 3 and will not be sent again."""

    seq: int
    message: Message


@dataclass(frozen=True, slots=True)
class PeerLost:
    """No valid frame for the liveness timeout."""

    silent_since: float


@dataclass(frozen=True, slots=True)
class PeerAlive:
    """A valid frame arrived after :class:`PeerLost`."""


LinkEvent = (
    MessageReceived | ProtocolMismatch | FrameRejected | Delivered | Dropped | PeerLost | PeerAlive
)


def _lost_before(previous: DedupState, seq: int) -> int:
    """Frames lost between the last accepted frame of the same boot and `seq` (spec
    section 3, continuity): 0 when nothing is known yet or `seq` is that frame again."""
    if previous.last_seq is None or seq == previous.last_seq:
        return 0
    return (seq - previous.last_seq - 1) % SEQ_MODULO


@dataclass(slots=True)
class _Outgoing:
    seq: int
    message: Message
    frame: bytes
    first_sent: float = 0.0
    last_sent: float = 0.0
    nak_retries: int = 0


class Link:
    """One end of the shoe link. See the module docstring for the contract."""

    def __init__(
        self,
        role: Role,
        now: float,
        *,
        dedup: DedupState | None = None,
        next_seq: int = 0,
        liveness_s: float = LIVENESS_S,
        buffer_limit: int | None = None,
    ) -> None:
        self.role = role
        incoming = DEVICE_TO_HOST if role is Role.HOST else HOST_TO_DEVICE
        self._incoming_types = incoming
        self._decoder = StreamDecoder(incoming | LINK_CONTROL)
        self._out = bytearray()
        self._events: deque[LinkEvent] = deque()
        self._queue: deque[_Outgoing] = deque()
        self._in_flight: _Outgoing | None = None
        self._next_seq = next_seq % SEQ_MODULO
        self._dedup = dedup or DedupState()
        # Host: delivered, not yet acked, in delivery order. A correct device has one at a
        # time (stop-and-wait); a misbehaving one can have more in one chunk.
        self._delivered: deque[DedupState] = deque()
        # Host: the last frame of unknown type answered (as received) and the state its
        # seq made: its byte-identical copies are ACKed again (_repeats_unknown).
        self._unknown: tuple[bytes, DedupState] | None = None
        self._last_valid = now
        self._lost = False
        self._liveness_s = liveness_s
        if buffer_limit is None and role is Role.DEVICE:
            buffer_limit = DEVICE_BUFFER
        self._buffer_limit = buffer_limit
        self.stats: dict[str, int] = {"retransmits": 0, "duplicates": 0, "naks_sent": 0}

    # --- state -------------------------------------------------------------------

    @property
    def dedup_state(self) -> DedupState:
        return self._dedup

    @property
    def discards(self) -> dict[str, int]:
        return dict(self._decoder.discards)

    @property
    def pending_count(self) -> int:
        """Own frames not yet acknowledged (in flight included)."""
        return len(self._queue) + (self._in_flight is not None)

    @property
    def idle(self) -> bool:
        return self.pending_count == 0

    @property
    def free_slots(self) -> int | None:
        if self._buffer_limit is None:
            return None
        return self._buffer_limit - self.pending_count

    @property
    def peer_lost(self) -> bool:
        return self._lost

    # --- sending ----------------------------------------------------------------

    def send(self, message: Message, now: float, *, coalesce: bool = False) -> int:
        """Queue `message`; return its seq. `coalesce` replaces a queued one of its type."""
        if coalesce:
            for item in self._queue:
                if type_code_of(item.message) == type_code_of(message):
                    item.message = message
                    item.frame = build_frame(type_code_of(message), item.seq,
                                             encode_payload(message))
                    return item.seq
        free = self.free_slots
        if free is not None and free <= 0:
            raise BufferFull(
                f"expected a free slot in the {self._buffer_limit}-frame buffer, "
                f"got {self.pending_count} pending"
            )
        seq = self.spend_seq()
        frame = build_frame(type_code_of(message), seq, encode_payload(message))
        self._queue.append(_Outgoing(seq, message, frame))
        self._transmit_next(now)
        return seq

    def spend_seq(self) -> int:
        """Take the next seq without sending (a device dropping an item: the host sees a gap)."""
        seq = self._next_seq
        self._next_seq = (seq + 1) % SEQ_MODULO
        return seq

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def reopen(self, now: float) -> None:
        """Host role: the line under the link was opened again (a replug, a reconnected
        socket). The host's side of the link opens anew: its unacknowledged frames are
        dropped and its `seq` starts again at 0 (spec section 3: "starting at 0 when the
        link opens"), so the caller's `GET_INFO` is the first frame on the new line; the
        state those frames carried is re-sent after the HELLO that answers it. Bytes not
        yet written and a partial frame read from the old line are dropped. The device's
        side stays (duplicate and continuity state, frames delivered and not recorded):
        the line is the same shoe until a HELLO says otherwise. Liveness counts from
        `now`."""
        if self.role is not Role.HOST:
            raise LinkError("expected the host role for reopen(), got the device role")
        self._queue.clear()
        self._in_flight = None
        self._next_seq = 0
        self._out.clear()
        self._decoder.reset()
        if not self._lost:
            self._last_valid = now

    def data_to_send(self) -> bytes:
        data = bytes(self._out)
        self._out.clear()
        return data

    def next_event(self) -> LinkEvent | None:
        return self._events.popleft() if self._events else None

    def ack(self, seq: int) -> None:
        """Host role: the frame `seq` is durably recorded; acknowledge it now."""
        if self.role is not Role.HOST:
            raise LinkError("expected the host role for ack(), got the device role")
        if not self._delivered or self._delivered[0].last_seq != seq:
            expected = self._delivered[0].last_seq if self._delivered else None
            raise LinkError(f"expected ack of delivered seq {expected}, got {seq}")
        self._dedup = self._delivered.popleft()
        self._control(Ack(seq))

    def refuse(self, seq: int) -> None:
        """Host role: frame `seq` could not be recorded. No ACK goes out, and its next
        retransmission is delivered again (the device keeps the card meanwhile)."""
        for index, pending in enumerate(self._delivered):
            if pending.last_seq == seq:
                # What was delivered after it cannot be recorded before it: withdraw those
                # too, including their events not read yet (they come again with the
                # device's retransmissions).
                withdrawn = set()
                while len(self._delivered) > index:
                    withdrawn.add(self._delivered.pop())
                self._events = deque(
                    e for e in self._events
                    if not (isinstance(e, MessageReceived) and e.dedup_after in withdrawn))
                return

    # --- timers -----------------------------------------------------------------

    def get_timer(self) -> float | None:
        deadlines = []
        if self._in_flight is not None:
            deadlines.append(self._retransmit_at(self._in_flight))
        if not self._lost:
            deadlines.append(self._last_valid + self._liveness_s)
        return min(deadlines) if deadlines else None

    def handle_timer(self, now: float) -> None:
        flight = self._in_flight
        if flight is not None and now >= self._retransmit_at(flight):
            self._retransmit(flight, now)
        if not self._lost and now >= self._last_valid + self._liveness_s:
            self._lost = True
            self._events.append(PeerLost(self._last_valid))

    # --- receiving ----------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> None:
        for result in self._decoder.feed(data):
            if isinstance(result, Discarded):
                if result.nak_reason is not None:
                    self._control(Nak(result.nak_reason))
                self._events.append(FrameRejected(result.reason, result.detail))
            elif isinstance(result, Unsupported):
                self._valid(now)
                if self.role is Role.HOST and self._repeats_unknown(result):
                    continue
                self._control(Nak(NakReason.UNSUPPORTED))
                gap = 0
                if self.role is Role.HOST:
                    # Its seq counts as accepted so the next frame shows no gap: the gap
                    # before it, if any, is reported with it.
                    previous = self._previous()
                    gap = _lost_before(previous, result.seq)
                    self._dedup = DedupState(previous.boot_id, result.seq)
                    self._unknown = (result.frame, self._dedup)
                self._events.append(ProtocolMismatch(
                    result.seq, result.version, result.type_code, result.detail, self._dedup,
                    gap))
            else:
                self._valid(now)
                message = decode_message(result.type_code, result.payload)
                if result.type_code in LINK_CONTROL:
                    self._on_control(message, now)
                elif self.role is Role.HOST:
                    self._on_device_frame(message, result.seq)
                else:
                    self._control(Ack(result.seq))
                    self._events.append(MessageReceived(message, result.seq, 0, self._dedup))

    def _valid(self, now: float) -> None:
        self._last_valid = now
        if self._lost:
            self._lost = False
            self._events.append(PeerAlive())

    def _previous(self) -> DedupState:
        """The duplicate-detection state after every frame delivered so far: the last
        delivered and not yet recorded, else the recorded one."""
        return self._delivered[-1] if self._delivered else self._dedup

    def _repeats_unknown(self, result: Unsupported) -> bool:
        """Host role, a frame of an unknown version or type: is it a retransmission of the
        one answered last (spec section 3, duplicates: its seq is the last accepted)? Then
        it is ACKed again and not reported again. ACKed, not NAKed 3 a second time: an ACK
        names its seq, a NAK concerns whatever the device has in flight, by then perhaps
        its next frame, which it would drop.

        A retransmission is the same frame byte for byte: an unknown version's header
        may not mean what ours does, and a rebooted device's first frame can carry the
        same seq. Only while nothing was accepted since (the duplicate-detection state
        is still the one that frame set), no frame is delivered and not yet recorded
        (it gets no ACK before it is), and the notice was recorded
        (:meth:`forget_unknown`). After a restart a copy is NAKed 3 and reported again."""
        unknown = self._unknown
        if (self._delivered or unknown is None or unknown[0] != result.frame
                or unknown[1] is not self._dedup):
            return False
        self.stats["duplicates"] += 1
        self._control(Ack(result.seq))
        return True

    def forget_unknown(self) -> None:
        """Host role: the notice of the last frame of unknown type could not be recorded;
        its copies are answered as it was (NAK 3, reported), not ACKed."""
        self._unknown = None

    def _on_device_frame(self, message: Message, seq: int) -> None:
        # The boot the frame belongs to is the newest delivered, recorded or not: a HELLO
        # read in the same chunk as the frames after it has not been recorded yet.
        previous = self._previous()
        boot = previous.boot_id
        new_boot = isinstance(message, Hello) and message.boot_id != boot
        after_boot = message.boot_id if isinstance(message, Hello) else boot
        after = DedupState(after_boot, seq)
        if any(pending == after or (not isinstance(message, Hello) and pending.last_seq == seq)
               for pending in self._delivered):
            # A copy of the frame delivered but not recorded yet (a new boot's HELLO
            # included): no ACK, no second delivery (durability rule).
            self.stats["duplicates"] += 1
            return
        if not new_boot and boot == self._dedup.boot_id and self._dedup.last_seq == seq:
            self.stats["duplicates"] += 1
            self._control(Ack(seq))  # a retransmission of what we hold: ACK again
            return
        gap = 0 if new_boot else _lost_before(previous, seq)
        self._delivered.append(after)
        self._events.append(MessageReceived(message, seq, gap, after))

    def _on_control(self, message: Message, now: float) -> None:
        flight = self._in_flight
        if isinstance(message, Ack):
            if flight is not None and message.acked_seq == flight.seq:
                self._in_flight = None
                self._events.append(Delivered(flight.seq, flight.message))
                self._transmit_next(now)
        elif isinstance(message, Nak) and flight is not None:
            if message.reason in RETRY_REASONS and flight.nak_retries < NAK_RETRIES:
                flight.nak_retries += 1
                self._retransmit(flight, now)
            elif message.reason == NakReason.UNSUPPORTED:
                self._in_flight = None
                self._events.append(Dropped(flight.seq, flight.message))
                self._transmit_next(now)

    # --- internals ----------------------------------------------------------------

    def _control(self, message: Ack | Nak) -> None:
        if isinstance(message, Nak):
            self.stats["naks_sent"] += 1
        self._out += build_frame(message.TYPE, 0, encode_payload(message))

    def _transmit_next(self, now: float) -> None:
        if self._in_flight is None and self._queue:
            item = self._queue.popleft()
            item.first_sent = item.last_sent = now
            self._in_flight = item
            self._out += item.frame

    def _retransmit(self, flight: _Outgoing, now: float) -> None:
        flight.last_sent = now
        self.stats["retransmits"] += 1
        self._out += flight.frame

    @staticmethod
    def _retransmit_at(flight: _Outgoing) -> float:
        fast = flight.last_sent - flight.first_sent < FAST_PHASE_S - 1e-9
        return flight.last_sent + (RETRY_FAST_S if fast else RETRY_SLOW_S)

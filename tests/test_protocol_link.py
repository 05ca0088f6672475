"""Link layer behaviour (spec section 3), time advanced by the test."""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field

import pytest

from firmware_protocol import (
    Ack,
    BufferFull,
    Card,
    DedupState,
    Delivered,
    Dropped,
    GetInfo,
    Heartbeat,
    Hello,
    Link,
    LinkError,
    MessageReceived,
    Nak,
    NakReason,
    PeerAlive,
    PeerLost,
    ProtocolMismatch,
    Role,
    SetIndicator,
    StreamDecoder,
    decode_message,
    encode_payload,
)
from firmware_protocol.framing import HEADER, RawFrame, build_frame, cobs_encode, crc16


def frames_of(data: bytes) -> list[tuple[int, int, object]]:
    out = []
    for r in StreamDecoder().feed(data):
        assert isinstance(r, RawFrame)
        out.append((r.type_code, r.seq, decode_message(r.type_code, r.payload)))
    return out


def events(link: Link) -> list[object]:
    out = []
    while (e := link.next_event()) is not None:
        out.append(e)
    return out


def card(index: int) -> Card:
    return Card(1000 + index, index, index, 1, 1, 1, b"\x01\x01", 99)


def wire(message: object, seq: int) -> bytes:
    return build_frame(message.TYPE, seq, encode_payload(message))  # type: ignore[attr-defined]


def test_host_acks_only_after_ack_call() -> None:
    host = Link(Role.HOST, 0.0)
    host.receive_data(wire(card(1), 7), 0.0)
    (received,) = events(host)
    assert isinstance(received, MessageReceived)
    assert received.dedup_after == DedupState(None, 7)
    assert host.data_to_send() == b""  # not durable yet: no ACK
    # A retransmission before it is recorded gets no ACK and no second delivery.
    host.receive_data(wire(card(1), 7), 0.25)
    assert events(host) == [] and host.data_to_send() == b""
    host.ack(7)
    assert frames_of(host.data_to_send()) == [(0x7E, 0, Ack(7))]
    # After recording, a retransmission is ACKed again and not delivered.
    host.receive_data(wire(card(1), 7), 0.5)
    assert events(host) == []
    assert frames_of(host.data_to_send()) == [(0x7E, 0, Ack(7))]


def test_a_frame_of_unknown_type_sent_again_is_acked_and_not_reported_again() -> None:
    """Spec section 2: an unknown type is NAKed 3 and its seq accepted; section 3: a frame
    whose seq is the last accepted is a retransmission, ACKed again and not processed
    again. Its copy (the NAK lost, or crossed with the device's retransmission) raised a
    second protocol_mismatch. It is answered with an ACK naming its seq, not another NAK 3:
    a NAK concerns whatever frame the device has in flight, by then maybe its next one."""
    unknown = build_frame(0x55, 5, b"\x01")
    host = Link(Role.HOST, 0.0, dedup=DedupState(0xAA, 4))
    host.receive_data(unknown, 0.0)
    (mismatch,) = events(host)
    assert isinstance(mismatch, ProtocolMismatch)
    assert (mismatch.seq, mismatch.gap, mismatch.dedup_after) == (5, 0, DedupState(0xAA, 5))
    assert frames_of(host.data_to_send()) == [(0x7F, 0, Nak(NakReason.UNSUPPORTED))]
    host.receive_data(unknown + unknown, 0.25)  # sent again, twice
    assert events(host) == []
    assert frames_of(host.data_to_send()) == [(0x7E, 0, Ack(5)), (0x7E, 0, Ack(5))]
    assert host.stats["duplicates"] == 2
    # After a restart (the frame itself is not journalled): answered as the first was,
    # and the device's next frame still shows no gap.
    restarted = Link(Role.HOST, 1.0, dedup=mismatch.dedup_after)
    restarted.receive_data(unknown, 1.0)
    (again,) = events(restarted)
    assert isinstance(again, ProtocolMismatch) and again.gap == 0
    assert frames_of(restarted.data_to_send()) == [(0x7F, 0, Nak(NakReason.UNSUPPORTED))]
    restarted.receive_data(wire(card(1), 6), 1.1)
    (received,) = events(restarted)
    assert isinstance(received, MessageReceived) and (received.seq, received.gap) == (6, 0)


def test_a_new_frame_of_unknown_version_with_the_last_seq_is_reported_not_acked() -> None:
    """A shoe that reboots into firmware of another protocol version right after its
    HELLO (seq 0) was recorded sends a new frame with seq 0: not a retransmission (only
    the same bytes are), so NAK 3 and protocol_mismatch, as spec section 2 says."""
    host = Link(Role.HOST, 0.0)
    host.receive_data(wire(Hello(1, 0xAAAA, 0, "fw1", "SN-1"), 0), 0.0)
    (hello,) = events(host)
    assert isinstance(hello, MessageReceived)
    host.ack(0)
    host.data_to_send()
    body = HEADER.pack(2, 1, 0, 5) + b"\x02" + b"\xbb" * 4  # version 2, seq 0
    host.receive_data(cobs_encode(body + struct.pack("<H", crc16(body))) + b"\0", 1.0)
    (mismatch,) = events(host)
    assert isinstance(mismatch, ProtocolMismatch) and mismatch.seq == 0
    assert frames_of(host.data_to_send()) == [(0x7F, 0, Nak(NakReason.UNSUPPORTED))]


def test_a_copy_of_an_unknown_frame_whose_notice_was_not_recorded_is_not_acked() -> None:
    """The session could not record the notice (storage failed): a host that cannot write
    sends no ACK, so the copy is answered as the first was."""
    unknown = build_frame(0x55, 5, b"\x01")
    host = Link(Role.HOST, 0.0, dedup=DedupState(0xAA, 4))
    host.receive_data(unknown, 0.0)
    events(host)
    host.data_to_send()
    host.forget_unknown()
    host.receive_data(unknown, 0.25)
    (again,) = events(host)
    assert isinstance(again, ProtocolMismatch)
    assert frames_of(host.data_to_send()) == [(0x7F, 0, Nak(NakReason.UNSUPPORTED))]


def test_ack_of_undelivered_seq_names_values() -> None:
    host = Link(Role.HOST, 0.0)
    with pytest.raises(LinkError, match="expected ack of delivered seq None, got 3"):
        host.ack(3)


def test_gap_within_boot_and_new_boot() -> None:
    host = Link(Role.HOST, 0.0, dedup=DedupState(0xAA, 65534))
    host.receive_data(wire(card(1), 65535), 0.0)
    (e,) = events(host)
    assert e.gap == 0
    host.ack(65535)
    host.receive_data(wire(card(2), 2), 0.1)  # 0 and 1 were lost
    (e,) = events(host)
    assert e.gap == 2
    host.ack(2)
    host.receive_data(wire(Hello(1, 0xBB, 0, "1", "S"), 0), 0.2)
    (e,) = events(host)
    assert e.gap == 0 and e.dedup_after == DedupState(0xBB, 0)


def test_retransmit_schedule_250ms_for_2s_then_1s() -> None:
    device = Link(Role.DEVICE, 0.0)
    device.send(card(1), 0.0)
    first = device.data_to_send()
    sent_at = []
    now = 0.0
    while now < 6.0:
        timer = device.get_timer()
        assert timer is not None
        now = timer
        device.handle_timer(now)
        data = device.data_to_send()
        if data:
            assert data == first  # byte for byte
            sent_at.append(round(now, 3))
    assert sent_at[:9] == [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 3.0]
    assert sent_at[9:11] == [4.0, 5.0]


def test_nak_retransmits_at_once_three_times_then_waits() -> None:
    device = Link(Role.DEVICE, 0.0)
    device.send(card(1), 0.0)
    frame = device.data_to_send()
    for _ in range(3):
        device.receive_data(wire(Nak(1), 0), 0.01)
        assert device.data_to_send() == frame
    device.receive_data(wire(Nak(2), 0), 0.02)
    assert device.data_to_send() == b""
    device.handle_timer(0.25)  # 250 ms counts from the last transmission (0.01)
    assert device.data_to_send() == b""
    device.handle_timer(0.26)
    assert device.data_to_send() == frame


def test_nak3_drops_the_frame_and_next_goes() -> None:
    host = Link(Role.HOST, 0.0)
    host.send(GetInfo(), 0.0)
    host.send(SetIndicator(2), 0.0)
    assert [f[1] for f in frames_of(host.data_to_send())] == [0]
    host.receive_data(wire(Nak(3), 0), 0.1)
    assert any(isinstance(e, Dropped) for e in events(host))
    assert frames_of(host.data_to_send()) == [(0x83, 1, SetIndicator(2))]


def test_stop_and_wait_and_delivered() -> None:
    device = Link(Role.DEVICE, 0.0)
    device.send(card(1), 0.0)
    device.send(card(2), 0.0)
    assert len(frames_of(device.data_to_send())) == 1
    device.receive_data(wire(Ack(5), 0), 0.1)  # not the in-flight seq: ignored
    assert device.data_to_send() == b""
    device.receive_data(wire(Ack(0), 0), 0.1)
    assert isinstance(events(device)[0], Delivered)
    assert frames_of(device.data_to_send())[0][1] == 1


def test_device_buffer_is_64_frames() -> None:
    device = Link(Role.DEVICE, 0.0)
    for i in range(64):
        device.send(card(i), 0.0)
    with pytest.raises(BufferFull, match="64-frame buffer"):
        device.send(card(99), 0.0)
    assert device.spend_seq() == 64  # a dropped item still spends a seq


def test_device_executes_duplicates() -> None:
    device = Link(Role.DEVICE, 0.0)
    device.receive_data(wire(SetIndicator(1), 4) * 2, 0.0)
    assert [type(e) for e in events(device)] == [MessageReceived, MessageReceived]
    assert [f[2] for f in frames_of(device.data_to_send())] == [Ack(4), Ack(4)]


def test_host_coalesces_queued_settings() -> None:
    host = Link(Role.HOST, 0.0)
    host.send(GetInfo(), 0.0)
    host.send(SetIndicator(1), 0.0, coalesce=True)
    host.send(SetIndicator(3), 0.0, coalesce=True)
    host.data_to_send()
    host.receive_data(wire(Ack(0), 0), 0.1)
    assert frames_of(host.data_to_send()) == [(0x83, 1, SetIndicator(3))]
    assert host.idle is False


def test_liveness_lost_after_5s_and_back() -> None:
    host = Link(Role.HOST, 0.0)
    host.handle_timer(4.99)
    assert events(host) == []
    host.handle_timer(5.0)
    assert [type(e) for e in events(host)] == [PeerLost]
    host.receive_data(wire(Heartbeat(1, 0), 0), 9.0)
    assert [type(e) for e in events(host)] == [PeerAlive, MessageReceived]


# --- a lossy channel -------------------------------------------------------------------


@dataclass
class Pipe:
    """One direction of a serial line: FIFO (a wire never reorders) with faults."""

    rng: random.Random
    drop: float
    corrupt: float
    duplicate: float
    queue: list[tuple[float, bytes]] = field(default_factory=list)

    def write(self, data: bytes, now: float) -> None:
        if not data:
            return
        pieces = []
        while data:
            n = self.rng.randint(1, 40)
            pieces.append(data[:n])
            data = data[n:]
        for piece in pieces:
            if self.rng.random() < self.drop:
                continue
            if self.rng.random() < self.corrupt:
                i = self.rng.randrange(len(piece))
                piece = piece[:i] + bytes([self.rng.randrange(256)]) + piece[i + 1 :]
            copies = 2 if self.rng.random() < self.duplicate else 1
            last = self.queue[-1][0] if self.queue else now
            for _ in range(copies):
                self.queue.append((max(last, now + self.rng.uniform(0, 0.05)), piece))

    def read(self, now: float) -> bytes:
        out = b""
        while self.queue and self.queue[0][0] <= now:
            out += self.queue.pop(0)[1]
        return out


@pytest.mark.parametrize("seed", range(6))
def test_lossy_line_delivers_every_frame_once_in_order_across_wrap(seed: int) -> None:
    rng = random.Random(seed)
    to_host = Pipe(rng, drop=0.03, corrupt=0.03, duplicate=0.05)
    to_device = Pipe(rng, drop=0.03, corrupt=0.03, duplicate=0.05)
    host = Link(Role.HOST, 0.0)
    device = Link(Role.DEVICE, 0.0, next_seq=65500)  # crosses the wrap
    total = 120
    sent = 0
    got: list[int] = []
    settings_sent = 0
    settings_got: list[int] = []
    now = 0.0
    while (len(got) < total or not host.idle) and now < 600:
        now = round(now + 0.01, 2)
        if sent < total and device.pending_count < 4:
            device.send(card(sent), now)
            sent += 1
        if settings_sent < 30 and rng.random() < 0.05:
            host.send(SetIndicator(settings_sent % 6), now)
            settings_sent += 1
        host.receive_data(to_host.read(now), now)
        device.receive_data(to_device.read(now), now)
        host.handle_timer(now)
        device.handle_timer(now)
        for e in events(host):
            if isinstance(e, MessageReceived) and isinstance(e.message, Card):
                got.append(e.message.card_index)
                host.ack(e.seq)
        for e in events(device):
            if (
                isinstance(e, MessageReceived)
                and isinstance(e.message, SetIndicator)
                and (not settings_got or settings_got[-1] != e.message.pattern)
            ):
                settings_got.append(e.message.pattern)
        to_device.write(host.data_to_send(), now)
        to_host.write(device.data_to_send(), now)
    assert got == list(range(total))
    # Host frames are idempotent: the device may execute a copy twice, never skip one.
    assert settings_got == [i % 6 for i in range(settings_sent)]
    assert host.stats["duplicates"] > 0 or device.stats["retransmits"] > 0


def test_refused_frame_is_delivered_again_on_retransmission() -> None:
    host = Link(Role.HOST, 0.0)
    host.receive_data(wire(card(1), 3), 0.0)
    assert len(events(host)) == 1
    host.refuse(3)  # the journal could not store it: no ACK
    assert host.data_to_send() == b""
    host.receive_data(wire(card(1), 3), 0.25)
    (again,) = events(host)
    assert isinstance(again, MessageReceived) and again.seq == 3
    host.ack(3)
    assert frames_of(host.data_to_send()) == [(0x7E, 0, Ack(3))]


def test_new_boot_hello_duplicated_before_it_is_recorded_is_delivered_once() -> None:
    host = Link(Role.HOST, 0.0, dedup=DedupState(0xAA, 17))
    hello = wire(Hello(1, 0xBB, 0, "1", "S"), 0)
    host.receive_data(hello + hello, 0.0)  # the line delivered it twice
    (received,) = events(host)
    assert received.dedup_after == DedupState(0xBB, 0)
    assert host.data_to_send() == b""
    host.ack(0)
    assert frames_of(host.data_to_send()) == [(0x7E, 0, Ack(0))]
    host.receive_data(hello, 0.3)  # a later retransmission: ACKed again, not delivered
    assert events(host) == []
    assert frames_of(host.data_to_send()) == [(0x7E, 0, Ack(0))]


def test_two_new_frames_in_one_chunk_are_acked_in_order() -> None:
    """A shoe that breaks stop-and-wait: both frames delivered, ACKed in delivery order."""
    host = Link(Role.HOST, 0.0)
    host.receive_data(wire(card(1), 10) + wire(card(2), 11), 0.0)
    first, second = events(host)
    assert (first.seq, second.seq, second.gap) == (10, 11, 0)
    with pytest.raises(LinkError, match="expected ack of delivered seq 10, got 11"):
        host.ack(11)
    host.ack(10)
    host.ack(11)
    assert host.dedup_state == DedupState(None, 11)


def test_refusing_a_frame_withdraws_the_unread_ones_after_it() -> None:
    host = Link(Role.HOST, 0.0)
    host.receive_data(wire(card(1), 10) + wire(card(2), 11), 0.0)
    first = host.next_event()
    assert isinstance(first, MessageReceived)
    host.refuse(10)  # could not be stored: 11 cannot be recorded before it
    assert host.next_event() is None
    host.receive_data(wire(card(1), 10), 0.3)  # the device retransmits
    assert [e.seq for e in events(host)] == [10]


def test_a_hello_read_with_the_frames_after_it_gives_them_its_boot() -> None:
    """The durability rule records (boot_id, last seq): a frame read in the same chunk as
    the new boot's HELLO, before the HELLO is recorded, belongs to that boot."""
    host = Link(Role.HOST, 0.0, dedup=DedupState(0xAA, 1))
    host.receive_data(wire(Hello(1, 0xBB, 0, "1", "S"), 0) + wire(Heartbeat(0, 0), 1), 0.0)
    hello, beat = events(host)
    assert hello.dedup_after == DedupState(0xBB, 0)
    # seq 1 equals the old boot's last seq: not taken for its retransmission
    assert (beat.seq, beat.gap, beat.dedup_after) == (1, 0, DedupState(0xBB, 1))
    host.ack(0)
    host.ack(1)
    assert host.dedup_state == DedupState(0xBB, 1)
    host.receive_data(wire(Heartbeat(0, 0), 1), 0.3)  # now a retransmission
    assert events(host) == [] and frames_of(host.data_to_send())[-1][2] == Ack(1)


def test_a_frame_of_unknown_type_reports_the_gap_before_it() -> None:
    """Spec section 3 (continuity) with section 2 (an unknown type's seq is accepted, so
    the next frame shows no gap): the gap is reported with the unknown frame."""
    unknown = build_frame(0x55, 3, b"\x01")
    host = Link(Role.HOST, 0.0, dedup=DedupState(0xAA, 0))
    host.receive_data(unknown, 0.0)
    (mismatch,) = events(host)
    assert isinstance(mismatch, ProtocolMismatch) and (mismatch.seq, mismatch.gap) == (3, 2)
    assert mismatch.dedup_after == DedupState(0xAA, 3)
    host.receive_data(wire(Heartbeat(0, 0), 4), 0.1)
    (beat,) = events(host)
    assert beat.gap == 0
    host.ack(4)
    host.receive_data(build_frame(0x55, 5, b""), 0.2)  # next in line: no gap
    host.receive_data(build_frame(0x55, 5, b""), 0.3)  # sent again: not reported again
    assert [(e.seq, e.gap) for e in events(host)] == [(5, 0)]
    fresh = Link(Role.HOST, 0.0)  # nothing recorded: nothing to compare with
    fresh.receive_data(unknown, 0.0)
    assert [e.gap for e in events(fresh)] == [0]


def test_a_reopened_line_opens_the_hosts_side_anew() -> None:
    host = Link(Role.HOST, 0.0, dedup=DedupState(0xAA, 7))
    host.send(GetInfo(), 0.0)
    host.receive_data(wire(Ack(0), 0) + wire(Hello(1, 0xAA, 0b1111, "1", "S"), 8), 0.0)
    (_delivered, _hello) = events(host)
    host.ack(8)
    host.send(SetIndicator(1), 0.1)  # in flight, never ACKed: the line is pulled
    host.receive_data(b"\x05\x01\x02", 0.2)  # half a frame from the old line
    sent = frames_of(host.data_to_send())
    assert [(t, seq) for t, seq, _ in sent] == [(GetInfo.TYPE, 0), (0x7E, 0),
                                                (SetIndicator.TYPE, 1)]
    host.reopen(9.0)
    assert host.data_to_send() == b"" and host.pending_count == 0
    assert host.send(GetInfo(), 9.0) == 0  # GET_INFO first, seq 0 (spec section 3)
    assert frames_of(host.data_to_send()) == [(GetInfo.TYPE, 0, GetInfo())]
    assert host.get_timer() == pytest.approx(9.25)  # its retransmission, not the old frame
    # the device's side stays: a retransmission of its last frame is not delivered again
    host.receive_data(wire(Hello(1, 0xAA, 0b1111, "1", "S"), 8), 9.1)
    assert events(host) == [] and frames_of(host.data_to_send()) == [(0x7E, 0, Ack(8))]
    host.handle_timer(13.9)
    assert not host.peer_lost  # liveness counts from the reopen
    with pytest.raises(LinkError, match="host role"):
        Link(Role.DEVICE, 0.0).reopen(1.0)

"""Hypothesis: message round trips, arbitrary chunking, garbage never raises."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from firmware_protocol import (
    Ack,
    Card,
    CardUnread,
    CutCard,
    EncodeError,
    Fault,
    GetInfo,
    Heartbeat,
    Hello,
    Link,
    Nak,
    Role,
    SetGate,
    SetIndicator,
    ShoeLoaded,
    StreamDecoder,
    cobs_decode,
    cobs_encode,
    decode_message,
    encode_payload,
)
from firmware_protocol.framing import RawFrame, build_frame

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
ascii_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=123)

def messages_of(u8: st.SearchStrategy[int], u16: st.SearchStrategy[int],
                u32: st.SearchStrategy[int], text: st.SearchStrategy[str],
                code: st.SearchStrategy[bytes]) -> st.SearchStrategy[object]:
    """Every message, its fields drawn from these (by their width on the wire)."""
    return st.one_of(
        st.builds(Hello, u8, u32, u16, text, text),
        st.builds(Heartbeat, u32, u16),
        st.builds(ShoeLoaded, u32),
        st.builds(Card, u32, u16, u16, u8, u8, u8, code, u8),
        st.builds(CardUnread, u32, u16, u16, u8, u8, u8),
        st.builds(CutCard, u32, u16, u8, u8),
        st.builds(Fault, u32, u16, u8),
        st.builds(GetInfo),
        st.builds(SetGate, u8),
        st.builds(SetIndicator, u8),
        st.builds(Ack, u16),
        st.builds(Nak, u8),
    )


messages = messages_of(u8, u16, u32, ascii_text, st.binary(max_size=10))
# Fields of any size and text of any kind: what does not fit the wire format
wide = st.integers(-(2**40), 2**40)
any_messages = messages_of(wide, wide, wide, st.text(max_size=200), st.binary(max_size=300))


@given(any_messages)
def test_a_message_either_encodes_and_round_trips_or_raises_encode_error(
        message: object) -> None:
    """encode_payload's contract: a field that does not fit is an EncodeError, whatever
    the field (a u8 out of range, a non-ASCII HELLO string), never another exception."""
    try:
        payload = encode_payload(message)  # type: ignore[arg-type]
    except EncodeError:
        return
    assert decode_message(message.TYPE, payload) == message  # type: ignore[attr-defined]


@given(st.binary(max_size=600))
def test_cobs_round_trip(data: bytes) -> None:
    encoded = cobs_encode(data)
    assert 0 not in encoded
    assert cobs_decode(encoded) == data


@given(messages, u16)
def test_every_message_round_trips(message: object, seq: int) -> None:
    frame = build_frame(message.TYPE, seq, encode_payload(message))  # type: ignore[attr-defined]
    (result,) = StreamDecoder().feed(frame)
    assert isinstance(result, RawFrame)
    assert result.seq == seq
    assert decode_message(result.type_code, result.payload) == message


@given(st.lists(st.tuples(messages, u16), min_size=1, max_size=8), st.data())
def test_any_split_yields_the_same_frames(items: list, data: st.DataObject) -> None:
    stream = b"".join(build_frame(m.TYPE, s, encode_payload(m)) for m, s in items)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    decoder = StreamDecoder()
    results = []
    previous = 0
    for cut in [*cuts, len(stream)]:
        results += decoder.feed(stream[previous:cut])
        previous = cut
    assert [(r.type_code, r.seq) for r in results] == [(m.TYPE, s) for m, s in items]


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=400), max_size=10))
def test_garbage_never_raises_and_stays_bounded(chunks: list[bytes]) -> None:
    decoder = StreamDecoder()
    link = Link(Role.HOST, 0.0)
    for now, chunk in enumerate(chunks):
        decoder.feed(chunk)
        assert decoder.buffered <= 300
        link.receive_data(chunk, float(now))
        link.handle_timer(float(now))
        while link.next_event() is not None:
            pass


@given(st.lists(st.tuples(messages, u16), max_size=4), st.binary(max_size=50))
def test_frames_after_garbage_resync(items: list, garbage: bytes) -> None:
    stream = garbage + b"\x00" + b"".join(
        build_frame(m.TYPE, s, encode_payload(m)) for m, s in items
    )
    frames = [r for r in StreamDecoder().feed(stream) if isinstance(r, RawFrame)]
    assert [(f.type_code, f.seq) for f in frames][-len(items) or None :] == [
        (m.TYPE, s) for m, s in items
    ][-len(items) or None :]

"""shoed.device.inputs.card_record: a plain card's input JSON, written without its model,
is byte for byte the model's own JSON (the journal holds the same record either way, and
the model built from it after the ACK, card_input, is message_to_inputs's and the one the
record replays to); any other frame gets None and goes the usual way."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from firmware_protocol import Card
from firmware_protocol.messages import RANKS, SUITS, CodeKind, optical_code
from shoed.core.inputs import INPUT_ADAPTER, DeviceItem
from shoed.device.inputs import card_input, card_record, message_to_inputs

u16 = st.integers(0, 0xFFFF)
u8 = st.integers(0, 0xFF)
small = st.integers(0, 4)  # pull fields around their valid range (1..3)
notations = st.builds(lambda r, s: r + s, st.sampled_from(RANKS), st.sampled_from(SUITS))
any_time = st.floats(allow_nan=True, allow_infinity=True) | st.floats(0, 4e9)
uptimes = st.none() | any_time | st.floats(0, 1e7)


def card(notation: str, index: int, pull_id: int, pos: int, size: int, quality: int,
         kind: int = CodeKind.OPTICAL, code: bytes | None = None) -> Card:
    return Card(uptime_ms=1, card_index=index, pull_id=pull_id, pull_pos=pos,
                pull_size=size, code_kind=kind,
                code=optical_code(notation) if code is None else code, quality=quality)


@given(notations, u16, u16, small | u8, small | u8, u8, st.integers(0, 256), any_time,
       uptimes)
def test_a_plain_cards_json_is_its_models(notation: str, index: int, pull_id: int, pos: int,
                                         size: int, quality: int, min_quality: int,
                                         at: float, mono: float | None) -> None:
    message = card(notation, index, pull_id, pos, size, quality)
    stamped = {"at": at, "mono": mono}
    body = card_record(message, stamped, min_quality)
    if body is None:
        return  # not a plain card (unread, a bad pull, an odd time): the usual way
    [model] = message_to_inputs(message, stamped, None, min_quality)
    assert isinstance(model, DeviceItem)
    assert body == model.model_dump_json()
    assert INPUT_ADAPTER.validate_json(body) == model
    built = card_input(body)  # the daemon's model of it, built from the record after the ACK
    assert type(built) is DeviceItem
    assert built == model
    assert built.model_dump_json() == body
    assert built.model_dump() == model.model_dump()


@given(notations, u16, u16, st.integers(1, 3), st.floats(1.6e9, 4e9), st.floats(0.001, 1e8))
def test_ordinary_cards_take_the_plain_way(notation: str, index: int, pull_id: int,
                                          size: int, at: float, mono: float) -> None:
    """Not vacuous: a card read well, in a whole pull, at an ordinary time, is plain."""
    message = card(notation, index, pull_id, 1, size, 200)
    body = card_record(message, {"at": at, "mono": mono}, 100)
    assert body is not None
    assert body == message_to_inputs(message, {"at": at, "mono": mono}, None, 100)[0] \
        .model_dump_json()


def test_what_is_not_a_plain_card_goes_the_usual_way() -> None:
    ok = {"at": 1.8e9, "mono": 12.5}
    assert card_record(card("AS", 1, 1, 1, 1, 200), ok, 100) is not None
    assert card_record(card("AS", 1, 1, 1, 1, 50), ok, 100) is None  # read poorly
    assert card_record(card("AS", 1, 1, 3, 2, 200), ok, 100) is None  # pos beyond size
    rfid = card("AS", 1, 1, 1, 1, 200, kind=CodeKind.RFID, code=b"\x01\x02\x03\x04")
    assert card_record(rfid, ok, 100) is None  # the manifest's way
    bad = card("AS", 1, 1, 1, 1, 200, code=b"\x0e\x01")  # rank 14: names no card
    assert card_record(bad, ok, 100) is None
    for odd in (1e-5, math.nan, math.inf, 1e16):
        assert card_record(card("AS", 1, 1, 1, 1, 200), {"at": odd, "mono": 1.0}, 100) is None
        assert card_record(card("AS", 1, 1, 1, 1, 200), {"at": 1.8e9, "mono": odd}, 100) \
            is None
    assert card_record(card("AS", 1, 1, 1, 1, 200), {"at": 1.8e9, "mono": None}, 100) \
        is not None

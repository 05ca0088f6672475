"""event_json(): a card event's JSON written from a template is the serializer's, exactly.

The outbox, the journal and the broker carry what event_json() returns (shoed/store/
recorder.py); consumers and the replay compare events by their bytes, so a card event
written from the template must be character for character what pydantic-core writes.
"""

from __future__ import annotations

from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoed.core import events as ev
from shoed.core.engine import build_models
from shoed.core.events import CARD_EVENT_FIELDS, CardEvent, CardPosition, event_json

build_models()

PLAIN = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E,
                              exclude_characters='"\\'), max_size=30)
ANY_TEXT = st.text(max_size=30)  # quotes, backslashes, control characters, any plane
NUMBER = st.integers(min_value=-(2**70), max_value=2**70)


def card_events(text: st.SearchStrategy[str]) -> st.SearchStrategy[CardEvent]:
    maybe_text = st.none() | text
    maybe_number = st.none() | NUMBER
    return st.builds(
        CardEvent,
        event_id=text, seq=NUMBER, instance=text, ts=text, table_id=text,
        shoe_id=maybe_text, hand_no=maybe_number, drawn_at=text,
        position=st.none() | st.sampled_from(get_args(CardPosition)),
        card=maybe_text, card_index=maybe_number, device_card_index=maybe_number,
        pull_id=maybe_number, source=st.sampled_from(["shoe", "manual"]),
        exposed_during_betting=st.booleans(),
        read=st.sampled_from(["read", "unread", "foreign", "manual"]),
        uid=maybe_text, voided=st.booleans(),
    )


def a_card_event(**fields: Any) -> CardEvent:
    base: dict[str, Any] = dict(
        event_id="T1-ab12cd34-7", seq=7, instance="ab12cd34", ts="2026-12-06T19:00:00.123Z",
        table_id="T1", shoe_id="T1-20261206-1", hand_no=3,
        drawn_at="2026-12-06T19:00:00.120Z", position="P1", card="AS", card_index=12,
        device_card_index=40, pull_id=40, source="shoe")
    return CardEvent(**{**base, **fields})


def test_the_template_lists_the_card_events_fields_in_their_order() -> None:
    """While this holds, event_json() writes card events itself; a field added to the
    model without the template turns the template off (and fails here)."""
    assert tuple(CardEvent.model_fields) == CARD_EVENT_FIELDS
    assert ev._CARD_TEMPLATE


@settings(max_examples=400, deadline=None)
@given(card_events(PLAIN))
def test_a_card_event_with_plain_text_is_written_as_the_serializer_writes_it(
        event: CardEvent) -> None:
    assert event_json(event) == event.model_dump_json()


@settings(max_examples=400, deadline=None)
@given(card_events(ANY_TEXT))
def test_a_card_event_with_any_text_is_written_as_the_serializer_writes_it(
        event: CardEvent) -> None:
    assert event_json(event) == event.model_dump_json()


def test_a_plain_card_event_does_not_go_through_the_serializer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    events = [a_card_event(),
              a_card_event(shoe_id=None, hand_no=None, position=None, card=None,
                           card_index=None, device_card_index=None, pull_id=None,
                           uid="04A1B2C3", read="foreign", exposed_during_betting=True,
                           voided=True)]
    expected = [event.model_dump_json() for event in events]
    monkeypatch.setattr(CardEvent, "model_dump_json", lambda self, **kw: pytest.fail(
        "the serializer was asked for a plain card event"))
    assert [event_json(event) for event in events] == expected


@pytest.mark.parametrize("text", ['T"1', "T\\1", "T\n1", "T\x7f1", "Tisch-\u00e4", "T\x001"])
def test_text_that_needs_escaping_goes_to_the_serializer(text: str) -> None:
    for event in (a_card_event(table_id=text), a_card_event(shoe_id=text),
                  a_card_event(card=text), a_card_event(uid=text),
                  a_card_event(event_id=text), a_card_event(drawn_at=text)):
        assert event_json(event) == event.model_dump_json()


def test_other_events_are_the_serializers() -> None:
    event = ev.Procedure(event_id="T1-a-1", seq=1, instance="a", ts="t", table_id="T1",
                         shoe_id=None, hand_no=None, rule="card_without_shoe",
                         action="ignored", cards=[{"card_index": None, "card": "AS"}])
    assert event_json(event) == event.model_dump_json()

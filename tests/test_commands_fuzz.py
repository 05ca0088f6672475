"""The command parser: malformed and hostile JSON never raises and names the problem."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoed.core.commands import COMMAND_NAMES, CommandRejection, parse_command

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=500)
@given(st.binary(max_size=300))
def test_random_bytes(payload: bytes) -> None:
    result = parse_command(payload)
    assert isinstance(result, CommandRejection) or result.command in COMMAND_NAMES


# Nested JSON is slow to generate on a busy 2-core machine; that is not what is tested.
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(COMMAND_NAMES)),
       st.dictionaries(st.sampled_from(["request_id", "operator", "hand_no", "card_index",
                                        "card", "force", "reason", "position", "from_seq",
                                        "to_seq", "hands", "detail"]), json_values))
def test_right_command_wrong_fields(name: str, fields: dict[str, object]) -> None:
    result = parse_command(json.dumps({"command": name, **fields}))
    if isinstance(result, CommandRejection):
        assert result.code in ("invalid_command", "invalid_json")
        assert result.message


def test_invalid_utf8_is_not_json() -> None:
    """Not repaired into a command: a byte that is not UTF-8 makes the payload invalid."""
    rejected = parse_command(b'{"request_id": "a\xff", "command": "resume", "operator": "x"}')
    assert isinstance(rejected, CommandRejection) and rejected.code == "invalid_json"
    assert "0xff at offset 17" in rejected.message


def test_hostile_payloads() -> None:
    deep = "[" * 5000 + "]" * 5000
    rejected_deep = parse_command(deep)
    assert isinstance(rejected_deep, CommandRejection) and "nested at most 32" in \
        rejected_deep.message
    tricky = '{"request_id": "x", "command": "resume", "operator": "' + "[" * 40 + '"}'
    assert not isinstance(parse_command(tricky), CommandRejection)  # brackets inside a string
    huge = json.dumps({"request_id": "x", "command": "resume", "operator": "o",
                       "pad": "a" * 100_000})
    rejected = parse_command(huge)
    assert isinstance(rejected, CommandRejection) and "at most" in rejected.message
    nested = '{"request_id": "x", "command": "resume", "operator": ' + "[" * 3000 + "]" * 3000 + "}"
    assert isinstance(parse_command(nested), CommandRejection)
    wrong_type = parse_command(b'{"request_id": 5, "command": "resume", "operator": "o"}')
    assert isinstance(wrong_type, CommandRejection) and wrong_type.request_id is None
    assert "request_id" in wrong_type.message
    not_object = parse_command(b"[1, 2]")
    assert isinstance(not_object, CommandRejection) and "JSON object" in not_object.message
    bool_for_int = parse_command(b'{"request_id": "x", "command": "void_hand", "operator": "o",'
                                 b' "hand_no": true, "reason": "r"}')
    assert isinstance(bool_for_int, CommandRejection) and "hand_no" in bool_for_int.message

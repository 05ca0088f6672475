"""The machine-readable contract: `shoed schema` (JSON Schema 2020-12) and `shoed asyncapi`
(AsyncAPI 3.0, checked by the official parser), against what the daemon really publishes;
the previous release's schema (tests/data/schema-0.1.0.json) still validates today's
messages for every field it had."""

from __future__ import annotations

import asyncio
import copy
import json
import pathlib
import subprocess
import sys
import uuid
from typing import Any

import jsonschema
import pytest
from rig import rig, wait_for

from shoed.contract import asyncapi, markdown, schemas

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURE = pathlib.Path(__file__).parent / "data" / "schema-0.1.0.json"
VALIDATOR = jsonschema.Draft202012Validator
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


def validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    VALIDATOR.check_schema(schema)
    return VALIDATOR(schema, format_checker=FORMATS)


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "shoed.cli", "schema"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def hand_result() -> dict[str, Any]:
    return {"schema_version": 1, "type": "hand_result", "event_id": "T01-ab12cd34-17",
            "seq": 17, "instance": "ab12cd34", "ts": "2027-01-15T08:00:02.350Z",
            "table_id": "T01", "shoe_id": "T01-x-1", "hand_no": 1,
            "player_cards": ["2S", "5D"], "banker_cards": ["TH", "6C"], "player_total": 7,
            "banker_total": 6, "winner": "player", "player_natural": False,
            "banker_natural": False, "player_pair": False, "banker_pair": False,
            "cards_dealt": 4, "big_small": "small", "banker_six": False,
            "payouts": {"banker": -1.0, "player": 1.0, "tie": -1.0, "banker_pair": -1.0,
                        "player_pair": -1.0, "big": -1.0, "small": 1.5},
            "card_indexes": [4, 5, 6, 7]}


def test_every_part_is_a_2020_12_schema_with_an_id(document: dict[str, Any]) -> None:
    parts = [v for k, v in document.items() if k != "results"] + list(
        document["results"].values())
    assert {"events", "commands", "state", "response", "status", "device", "roads"} <= set(
        document)
    for part in parts:
        assert part["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert part["$id"].startswith("https://")
        VALIDATOR.check_schema(part)
    assert "discriminator" not in json.dumps(document)


def test_events_are_open_strictly_typed_and_tight_where_it_matters(
        document: dict[str, Any]) -> None:
    events = validator(document["events"])
    good = hand_result()
    events.validate(good)
    events.validate({**good, "a_field_added_later": {"x": 1}})  # consumers ignore it
    for broken, why in [
            ({k: v for k, v in good.items() if k != "type"}, "no type"),
            ({**good, "ts": "yesterday"}, "ts not a date-time"),
            ({**good, "player_cards": ["ZZ", "5D"]}, "not a card"),
            ({**good, "type": "no_such_event"}, "unknown type"),
            ({**good, "winner": "dealer"}, "winner out of its enum"),
            ({**good, "seq": 0}, "seq from 1"),
            ({**good, "instance": ""}, "an empty instance"),
            ({**good, "hand_no": None}, "a result of no hand"),
            ({**good, "hand_no": 0}, "hands count from 1"),
            ({k: v for k, v in good.items() if k != "hand_no"}, "a result without its hand"),
            ({**good, "payouts": {}}, "payouts without the main bets"),
            ({**good, "payouts": {**good["payouts"], "dragon7": "40"}}, "a pay not a number"),
    ]:
        assert not events.is_valid(broken), why
    # a side bet the table offers is named in the contract, and so are the table types
    events.validate({**good, "payouts": {**good["payouts"], "dragon7": -1.0, "panda8": 25.0}})
    payouts = document["events"]["$defs"]["HandResultEvent"]["properties"]["payouts"]
    assert {"dragon7", "panda8", "dragon_bonus_player", "dragon_bonus_banker", "lucky6",
            "perfect_pair", "either_pair"} <= set(payouts["properties"])
    started = document["events"]["$defs"]["ShoeStarted"]["properties"]
    assert started["table_type"]["enum"] == ["commission", "super6", "ez"]
    assert started["betting_control"]["enum"] == ["commands", "none"]
    for definition in schemas.event_names().values():
        schema = document["events"]["$defs"][definition]
        assert "type" in schema["required"] and "const" in schema["properties"]["type"]
        assert schema.get("additionalProperties") is not False
        assert schema["properties"]["ts"]["format"] == "date-time"


def test_every_alarm_code_the_engine_raises_is_among_the_schemas_examples(
        document: dict[str, Any]) -> None:
    """The codes are an open list (a pattern, not an enum), but the examples are where an
    integrator learns them (outside review: shoe_order_suspect was missing)."""
    import re
    import typing

    from shoed.core import integrity, view

    source = (ROOT / "shoed/core/engine.py").read_text()
    raised = set(re.findall(r'_alarm_momentary\(\s*"([a-z_]+)"', source))
    raised |= set(re.findall(r'_alarm_raise\([^,]+,\s*"([a-z_]+)"', source))
    raised |= set(typing.get_args(integrity.AlarmKind)) | set(view.ENTRY_HOLDS)
    assert {"bad_payload", "device_lost", "engine_error", "shoe_order_suspect"} <= raised
    examples = document["events"]["$defs"]["Alarm"]["properties"]["code"]["examples"]
    assert raised <= set(examples), sorted(raised - set(examples))


def test_the_roads_board_is_open_to_added_fields(document: dict[str, Any]) -> None:
    assert "additionalProperties\": false" not in json.dumps(document["roads"])
    assert "additionalProperties\": false" not in json.dumps(document["results"]["roads"])


def test_commands_are_strict_and_cover_the_spec(document: dict[str, Any]) -> None:
    commands = validator(document["commands"])
    ok = {"request_id": "r1", "command": "void_hand", "operator": "sup", "hand_no": 3,
          "reason": "misdeal"}
    commands.validate(ok)
    assert not commands.is_valid({**ok, "hand_number": 3})  # a typo is caught
    # text without control characters, as the daemon takes it (decisions.md 223)
    assert not commands.is_valid({**ok, "operator": "sup\u0000"})
    assert not commands.is_valid({**ok, "reason": "mis\u0085deal"})
    commands.validate({**ok, "reason": "misdeal,\n\tsee the log"})
    # every command of the spec with no fields of its own is valid as sent (`roads` once
    # had the board's schema: its model's name was taken by the board's)
    for bare in ("roads", "whoami", "recall"):
        commands.validate({"request_id": "r1", "command": bare, "operator": "op"})
    assert not commands.is_valid({k: v for k, v in ok.items() if k != "operator"})
    names = set(schemas.command_names())
    assert {"new_shoe", "close_betting", "manual_card", "resume", "void_hand", "void_shoe",
            "end_shoe", "realign", "cut_card", "report_misorder", "recall", "replay",
            "roads", "ack_alarm", "whoami"} <= names
    codes = document["response"]["$defs"]["CommandError"]["properties"]["code"]["enum"]
    assert {"unknown_hand", "forbidden", "request_id_conflict", "out_of_range",
            "retained_command_ignored"} <= set(codes)


def test_asyncapi_passes_the_official_parser() -> None:
    subprocess.run([str(ROOT / "scripts" / "bootstrap-node")], check=True)
    out = subprocess.run([sys.executable, "-m", "shoed.cli", "asyncapi"], check=True,
                         capture_output=True, text=True).stdout
    parsed = subprocess.run(["node", str(ROOT / "tools" / "asyncapi" / "validate.mjs")],
                            input=out, capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stdout + parsed.stderr
    diagnostics = [json.loads(line) for line in parsed.stdout.splitlines()]
    assert diagnostics[-1] == {"parsed": True, "problems": 0}
    assert not [d for d in diagnostics[:-1] if d["severity"] in ("error", "warning")]


def test_asyncapi_says_every_topic_qos_and_retained() -> None:
    doc = asyncapi.document()
    addresses = {c["address"] for c in doc["channels"].values()}
    assert addresses == {"{root}/status", "{root}/device", "{root}/state", "{root}/roads",
                         "{root}/events", "{root}/replay", "{root}/cmd",
                         "{root}/cmd/response", "{root}/cmd/by/{username}",
                         "{root}/cmd/response/{username}"}
    retained = {op["channel"]["$ref"].rsplit("/", 1)[-1]: op["bindings"]["mqtt"]["retain"]
                for op in doc["operations"].values()}
    assert retained == {"status": True, "device": True, "state": True, "roads": True,
                        "events": False, "replay": False, "cmd": False, "cmd_by_user": False}
    assert all(op["bindings"]["mqtt"]["qos"] == 1 for op in doc["operations"].values())
    will = doc["servers"]["site"]["bindings"]["mqtt"]["lastWill"]
    message = json.loads(will["message"])
    assert message["online"] is False and will["retain"]
    assert {"table_id", "instance", "run_id"} <= set(message)


def test_the_markdown_reference_is_up_to_date() -> None:
    committed = (ROOT / "docs" / "asyncapi.md").read_text()
    assert committed == markdown.render(asyncapi.document()), (
        "docs/asyncapi.md is stale: run scripts/gen-docs")


def _project(message: Any, schema: dict[str, Any], root: dict[str, Any]) -> Any:
    """The message cut down to the fields an old closed schema knew (recursively)."""
    if "$ref" in schema:
        return _project(message, root["$defs"][schema["$ref"].rsplit("/", 1)[-1]], root)
    if "oneOf" in schema and isinstance(message, dict):
        for branch in schema["oneOf"]:
            target = root["$defs"][branch["$ref"].rsplit("/", 1)[-1]]
            if target["properties"].get("type", {}).get("const") == message.get("type"):
                return _project(message, target, root)
    for branch in schema.get("anyOf", []):
        if isinstance(message, dict) and (branch.get("type") == "object" or "$ref" in branch):
            return _project(message, branch, root)
    if isinstance(message, dict) and "properties" in schema:
        return {k: _project(v, schema["properties"][k], root) for k, v in message.items()
                if k in schema["properties"]}
    if isinstance(message, list) and isinstance(schema.get("items"), dict):
        return [_project(v, schema["items"], root) for v in message]
    return message


def test_real_messages_validate_now_and_against_the_previous_release(
        tmp_path: pathlib.Path, broker: Any, document: dict[str, Any]) -> None:
    old = json.loads(FIXTURE.read_text())

    async def main() -> dict[str, Any]:
        async with rig(tmp_path, broker, decks=1, seed=3) as r:
            c = r.collector
            await wait_for(lambda: c.of("shoe_ended"), 60, "the shoe to end")
            answers = {}
            for name, fields in [("recall", {"hands": 3}), ("replay", {"from_seq": 1}),
                                 ("void_hand", {"hand_no": 999, "reason": "x"}),
                                 ("new_shoe", {"force": True}), ("end_shoe", {}),
                                 ("no_such", {})]:
                answers[name] = await c.send({"request_id": uuid.uuid4().hex,
                                              "command": name, "operator": "sup", **fields})
            answers["bad_json"] = await c.send("{not json")
            await asyncio.sleep(0.3)
            return {"events": c.events + c.replayed, "answers": answers,
                    "retained": dict(c.retained)}

    seen = asyncio.run(main())
    events_now, events_old = validator(document["events"]), validator(old["events"])
    kinds = set()
    old_kinds = {d["properties"]["type"]["const"] for d in old["events"]["$defs"].values()
                 if "const" in d.get("properties", {}).get("type", {})}
    for e in seen["events"]:
        events_now.validate(e)
        if e["type"] in old_kinds:  # an event type added since has no old schema to meet
            events_old.validate(_project(e, old["events"], old["events"]))
        kinds.add(e["type"])
    assert {"shoe_started", "card", "hand_result", "shoe_ended"} <= kinds
    validator(document["state"]).validate(seen["retained"]["state"])
    validator(old["state"]).validate(_project(seen["retained"]["state"], old["state"],
                                              old["state"]))
    validator(document["status"]).validate(seen["retained"]["status"])
    validator(document["device"]).validate(seen["retained"]["device"])
    response = validator(document["response"])
    for name, answer in seen["answers"].items():
        response.validate(answer)
        validator(old["response"]).validate(answer)
        if answer["ok"]:
            validator(document["results"][name]).validate(answer["result"])
    assert seen["answers"]["void_hand"]["error"]["code"] == "unknown_hand"
    assert seen["answers"]["bad_json"]["error"]["code"] == "invalid_json"
    # the will, as the daemon states it on a clean stop
    validator(document["status"]).validate({"online": False})
    assert not validator(document["status"]).is_valid({"online": "no"})
    assert copy.deepcopy(old) == json.loads(FIXTURE.read_text())

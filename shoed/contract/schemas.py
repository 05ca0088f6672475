"""JSON Schemas (2020-12) of every payload, generated from the pydantic models.

The core models describe what the daemon builds; this module turns pydantic's output
into the published contract: events and other published payloads open to added fields
(consumers ignore what they do not know), commands strict, `type` required and constant
per event, `format: date-time` on timestamps, card patterns, enums for error codes.
`shoed schema` prints :func:`schema_document`; `shoed asyncapi` embeds :func:`definitions`.
"""

from __future__ import annotations

import copy
import importlib
import json
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from shoed.core import commands as core_commands
from shoed.core import events as core_events

from . import models

DIALECT = "https://json-schema.org/draft/2020-12/schema"
ID_BASE = "https://schemas.shoed.example/v1/"
CARD_PATTERN = "^[A23456789TJQK][SHDC]$"
CODE_PATTERN = "^[a-z][a-z0-9_]*$"
DEFS_REF = "#/$defs/"

TIMESTAMP_FIELDS = frozenset({"ts", "drawn_at", "since", "started", "ended"})
CARD_FIELDS = frozenset({"card", "burn", "P1"})
CARD_LIST_FIELDS = frozenset({"player_cards", "banker_cards"})

# Commands of the spec the core may not model yet: written here so the contract is
# complete whatever this build's daemon accepts (the core's model wins once it exists).
_FALLBACK_COMMANDS: dict[str, dict[str, Any]] = {
    "roads": {},
    "whoami": {},
    "ack_alarm": {"alarm_id": {"type": "string", "minLength": 1, "maxLength": 200}},
}


def _walk(node: Any, visit: Any) -> None:
    if isinstance(node, dict):
        visit(node)
        for value in node.values():
            _walk(value, visit)
    elif isinstance(node, list):
        for value in node:
            _walk(value, visit)


def _strip_discriminator(node: dict[str, Any]) -> None:
    # pydantic writes OpenAPI's object form; 2020-12 has no such keyword and AsyncAPI
    # wants a plain property name. `oneOf` with a `const` per branch says it all.
    node.pop("discriminator", None)


def _string_branches(prop: dict[str, Any]) -> Iterable[dict[str, Any]]:
    if prop.get("type") == "string":
        yield prop
    for branch in prop.get("anyOf", []):
        if branch.get("type") == "string":
            yield branch


def _refine_properties(schema: dict[str, Any]) -> None:
    for name, prop in schema.get("properties", {}).items():
        if name in TIMESTAMP_FIELDS:
            for branch in _string_branches(prop):
                branch["format"] = "date-time"
        if name in CARD_FIELDS:
            for branch in _string_branches(prop):
                branch["pattern"] = CARD_PATTERN
        if name in CARD_LIST_FIELDS and prop.get("type") == "array":
            prop["items"] = {"type": "string", "pattern": CARD_PATTERN}


def _open(schema: dict[str, Any]) -> None:
    schema.pop("additionalProperties", None)


def _event_def(schema: dict[str, Any]) -> None:
    _open(schema)
    _refine_properties(schema)
    props = schema["properties"]
    props.setdefault("instance", {
        "type": "string", "title": "Instance",
        "description": "the journal's identity; with seq, the key of an event"})
    props["seq"]["minimum"] = 1
    props["event_id"]["minLength"] = 1
    props["instance"]["minLength"] = 1
    required = list(schema.get("required", []))
    for name in ("schema_version", "type", "event_id", "seq", "ts", "table_id"):
        if name not in required:
            required.append(name)
    schema["required"] = required
    if schema.get("title") == "HandResultEvent":
        # a result is always of a numbered hand (dealing-rules.md: from 1 per shoe)
        props["hand_no"] = {"type": "integer", "minimum": 1, "title": "Hand No"}
        if "hand_no" not in required:
            required.append("hand_no")
    if schema.get("title") == "Alarm":
        props["code"].update(pattern=CODE_PATTERN, examples=list(models.KNOWN_ALARM_CODES))


#: A command's text: no control characters but tab and line breaks (decisions.md 223).
TEXT_PATTERN = f"^[^{core_commands.CONTROL_CLASS}]*$"


def _command_def(schema: dict[str, Any]) -> None:
    schema["additionalProperties"] = False
    props = schema["properties"]
    for prop in props.values():
        if prop.get("type") == "string" and not {"pattern", "enum", "const"} & set(prop):
            prop["pattern"] = TEXT_PATTERN
    if "command" in props and "command" not in schema.get("required", []):
        schema.setdefault("required", []).append("command")


def _model_defs(classes: Iterable[type[BaseModel]]) -> dict[str, Any]:
    _, top = models_json_schema([(c, "serialization") for c in classes],
                                ref_template=DEFS_REF + "{model}")
    defs: dict[str, Any] = top.get("$defs", {})
    return defs


def roads_schema() -> dict[str, Any]:
    """The `{root}/roads` board (roads.md section 7).

    The core's model is used once it exists (`shoed.core.roads`, a pydantic model named
    `Roads`, `RoadsBoard` or `RoadsSnapshot`); until then this hand-written schema is the
    contract, written from roads.md.
    """
    try:
        module = importlib.import_module("shoed.core.roads")
    except ImportError:
        module = None
    for name in ("Roads", "RoadsBoard", "RoadsSnapshot", "RoadsMessage"):
        model = getattr(module, name, None)
        if isinstance(model, type) and issubclass(model, BaseModel):
            # Its nested models stay under "$defs": definitions() hoists them.
            return copy.deepcopy(model.model_json_schema(ref_template=DEFS_REF + "{model}"))
    cell = {"type": "object", "required": ["col", "row"],
            "properties": {"col": {"type": "integer", "minimum": 0},
                           "row": {"type": "integer", "minimum": 0}}}
    entry = {"type": "object",
             "required": ["hand_no", "winner", "player_pair", "banker_pair", "natural",
                          "col", "row"],
             "properties": {"hand_no": {"type": "integer"},
                            "winner": {"enum": ["banker", "player", "tie"]},
                            "ties": {"type": "integer", "minimum": 0},
                            "player_pair": {"type": "boolean"},
                            "banker_pair": {"type": "boolean"},
                            "natural": {"type": "boolean"},
                            "col": {"type": "integer", "minimum": 0},
                            "row": {"type": "integer", "minimum": 0}}}
    derived = {"type": "object", "required": ["marks", "cells"],
               "properties": {"marks": {"type": "array", "items": {"enum": ["red", "blue"]}},
                              "cells": {"type": "array", "items": cell}}}
    ask_side = {"type": "object", "properties": {
        road: {"anyOf": [{"enum": ["red", "blue"]}, {"type": "null"}]}
        for road in ("big_eye_boy", "small_road", "cockroach_pig")}}
    counts = ("hands", "banker", "player", "tie", "player_pair", "banker_pair", "natural",
              "longest_banker_streak", "longest_player_streak")
    return {
        "title": "Roads", "type": "object",
        "description": "the scoreboard of the current shoe; `seq` is the last event it "
                       "reflects (roads.md section 7)",
        "required": ["schema_version", "seq", "shoe_id", "rows", "tail_mode", "bead_plate",
                     "big_road", "big_eye_boy", "small_road", "cockroach_pig", "ask",
                     "stats"],
        "properties": {
            "schema_version": {"const": 1, "type": "integer"},
            "seq": {"type": "integer", "minimum": 0},
            "instance": {"type": "string"},
            "shoe_id": {"type": ["string", "null"]},
            "rows": {"type": "integer", "minimum": 1},
            "tail_mode": {"type": "string"},
            "bead_plate": {"type": "array", "items": entry},
            "big_road": {"type": "array", "items": entry},
            "big_eye_boy": derived, "small_road": derived, "cockroach_pig": derived,
            "ask": {"type": "object", "properties": {"banker": ask_side, "player": ask_side}},
            "stats": {"type": "object", "properties": {
                **{name: {"type": "integer", "minimum": 0} for name in counts},
                "current_streak": {"anyOf": [{"type": "null"}, {
                    "type": "object", "properties": {
                        "side": {"enum": ["banker", "player"]},
                        "length": {"type": "integer", "minimum": 0}}}]}}},
        },
    }


def event_names() -> dict[str, str]:
    """Event type -> its definition name."""
    return {cls.model_fields["type"].default: cls.__name__ for cls in core_events.EVENT_TYPES}


def command_names() -> dict[str, str]:
    """Command name -> its definition name (the core's, or a fallback's)."""
    found: dict[str, str] = {}
    schema = core_commands.COMMAND_ADAPTER.json_schema(ref_template=DEFS_REF + "{model}")
    for name, definition in schema.get("$defs", {}).items():
        command = definition.get("properties", {}).get("command", {}).get("const")
        if command:
            found[command] = name
    for command in _FALLBACK_COMMANDS:
        found.setdefault(command, _fallback_name(command))
    return found


def _fallback_name(command: str) -> str:
    return "".join(part.title() for part in command.split("_")) + "Command"


def definitions() -> dict[str, Any]:
    """Every named schema of the contract, refs as `#/$defs/<name>`."""
    defs: dict[str, Any] = {}
    event_schema = core_events.EVENT_ADAPTER.json_schema(
        ref_template=DEFS_REF + "{model}", mode="serialization")
    for name, schema in event_schema["$defs"].items():
        defs[name] = schema
    for name in event_names().values():
        _event_def(defs[name])

    command_schema = core_commands.COMMAND_ADAPTER.json_schema(ref_template=DEFS_REF + "{model}")
    for name, schema in command_schema.get("$defs", {}).items():
        defs[name] = schema
        _command_def(schema)
    present = {d.get("properties", {}).get("command", {}).get("const") for d in defs.values()}
    for command, fields in _FALLBACK_COMMANDS.items():
        if command in present:
            continue
        defs[_fallback_name(command)] = {
            "title": _fallback_name(command), "type": "object", "additionalProperties": False,
            "required": ["request_id", "command", "operator", *fields],
            "properties": {
                "request_id": {"type": "string", "minLength": 1, "maxLength": 200,
                               "pattern": TEXT_PATTERN},
                "operator": {"type": "string", "minLength": 1, "maxLength": 200,
                             "pattern": TEXT_PATTERN},
                "command": {"const": command, "type": "string"}, **fields}}

    state = core_events.StateSnapshot.model_json_schema(ref_template=DEFS_REF + "{model}")
    for name, schema in state.pop("$defs", {}).items():
        defs[name] = schema
    defs["StateSnapshot"] = state
    for name in [n for n in defs if n.startswith("State")]:
        _open(defs[name])
        _refine_properties(defs[name])
    defs["StateSnapshot"]["properties"].setdefault("instance", {
        "type": "string", "description": "the journal's identity"})

    published: list[type[BaseModel]] = [models.Status, models.Will, models.Device, models.Answer,
                 *[m for m in models.RESULTS.values() if m is not None]]
    for name, schema in _model_defs(published).items():
        defs[name] = schema
        _open(schema)
        _refine_properties(schema)
    defs["CommandError"]["properties"]["code"] = {
        "enum": list(models.ERROR_CODES), "type": "string",
        "description": "why the command was refused"}
    defs["Status"]["properties"]["ts"]["description"] = (
        "host time of this status, seconds since the Unix epoch (a number, not a string)")

    roads = roads_schema()
    for name, schema in roads.pop("$defs", {}).items():
        defs.setdefault(name, schema)
    # Published: open to fields added later, like every other published payload (the
    # commands, which the daemon reads, stay closed).
    _open(roads)
    strict = set(command_names().values())
    for name in _referenced(roads, defs) - strict:
        _open(defs[name])
    assert "Roads" not in defs, "a command or event model named Roads would hide the board"
    defs["Roads"] = roads
    _walk(defs, _strip_discriminator)
    return defs


def _document(defs: dict[str, Any], name: str, body: dict[str, Any]) -> dict[str, Any]:
    used = _referenced(body, defs)
    out = {"$schema": DIALECT, "$id": f"{ID_BASE}{name}.json", **body}
    if used:
        out["$defs"] = {n: defs[n] for n in sorted(used)}
    return out


def _refs_in(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for value in node.values() for r in _refs_in(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs_in(value)]
    return []


def _referenced(body: Any, defs: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    pending = [body]
    while pending:
        for ref in _refs_in(pending.pop()):
            name = ref.removeprefix(DEFS_REF)
            if name not in found and name in defs:
                found.add(name)
                pending.append(defs[name])
    return found


def ref(name: str) -> dict[str, str]:
    return {"$ref": DEFS_REF + name}


def schema_document() -> dict[str, Any]:
    """What `shoed schema` prints: one standalone 2020-12 schema per payload kind."""
    defs = definitions()
    events = event_names()
    commands = command_names()
    results = {command: (ref(model.__name__) if model is not None else ref("Roads"))
               for command, model in models.RESULTS.items()}
    return {
        "events": _document(defs, "events", {
            "title": "Event", "description": "one message of {root}/events or {root}/replay",
            "oneOf": [ref(n) for n in events.values()]}),
        "commands": _document(defs, "commands", {
            "title": "Command", "oneOf": [ref(n) for n in commands.values()]}),
        "state": _document(defs, "state", ref("StateSnapshot")),
        "response": _document(defs, "response", ref("Answer")),
        "status": _document(defs, "status", {"oneOf": [ref("Status"), ref("Will")]}),
        "device": _document(defs, "device", ref("Device")),
        "roads": _document(defs, "roads", ref("Roads")),
        "results": {command: _document(defs, f"results/{command}", body)
                    for command, body in results.items()},
    }


def dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2)

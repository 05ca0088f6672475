"""The AsyncAPI 3.0 document of shoed's MQTT interface (mqtt-api.md), generated from the
same models as `shoed schema` (see :mod:`shoed.contract.schemas`).

The document describes the daemon: `send` operations are what it publishes, `receive`
operations what it takes. Every payload schema lives in `components.schemas`; references
are rewritten from `#/$defs/` to `#/components/schemas/`.
"""

from __future__ import annotations

import json
from typing import Any

from shoed import __version__

from . import models, schemas

COMPONENTS_REF = "#/components/schemas/"
MQTT_BINDING = "0.2.0"

ROOT_PARAMETER: dict[str, Any] = {
    "description": "the configured mqtt.topic_prefix, by default `shoed/{table id}` "
                   "(for example `shoed/T01`)",
    "examples": ["shoed/T01"],
}
USER_PARAMETER: dict[str, Any] = {
    "description": "the authenticated broker user (the broker's ACL lets each user write "
                   "only their own command topic and read only their own answers)",
    "examples": ["gs-1"],
}

# (channel key, address, what, messages, qos, retained)
_PUBLISHED = [
    ("status", "{root}/status",
     "`online: true` once connected; the MQTT will sets `online: false`", ["status", "will"],
     True),
    ("device", "{root}/device", "the shoe as the daemon last saw it", ["device"], True),
    ("state", "{root}/state",
     "the table snapshot, republished after every input that changed it (never before the "
     "events it reflects were sent) and after every reconnect", ["state"], True),
    ("roads", "{root}/roads", "the scoreboard of the current shoe (roads.md)", ["roads"],
     True),
]


def _components_refs(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and value.startswith(schemas.DEFS_REF):
                out[key] = COMPONENTS_REF + value.removeprefix(schemas.DEFS_REF)
            else:
                out[key] = _components_refs(value)
        return out
    if isinstance(node, list):
        return [_components_refs(value) for value in node]
    return node


def _schema_ref(name: str) -> dict[str, str]:
    return {"$ref": COMPONENTS_REF + name}


def _msg_ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/messages/{name}"}


def _bindings(retained: bool) -> dict[str, Any]:
    return {"mqtt": {"qos": 1, "retain": retained, "bindingVersion": MQTT_BINDING}}


def _answer_payload(command: str, result: str) -> dict[str, Any]:
    return {"allOf": [_schema_ref("Answer"), {
        "type": "object",
        "properties": {"command": {"const": command, "type": "string"},
                       "result": {"anyOf": [_schema_ref(result), {"type": "null"}]}}}]}


def document() -> dict[str, Any]:
    """The AsyncAPI 3.0 document as a dict (JSON-serialisable)."""
    defs = _components_refs(schemas.definitions())
    events = schemas.event_names()
    commands = schemas.command_names()
    messages: dict[str, Any] = {}
    for kind, name in events.items():
        messages[f"event_{kind}"] = {
            "name": kind, "title": f"event {kind}", "contentType": "application/json",
            "summary": defs[name].get("description") or f"the `{kind}` event",
            "payload": _schema_ref(name)}
    for command, name in commands.items():
        messages[f"command_{command}"] = {
            "name": command, "title": f"command {command}", "contentType": "application/json",
            "summary": f"the `{command}` command", "payload": _schema_ref(name)}
        result = models.RESULTS.get(command)
        result_name = "Roads" if result is None else result.__name__
        messages[f"answer_{command}"] = {
            "name": f"{command}_answer", "title": f"answer to {command}",
            "contentType": "application/json",
            "summary": f"the answer to `{command}`; `result` when ok",
            "payload": _answer_payload(command, result_name)}
    messages["answer_rejected"] = {
        "name": "rejected", "title": "answer to an unreadable command",
        "contentType": "application/json",
        "summary": "a payload that is not valid JSON, misses a field or names an unknown "
                   "command: `ok: false`, `request_id` null when none could be read",
        "payload": _schema_ref("Answer")}
    messages["status"] = {"name": "status", "contentType": "application/json",
                          "summary": "the daemon is online", "payload": _schema_ref("Status")}
    messages["will"] = {"name": "will", "contentType": "application/json",
                        "summary": "the MQTT will (and the daemon's last word when it stops)",
                        "payload": _schema_ref("Will")}
    messages["device"] = {"name": "device", "contentType": "application/json",
                          "summary": "the shoe device", "payload": _schema_ref("Device")}
    messages["state"] = {"name": "state", "contentType": "application/json",
                         "summary": "the table snapshot; `seq` is the last event it reflects",
                         "payload": _schema_ref("StateSnapshot")}
    messages["roads"] = {"name": "roads", "contentType": "application/json",
                         "summary": "the roads board", "payload": _schema_ref("Roads")}

    event_msgs = {f"event_{k}": _msg_ref(f"event_{k}") for k in events}
    command_msgs = {f"command_{c}": _msg_ref(f"command_{c}") for c in commands}
    answer_msgs = {f"answer_{c}": _msg_ref(f"answer_{c}") for c in [*commands, "rejected"]}
    params = {"root": ROOT_PARAMETER}
    user_params = {"root": ROOT_PARAMETER, "username": USER_PARAMETER}
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for key, address, what, msgs, retained in _PUBLISHED:
        channels[key] = {"address": address, "title": key, "description": what,
                         "parameters": params, "messages": {m: _msg_ref(m) for m in msgs}}
        operations[f"publish_{key}"] = {
            "action": "send", "channel": {"$ref": f"#/channels/{key}"},
            "summary": f"{key}: QoS 1, retained", "bindings": _bindings(retained),
            "messages": [{"$ref": f"#/channels/{key}/messages/{m}"} for m in msgs]}
    for key, address, what in (
            ("events", "{root}/events",
             "every event, one ordered stream; at least once: deduplicate by `event_id`, "
             "key on (`instance`, `seq`)"),
            ("replay", "{root}/replay", "events re-sent unchanged by the `replay` command")):
        channels[key] = {"address": address, "title": key, "description": what,
                         "parameters": params, "messages": event_msgs}
        operations[f"publish_{key}"] = {
            "action": "send", "channel": {"$ref": f"#/channels/{key}"},
            "summary": f"{key}: QoS 1, not retained", "bindings": _bindings(False),
            "messages": [{"$ref": f"#/channels/{key}/messages/{m}"} for m in event_msgs]}
    for key, address, answers, what, parameters in (
            ("cmd", "{root}/cmd", "cmd_response",
             "commands on the shared topic (sender `anonymous`, whose role is configured; "
             "default `supervisor`)", params),
            ("cmd_by_user", "{root}/cmd/by/{username}", "cmd_response_user",
             "commands from one authenticated broker user (`authenticated_as`)", user_params)):
        channels[key] = {"address": address, "title": key, "description": what,
                         "parameters": parameters, "messages": command_msgs}
        response_address = address.replace("/cmd", "/cmd/response", 1).replace(
            "/response/by/", "/response/")
        channels[answers] = {
            "address": response_address, "title": answers,
            "description": "exactly one answer per command, echoing `request_id` and "
                           "`command`; a repeated `request_id` gets the original answer",
            "parameters": parameters, "messages": answer_msgs}
        operations[f"take_{key}"] = {
            "action": "receive", "channel": {"$ref": f"#/channels/{key}"},
            "summary": f"{address}: QoS 1, never retained (a retained command is refused "
                       "`retained_command_ignored`)",
            "bindings": _bindings(False),
            "messages": [{"$ref": f"#/channels/{key}/messages/{m}"} for m in command_msgs],
            "reply": {"channel": {"$ref": f"#/channels/{answers}"},
                      "messages": [{"$ref": f"#/channels/{answers}/messages/{m}"}
                                   for m in answer_msgs]}}
    return {
        "asyncapi": "3.0.0",
        "id": "urn:shoed:mqtt-api",
        "info": {
            "title": "shoed MQTT interface",
            "version": __version__,
            "description": "What an electronic baccarat shoe's controller publishes and "
                           "takes over MQTT. Names are a contract: fields are added, never "
                           "renamed; consumers ignore fields they do not know. Error codes: "
                           + ", ".join(f"`{c}`" for c in models.ERROR_CODES) + ".",
            "license": {"name": "Proprietary"},
            "contact": {"name": "shoed maintainers"},
        },
        "defaultContentType": "application/json",
        "servers": {
            "site": {
                "host": "broker.casino.example:8883", "protocol": "secure-mqtt",
                "protocolVersion": "5",
                "description": "the site broker: TLS, a user and password (or a client "
                               "certificate) per client, an ACL per topic; MQTT 3.1.1 "
                               "brokers work too (`mqtt.protocol = \"3.1.1\"`)",
                "security": [{"$ref": "#/components/securitySchemes/user_password"},
                             {"$ref": "#/components/securitySchemes/client_certificate"}],
                "bindings": {"mqtt": {
                    "cleanSession": False, "keepAlive": 30, "bindingVersion": MQTT_BINDING,
                    "lastWill": {"topic": "{root}/status", "qos": 1, "retain": True,
                                 "message": json.dumps({
                                     "online": False, "table_id": "T01",
                                     "instance": "<the journal's instance>",
                                     "run_id": "<the run that went offline>"})}}}},
            "demo": {"host": "127.0.0.1:1883", "protocol": "mqtt", "protocolVersion": "5",
                     "description": "`shoed demo`'s private Mosquitto (anonymous, loopback)"},
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "schemas": defs,
            "messages": messages,
            "securitySchemes": {
                "user_password": {"type": "userPassword",
                                  "description": "the broker's user; the ACL maps users to "
                                                 "topics and the daemon maps users to roles "
                                                 "(game_server, auditor, supervisor)"},
                "client_certificate": {"type": "X509",
                                       "description": "mutual TLS (mqtt.cert_file/key_file)"},
            },
        },
    }


def dumps() -> str:
    return json.dumps(document(), indent=2)

"""Device messages -> engine inputs, and the one place inputs get their time stamps."""

from __future__ import annotations

import time
from typing import Any

from firmware_protocol import Card, CardUnread, CutCard, Fault, Hello, Malformed, ShoeLoaded
from firmware_protocol.framing import PROTOCOL_VERSION
from firmware_protocol.messages import OpticalCode, RfidCode, UnidentifiedCode, pull_problem
from shoed.core.inputs import DeviceFault, DeviceHello, DeviceItem, DeviceShoeLoaded, Input, Notice
from shoed.store.uptime import Uptime

PULL_TYPES = (Card.TYPE, CardUnread.TYPE, CutCard.TYPE)


def stamp(uptime: Uptime | None) -> dict[str, Any]:
    """The time fields every input built by the shell carries: `at`, wall time now (for
    timestamps), and `mono`, the journal's uptime (for every duration: an NTP step of the
    wall clock moves no timeout; docs/decisions.md, "clocks")."""
    return {"at": time.time(), "mono": uptime.now() if uptime is not None else None}


def _plain(x: float) -> bool:
    """A float whose repr() is pydantic-core's JSON of it (Python writes 1e-05 where
    pydantic-core writes 0.00001: below 1e-4; both write 1e+16 from 1e16 on)."""
    return 1e-4 <= x < 1e16 or x == 0.0


def card_record(message: Any, stamped: dict[str, Any], min_quality: int) -> str | None:
    """The record's JSON of the one input a plain card frame makes (an optical code read
    well, the payload whole, the times ordinary), written without building the input's
    model: byte for byte ``message_to_inputs(...)[0].model_dump_json()`` (Hypothesis
    checks it, tests/test_card_record.py), so the model can be built after the ACK,
    off the card-to-ACK path. None for any other frame: its inputs are built first, as
    always."""
    if type(message) is not Card or message.problem is not None:
        return None
    identity = message.identity
    # The payload's problem (Card.payload_problem) is, for a code read as optical, its
    # pull fields': asked directly, the code is not decoded a second time.
    if type(identity) is not OpticalCode or message.quality < min_quality \
            or pull_problem(message.pull_pos, message.pull_size) is not None:
        return None
    at, mono = stamped["at"], stamped["mono"]
    if type(at) is not float or not _plain(at) or (
            mono is not None and (type(mono) is not float or not _plain(mono))):
        return None
    return (f'{{"at":{at!r},"mono":{"null" if mono is None else repr(mono)},'
            f'"kind":"item","item":"card","pull_id":{message.pull_id:d},'
            f'"pull_pos":{message.pull_pos:d},"pull_size":{message.pull_size:d},'
            f'"device_card_index":{message.card_index:d},"card":"{identity.notation}",'
            '"status":"read","uid":null,"problem":null}')


def card_input(body: str) -> DeviceItem:
    """The input of a plain card frame, from its record's JSON (:func:`card_record`): the
    model a restart replays from the journal, equal to ``message_to_inputs``'s (Hypothesis
    checks it). Built straight by the model's compiled validator, it skips the message's
    code decoded twice more and the keyword model's Python: met cold, after the ACK, it
    takes ~40 % less (docs/performance.md, "Twentieth pass")."""
    validated: DeviceItem = DeviceItem.__pydantic_validator__.validate_json(body)
    return validated


def message_to_inputs(message: Any, stamped: dict[str, Any], manifest: dict[str, str] | None,
                      min_quality: int) -> list[Input]:
    """Translate one decoded device message into engine inputs (maybe none); `stamped`
    is :func:`stamp`'s result for the frame."""
    if isinstance(message, Hello):
        hello: list[Input] = [DeviceHello(**stamped, boot_id=message.boot_id,
                                          capabilities=message.capabilities,
                                          fw_version=message.fw_version,
                                          serial_no=message.serial_no)]
        if message.proto_version != PROTOCOL_VERSION:
            # Its frames passed the header's version check, so they are read as this
            # version's; the shoe claiming another is said, not ignored (decisions.md 222).
            hello.append(Notice(**stamped, code="protocol_mismatch", message=(
                f"the shoe's HELLO says protocol version {message.proto_version}, this host "
                f"speaks {PROTOCOL_VERSION}: its frames are read as version "
                f"{PROTOCOL_VERSION}")))
        return hello
    if isinstance(message, ShoeLoaded):
        return [DeviceShoeLoaded(**stamped)]
    if isinstance(message, Fault):
        return [DeviceFault(**stamped, code=message.code, active=bool(message.active))]
    if isinstance(message, Card):
        identity = message.identity
        base = {**stamped, "pull_id": message.pull_id, "pull_pos": message.pull_pos,
                "pull_size": message.pull_size, "device_card_index": message.card_index,
                "problem": message.payload_problem}
        if isinstance(identity, OpticalCode):
            if message.quality < min_quality:
                return [DeviceItem(item="unread", **base)]
            return [DeviceItem(item="card", card=identity.notation, **base)]
        if isinstance(identity, RfidCode):
            card = (manifest or {}).get(identity.uid_hex)
            if card is None:
                return [DeviceItem(item="card", status="foreign", uid=identity.uid_hex, **base)]
            if message.quality < min_quality:
                return [DeviceItem(item="unread", uid=identity.uid_hex, **base)]
            return [DeviceItem(item="card", card=card, uid=identity.uid_hex, **base)]
        assert isinstance(identity, UnidentifiedCode)
        return [DeviceItem(item="unread", **base)]
    if isinstance(message, CardUnread):
        return [DeviceItem(**stamped, item="unread", pull_id=message.pull_id,
                           pull_pos=message.pull_pos, pull_size=message.pull_size,
                           device_card_index=message.card_index,
                           problem=message.payload_problem)]
    if isinstance(message, CutCard):
        return [DeviceItem(**stamped, item="cut", pull_id=message.pull_id,
                           pull_pos=message.pull_pos, pull_size=message.pull_size,
                           problem=message.payload_problem)]
    if isinstance(message, Malformed):
        problem = f"type 0x{message.type_code:02x}: {message.problem}"
        if message.type_code in PULL_TYPES:
            # Pull fields unreadable: an item left the shoe, the pull is incomplete.
            item = "cut" if message.type_code == CutCard.TYPE else "unread"
            return [DeviceItem(**stamped, item=item, pull_id=None, pull_pos=None,
                               pull_size=None, problem=problem)]
        return [Notice(**stamped, code="bad_payload", message=problem)]
    return []  # HEARTBEAT: its content need not be kept

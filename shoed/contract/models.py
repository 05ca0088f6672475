"""Models of the payloads that have no model in the core: status, device, the will,
the answer envelope and every command's `result` (mqtt-api.md sections 1 and 4).

These are documentation models: the daemon builds these payloads as dicts; the schemas
generated from here are checked against what it really publishes (tests/test_contract.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shoed.core import commands as core_commands

# Every `error.code` an answer can carry (mqtt-api.md section 4, integrity.md section 2).
ERROR_CODES = core_commands.ERROR_CODES  # one list: shoed/core/commands.py

# Alarm codes known today. The list is open (a new detector adds a code): the schema
# gives these as examples and a pattern, not as an enum (docs/decisions.md).
KNOWN_ALARM_CODES: tuple[str, ...] = (
    "card_unread", "foreign_card", "excess_card", "duplicate_uid", "cards_lost",
    "incomplete_pull", "bad_payload", "protocol_mismatch", "device_lost", "device_rebooted",
    "device_fault", "storage_failed", "shoe_loaded_in_play", "cut_card_in_commencement",
    "card_exposed_during_betting", "shoe_unshuffled", "shoe_order_suspect",
    "table_id_conflict", "engine_error", "journal_corrupt",
)

ROLES = ("game_server", "auditor", "supervisor")


class _Open(BaseModel):
    """Published by the daemon: consumers ignore fields they do not know."""

    model_config = ConfigDict(extra="allow")


class Status(_Open):
    """`{root}/status` (retained) while the daemon is connected."""

    online: Literal[True]
    table_id: str
    version: str
    instance: str | None = Field(default=None, description="the journal's identity")
    device_connected: bool
    broker_url: str | None = Field(default=None, description="the broker of mqtt.url this "
                                   "status was published through (one of the list)")
    storage_ok: bool
    storage_error: str | None
    # The journal failed its integrity check while the daemon ran: what was found (the
    # next start refuses the journal; alarm `journal_corrupt` is held meanwhile). Added.
    journal_corrupt: str | None = None
    outbox: int = Field(description="events journalled and not yet acknowledged by the broker")
    clock_synchronised: bool | None
    warnings: list[str]
    ts: float = Field(description="host time of this status, seconds since the Unix epoch")
    run_id: str | None = Field(default=None, description="this run of the daemon (a new one "
                               "at every start): two daemons on one root differ in it")
    online_since: float | None = Field(
        default=None, description="when this run first connected to the broker, seconds "
                                  "since the Unix epoch (host time)")


class Will(_Open):
    """`{root}/status` as the broker publishes it when the daemon's connection is lost
    (the MQTT will), and as the daemon publishes it when it stops."""

    online: Literal[False]
    table_id: str | None = None
    instance: str | None = Field(default=None, description="the journal's identity")
    run_id: str | None = Field(default=None, description="the run of the daemon that went "
                               "offline")


class Device(_Open):
    """`{root}/device` (retained): the shoe as the daemon last saw it."""

    connected: bool
    transport: Literal["serial", "usb"]
    firmware: str | None
    serial_no: str | None
    boot_id: int | str | None
    capabilities: list[str]
    last_seen: float | None = Field(
        description="host time of the shoe's last valid frame, seconds since the Unix "
                    "epoch (the retained topics' times are epoch seconds; events' are "
                    "ISO 8601 UTC)")
    faults: list[Any]
    storage_ok: bool


class PreviousInstance(_Open):
    """The journal the current one replaced, when it was moved aside (`--new-journal`)."""

    instance: str = Field(description="its instance id")
    last_seq: int | None = Field(
        description="the seq of the last event its database held when it was moved aside "
                    "(null when it could not be read); a consumer whose cursor in it is "
                    "lower did not get the events after its cursor")
    more_possible: bool = Field(
        default=True,
        description="true when events after last_seq may have been published all the "
                    "same: the journal's record log held inputs its database lacked (a "
                    "crash before their events were written) or could not be read, or "
                    "last_seq is null; a consumer cannot tell whether it got them "
                    "(added; absent from a daemon before it: take it as true)")


class CommandError(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str
    message: str
    roles: list[str] | None = Field(
        default=None, description="`forbidden`: the roles that may send the command")
    first_seq: int | None = Field(
        default=None, description="`out_of_range`: the first event the journal holds "
                                  "(0 with `last_seq` 0 when it holds none)")
    last_seq: int | None = Field(
        default=None, description="`out_of_range`: the last event the journal holds")
    instance: str | None = Field(
        default=None, description="`out_of_range`: the journal those seqs count in")
    previous_instance: PreviousInstance | None = Field(
        default=None, description="`out_of_range` of `replay`: as in its result")


class Answer(_Open):
    """One answer per command, on `{root}/cmd/response` or `{root}/cmd/response/{user}`."""

    request_id: str | None
    ok: bool
    command: str | None = Field(default=None, description="echoes the command's name")
    error: CommandError | None
    result: Any
    ignored_fields: list[str] | None = Field(
        default=None, description="top-level fields the command does not take: ignored "
                                  "(fields are added over time), named so that a misspelt "
                                  "one is noticed; absent when there are none")


# -- the `result` of each command (open objects) ------------------------------------------


class NewShoeResult(_Open):
    shoe_id: str


class CloseBettingResult(_Open):
    hand_no: int
    repeat: bool = False


class ManualCardResult(_Open):
    card_index: int
    card: str


class ResumeResult(_Open):
    resumed: list[str]


class VoidHandResult(_Open):
    hand_no: int
    result_withdrawn: bool


class EmptyResult(_Open):
    """`void_shoe`, `cut_card`, `report_misorder` (and `end_shoe`, `realign`): nothing
    beyond ok; `end_shoe` says `repeat: true` when the shoe was already ending,
    `realign` names the `hand_no` a card moved into, and `void_shoe` says `already:
    "shoe_voided"` (or `"shoe_ended"`) when the cards of a pull still pending, applied
    first, ended the shoe themselves (burn_then_void's unnecessary cards): the shoe is
    over and nothing more was done."""


class RecalledCard(_Open):
    card_index: int
    card: str | None
    position: str
    source: Literal["shoe", "manual"]


class RecalledHand(_Open):
    shoe_id: str
    hand_no: int
    cards: list[RecalledCard]
    result: dict[str, Any] | None
    voided: dict[str, Any] | None
    supervisor_actions: list[dict[str, Any]]
    misorders: list[Any]


class RecalledAlarm(_Open):
    """One alarm event of the current shoe, as its `alarm` event said it."""

    seq: int
    ts: str
    alarm_id: str
    code: str
    active: bool = Field(description="raised (true) or cleared (false)")
    momentary: bool
    message: str
    hand_no: int | None
    card_index: int | None


class RecallResult(_Open):
    hands: list[RecalledHand] = Field(description="newest first")
    shoe_reports: list[dict[str, Any]] | None = None
    alarm_history: list[RecalledAlarm] | None = Field(
        default=None,
        description="the current shoe's alarm events (raises and clears), newest first, "
                    "at most the newest 100 (added; empty without a shoe)")


class ReplayResult(_Open):
    from_seq: int
    to_seq: int
    count: int
    next_from_seq: int | None = Field(
        default=None, description="where the next replay goes on; null when all was sent")
    instance: str | None = Field(
        default=None, description="the journal the seqs count in (the daemon's current "
                                  "one: a consumer learns from it which journal is live)")
    previous_instance: PreviousInstance | None = Field(
        default=None, description="the journal this one replaced, when it was moved aside "
                                  "here: absent otherwise (added)")


class AckAlarmResult(_Open):
    alarm_id: str


class WhoamiResult(_Open):
    authenticated_as: str
    role: Literal["game_server", "auditor", "supervisor"]
    commands: list[str]


RESULTS: dict[str, type[BaseModel] | None] = {
    "new_shoe": NewShoeResult, "close_betting": CloseBettingResult,
    "manual_card": ManualCardResult, "resume": ResumeResult, "void_hand": VoidHandResult,
    "void_shoe": EmptyResult, "end_shoe": EmptyResult, "realign": EmptyResult,
    "cut_card": EmptyResult, "report_misorder": EmptyResult, "recall": RecallResult,
    "replay": ReplayResult, "roads": None,  # the roads board: see schemas.roads_schema()
    "ack_alarm": AckAlarmResult, "whoami": WhoamiResult,
}

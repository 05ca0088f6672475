"""CommandDesk: every command gets exactly one answer, and nothing is applied twice.

parse -> (sender, request_id) memory -> retained / expired / role -> commit (input, events
and answer in one fsynced transaction) -> answer. The sender is the broker user of
`{root}/cmd/by/{user}` (the broker's ACL lets each user write only their own topic), or
`anonymous` on the bare `{root}/cmd`.

The memory is the journal's `responses` table, keyed by (sender, request_id) with the
command's fingerprint: the same key and body get the original answer again (and nothing
is applied or re-sent, a `replay` included), the same key with another body is refused
`request_id_conflict`. `whoami` and `replay` are answered here (`replay` reads the
journal; the MQTT service re-sends the events from its own task), every other command is
the engine's. Whatever goes wrong while handling one command is answered
`internal_error`: the desk never raises.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from shoed.config import Settings
from shoed.core.commands import (
    ANONYMOUS,
    DEFAULT_LIMITS,
    IGNORED_FIELDS_MAX_BYTES,
    ROLE_COMMANDS,
    ROLES,
    SHELL_COMMANDS,
    Command,
    CommandRejection,
    ParseLimits,
    Replay,
    Role,
    fingerprint,
    ignored_fields,
    parse_command,
)
from shoed.core.engine import Output
from shoed.core.inputs import CommandInput
from shoed.device.inputs import stamp
from shoed.store.recorder import Recorder
from shoed.store.statedir import StorageError

REPLAY_CHUNK = 200  # events read from the journal at a time while a replay is re-sent
ANSWER_OVERHEAD = 1024  # bytes of an answer's packet besides its payload (topic, properties)
# An MQTT 5 response topic and correlation data together are honoured up to this many
# bytes: within ANSWER_OVERHEAD with the packet's own header and content type. Longer,
# they could make the answer's packet bigger than the broker takes, and the broker would
# drop the daemon's connection, again at every redelivery of the unacknowledged command
# (outside review); such a command is refused `too_large`, nothing applied.
RESPONSE_PROPERTIES_MAX = 768


@dataclass(frozen=True)
class Incoming:
    """One command message as the MQTT service received it."""

    payload: bytes | str
    sender: str = ANONYMOUS  # the user of `{root}/cmd/by/{user}`, or anonymous
    retained: bool = False  # it arrived with the retain flag (never applied)
    expires_in: float | None = None  # MQTT 5 message expiry left when it reached the daemon
    waited: float = 0.0  # seconds it waited inside the daemon before being handled
    # bytes of the MQTT 5 response topic (where honoured) and correlation data its answer
    # would carry; over RESPONSE_PROPERTIES_MAX it is answered without them
    response_bytes: int = 0


@dataclass(frozen=True)
class ReplayPage:
    """The events one `replay` answer covers, re-sent on `{root}/replay` before it."""

    from_seq: int
    to_seq: int
    count: int


@dataclass
class Answer:
    body: dict[str, Any] | None  # the answer's payload; None: nothing to send
    replay: ReplayPage | None = None


def answer_body(request_id: str | None, command: str | None, sender: str,
                out: Output) -> dict[str, Any]:
    error = None if out.error is None else {"code": out.error.code, "message": out.error.message}
    return {"request_id": request_id, "command": command, "authenticated_as": sender,
            "ok": bool(out.ok), "error": error, "result": out.result if out.ok else None}


def refusal(request_id: str | None, code: str, message: str | None,
            command: str | None = None, sender: str = ANONYMOUS,
            **extra: Any) -> dict[str, Any]:
    return {"request_id": request_id, "command": command, "authenticated_as": sender,
            "ok": False, "error": {"code": code, "message": message, **extra}, "result": None}


def success(request_id: str, command: str, sender: str, result: Any) -> dict[str, Any]:
    return {"request_id": request_id, "command": command, "authenticated_as": sender,
            "ok": True, "error": None, "result": result}


def roles_allowing(command: str) -> list[Role]:
    return [role for role in ROLES if command in ROLE_COMMANDS[role]]


class CommandDesk:
    def __init__(self, recorder: Recorder, log: Any, settings: Settings | None = None) -> None:
        self.recorder = recorder
        self.log = log
        self.settings = settings
        self.limits: ParseLimits = settings.commands.limits() if settings else DEFAULT_LIMITS
        self.replay_max = settings.replay.max_events if settings else 1000
        # The broker's maximum packet size (CONNACK under MQTT 5, [commands] under 3.1.1):
        # the MQTT service sets it on every connect.
        self.max_packet = settings.commands.max_packet_size if settings else 256 * 1024
        self.handled = 0

    def role_of(self, sender: str) -> Role | None:
        if self.settings is None:
            return "supervisor"
        return self.settings.role_of(sender)

    def handle(self, payload: bytes | str | Incoming) -> Answer:
        """One command's single answer (or none: a retained command answered before).
        Never raises."""
        incoming = payload if isinstance(payload, Incoming) else Incoming(payload)
        self.handled += 1
        try:
            answer = self._handle(incoming)
        except Exception as error:
            parsed = parse_command(incoming.payload, self.limits)
            self.log.exception("command_failed", sender=incoming.sender,
                               request_id=parsed.request_id,
                               command=getattr(parsed, "command", None),
                               error=f"{type(error).__name__}: {error}")
            return Answer(refusal(parsed.request_id, "internal_error",
                                  f"the command could not be handled ({type(error).__name__}); "
                                  "nothing was applied unless the journal says so: see the "
                                  "daemon's log", getattr(parsed, "command", None),
                                  incoming.sender))
        if answer.body is not None and (ignored := ignored_fields(incoming.payload,
                                                                   self.limits)):
            # Said in the answer, not remembered with it (decisions.md 187).
            answer.body = {**answer.body, "ignored_fields": ignored}
            self.log.warning("command_fields_ignored", sender=incoming.sender,
                             request_id=answer.body.get("request_id"), fields=ignored)
        return answer

    # -- the steps ------------------------------------------------------------------------

    def _handle(self, incoming: Incoming) -> Answer:
        sender = incoming.sender
        parsed = parse_command(incoming.payload, self.limits)
        if isinstance(parsed, CommandRejection):
            return self._rejected(incoming, parsed)
        command: Command = parsed
        request_id, name = command.request_id, command.command
        log = self.log.bind(sender=sender, request_id=request_id, command=name,
                            operator=command.operator)
        key = (sender, request_id, fingerprint(command))
        found = self._remembered(sender, request_id)
        if found is not None:
            known, body = found
            if incoming.retained and known and known != key[2]:
                # Another command took this request_id: this retained one was never
                # answered (outside review: it went unanswered). Once, by its hash.
                return self._retained_once(incoming, request_id, name,
                                           f"its request_id {request_id!r} was used before "
                                           "for another command")
            if incoming.retained:
                log.info("retained_command_seen_again", action="not answered again")
                return Answer(None)
            if known and known != key[2]:
                log.warning("request_id_conflict")
                return Answer(refusal(request_id, "request_id_conflict",
                                      f"request_id {request_id!r} was already used by {sender} "
                                      "for a different command; use a new request_id",
                                      name, sender))
            log.info("command_repeated")
            return Answer(body, replay=self._page_again(body))
        if incoming.retained:
            log.warning("retained_command_ignored")
            return self._remember(key, refusal(
                request_id, "retained_command_ignored",
                "the command arrived as a retained message and was not applied; publish "
                "commands with retain off (and clear the retained message)", name, sender))
        if incoming.response_bytes > RESPONSE_PROPERTIES_MAX:
            # Not remembered: sent again with shorter properties, it is handled.
            log.warning("command_rejected", code="too_large",
                        response_properties_bytes=incoming.response_bytes)
            return Answer(refusal(
                request_id, "too_large",
                f"the MQTT 5 response topic and correlation data take "
                f"{incoming.response_bytes} bytes, more than the {RESPONSE_PROPERTIES_MAX} "
                "the daemon honours: the command was not applied (send it again with a "
                "shorter response topic or correlation data; this answer went to your own "
                "answer topic)", name, sender))
        if incoming.expires_in is not None and incoming.waited >= incoming.expires_in:
            log.warning("command_expired", expires_in=incoming.expires_in,
                        waited=round(incoming.waited, 3))
            return self._remember(key, refusal(
                request_id, "expired",
                f"the command's message expiry ran out: {incoming.expires_in:g} s were left "
                f"when it reached the daemon, and it waited {incoming.waited:.3f} s there",
                name, sender))
        role = self.role_of(sender)
        allowed = ROLE_COMMANDS[role] if role is not None else frozenset({"whoami"})
        if name not in allowed:
            needed = roles_allowing(name)
            log.warning("command_forbidden", role=role)
            return self._remember(key, refusal(
                request_id, "forbidden",
                f"{name} needs the role {' or '.join(needed)}; {sender} has "
                + (f"the role {role}" if role else "no role ([auth] roles)"),
                name, sender, roles=needed))
        if name == "whoami":
            return self._remember(key, success(request_id, name, sender, {
                "authenticated_as": sender, "role": role, "commands": sorted(allowed)}))
        recorder, status = self.recorder, self.recorder.status
        if not status.storage_ok and not recorder.retry():
            return Answer(refusal(request_id, "storage_failed",
                                  f"the journal cannot be written: {status.storage_error}",
                                  name, sender))
        if isinstance(command, Replay):
            return self._replay(command, key)
        assert name not in SHELL_COMMANDS
        outputs = recorder.commit(
            [CommandInput(**stamp(recorder.uptime), command=command, authenticated_as=sender)],
            answer=lambda out: self._bounded(answer_body(request_id, name, sender, out)),
            answer_key=key)
        if outputs is None:
            return Answer(refusal(request_id, "storage_failed", status.storage_error, name,
                                  sender))
        body = self._bounded(answer_body(request_id, name, sender, outputs[0]))
        log.info("command_answered", ok=body["ok"], error=body["error"])
        return Answer(body)

    def _page_again(self, body: dict[str, Any]) -> ReplayPage | None:
        """A `replay` answered before is re-sent with its page: its answer is remembered
        before its events go out, and a replay cut short (the daemon stopped or killed,
        the broker gone) is delivered again; answered from the memory alone, the events
        it did not send would never come, under an answer that counts them (outside
        review). Events of the page pruned since are not sent again."""
        result = body.get("result")
        if body.get("command") != "replay" or not body.get("ok") or not isinstance(result,
                                                                                  dict):
            return None
        try:
            return ReplayPage(int(result["from_seq"]), int(result["to_seq"]),
                              int(result["count"]))
        except (KeyError, TypeError, ValueError):
            return None

    def _rejected(self, incoming: Incoming, parsed: CommandRejection) -> Answer:
        sender = incoming.sender
        self.log.warning("command_rejected", sender=sender, request_id=parsed.request_id,
                         code=parsed.code, message=parsed.message, retained=incoming.retained)
        if not incoming.retained:
            return Answer(refusal(parsed.request_id, parsed.code, parsed.message,
                                  parsed.command, sender))
        if not incoming.payload:
            # An empty retained message: what clears a retained command (as the refusal
            # asks), not a command of its own; no answer would match a request.
            self.log.info("retained_command_cleared", sender=sender)
            return Answer(None)
        return self._retained_once(incoming, parsed.request_id, parsed.command,
                                   f"this one is not a command: {parsed.message}")

    def _retained_once(self, incoming: Incoming, request_id: str | None, name: str | None,
                       why: str) -> Answer:
        """A retained message that cannot be remembered by its request_id (not a command,
        or its id taken by another command): answered once only, remembered by the
        payload's hash (decisions.md 106)."""
        sender = incoming.sender
        payload = incoming.payload.encode() if isinstance(incoming.payload, str) \
            else incoming.payload
        digest = hashlib.sha256(payload).hexdigest()[:32]
        remembered_as = f"retained:{digest}"
        if self._remembered(sender, remembered_as) is not None:
            return Answer(None)
        return self._remember((sender, remembered_as, digest), refusal(
            request_id, "retained_command_ignored",
            f"a retained message is never applied ({why}); publish commands with retain "
            "off, and clear the retained message", name, sender))

    def _remembered(self, sender: str, request_id: str) -> tuple[str, dict[str, Any]] | None:
        try:
            return self.recorder.journal.response(sender, request_id)
        except StorageError:
            return None

    def _remember(self, key: tuple[str, str, str], body: dict[str, Any]) -> Answer:
        try:
            with self.recorder.journal.transaction():
                self.recorder.journal.add_response(*key, body)
        except StorageError as error:
            self.log.error("answer_not_remembered", sender=key[0], request_id=key[1],
                           error=str(error))
        return Answer(body)

    def _bounded(self, body: dict[str, Any]) -> dict[str, Any]:
        """The answer, or `too_large` when it would not fit the broker's packet limit."""
        size = len(json.dumps(body).encode())
        # room for `ignored_fields`, added to the answer after this (handle())
        limit = self.max_packet - ANSWER_OVERHEAD - IGNORED_FIELDS_MAX_BYTES
        if size <= limit:
            return body
        hint = " (ask for fewer `hands`)" if body.get("command") == "recall" else ""
        return refusal(body["request_id"], "too_large",
                       f"the answer is {size} bytes, more than the broker's maximum packet "
                       f"size allows ({self.max_packet} bytes with "
                       f"{ANSWER_OVERHEAD + IGNORED_FIELDS_MAX_BYTES} for the packet's "
                       f"header){hint}", body.get("command"),
                       body.get("authenticated_as", ANONYMOUS))

    # -- replay -----------------------------------------------------------------------------

    def _replay(self, command: Replay, key: tuple[str, str, str]) -> Answer:
        journal = self.recorder.journal
        sender = key[0]
        self.recorder.write_effects()  # events still in memory belong to the range too
        first, last = journal.event_range()
        to_seq = min(command.to_seq or last, last)
        page: ReplayPage | None = None
        # The journal this one replaced, if it was moved aside here: where its events end.
        previous = {"previous_instance": journal.previous_instance} \
            if journal.previous_instance is not None else {}
        if first == 0 or not first <= command.from_seq <= last or to_seq < command.from_seq:
            body = refusal(command.request_id, "out_of_range",
                           (f"expected from_seq..to_seq within {first}..{last}, "
                            f"got {command.from_seq}..{command.to_seq or 'the newest'}"
                            if first else "the journal holds no event yet"),
                           "replay", sender, first_seq=first, last_seq=last,  # 0, 0: none
                           instance=journal.instance_id, **previous)
        else:
            # The journal's events are one gapless run (Journal.prune drops only the
            # oldest run), so the page is counted from its ends, not row by row (that
            # walked 100 000 rows, 45 ms with the loop blocked, for a big page).
            end = min(to_seq, command.from_seq + self.replay_max - 1)
            page = ReplayPage(command.from_seq, end, end - command.from_seq + 1)
            body = success(command.request_id, "replay", sender, {
                "from_seq": command.from_seq, "to_seq": end, "count": page.count,
                "next_from_seq": end + 1 if end < to_seq else None,
                "instance": journal.instance_id, **previous})
        answer = self._remember(key, body)
        answer.replay = page
        return answer

    def replay_chunks(self, page: ReplayPage) -> Iterator[list[str]]:
        """The page's event bodies, a chunk at a time (read when the sender needs them)."""
        journal = self.recorder.journal
        after = page.from_seq
        while after <= page.to_seq:
            rows = journal.event_rows_between(after, page.to_seq, REPLAY_CHUNK)
            if not rows:
                return
            yield [body for _, body in rows]
            after = rows[-1][0] + 1

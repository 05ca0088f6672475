"""CommandDesk: every command from `{root}/cmd` gets exactly one answer.

parse -> request_id memory (a repeated request_id gets the original answer, nothing is
applied twice) -> commit (input, events and answer in one fsynced transaction) -> answer.
`replay` is answered from the journal (the events go to `{root}/replay` before the
answer); `recall` and every other command are the engine's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shoed.core.commands import Command, CommandRejection, Replay, parse_command
from shoed.core.engine import Output
from shoed.core.inputs import CommandInput
from shoed.device.inputs import stamp
from shoed.store.journal import StorageError
from shoed.store.recorder import Recorder


@dataclass
class Answer:
    body: dict[str, Any]  # the `{root}/cmd/response` payload
    replay: list[str] = field(default_factory=list)  # event bodies for `{root}/replay`


def answer_body(request_id: str | None, out: Output) -> dict[str, Any]:
    error = None if out.error is None else {"code": out.error.code, "message": out.error.message}
    return {"request_id": request_id, "ok": bool(out.ok), "error": error,
            "result": out.result if out.ok else None}


def refusal(request_id: str | None, code: str, message: str | None) -> dict[str, Any]:
    return {"request_id": request_id, "ok": False, "error": {"code": code, "message": message},
            "result": None}


class CommandDesk:
    def __init__(self, recorder: Recorder, log: Any) -> None:
        self.recorder = recorder
        self.log = log
        self.handled = 0

    def handle(self, payload: bytes | str) -> Answer:
        """Validate, journal and apply one command; its single answer."""
        self.handled += 1
        parsed = parse_command(payload)
        if isinstance(parsed, CommandRejection):
            self.log.warning("command_rejected", request_id=parsed.request_id,
                             code=parsed.code, message=parsed.message)
            return Answer(refusal(parsed.request_id, parsed.code, parsed.message))
        command: Command = parsed
        recorder = self.recorder
        log = self.log.bind(request_id=command.request_id, command=command.command,
                            operator=command.operator)
        try:
            previous = recorder.journal.response(command.request_id)
        except StorageError:
            previous = None
        if previous is not None:
            log.info("command_repeated")
            return Answer(previous)
        status = recorder.status
        if not status.storage_ok and not recorder.retry():
            return Answer(refusal(command.request_id, "storage_failed",
                                  f"the journal cannot be written: {status.storage_error}"))
        if isinstance(command, Replay):
            return self._replay(command)
        request_id = command.request_id
        outputs = recorder.commit([CommandInput(**stamp(recorder.uptime), command=command)],
                                  answer=lambda out: answer_body(request_id, out))
        if outputs is None:
            return Answer(refusal(request_id, "storage_failed", status.storage_error))
        body = answer_body(request_id, outputs[0])
        log.info("command_answered", ok=body["ok"], error=body["error"])
        return Answer(body)

    def _replay(self, command: Replay) -> Answer:
        journal = self.recorder.journal
        self.recorder.write_effects()  # events still in memory belong to the range too
        first, last = journal.event_range()
        to_seq = command.to_seq or last
        bodies: list[str] = []
        if first == 0 or not first <= command.from_seq <= last or to_seq < command.from_seq:
            body = refusal(command.request_id, "out_of_range",
                           f"expected from_seq..to_seq within {first}..{last}, "
                           f"got {command.from_seq}..{command.to_seq}")
        else:
            bodies = journal.events_between(command.from_seq, to_seq)
            body = {"request_id": command.request_id, "ok": True, "error": None,
                    "result": {"from_seq": command.from_seq,
                               "to_seq": command.from_seq + len(bodies) - 1,
                               "count": len(bodies)}}
        try:
            with journal.transaction():
                journal.add_response(command.request_id, body)
        except StorageError:
            pass
        return Answer(body, bodies)

"""Supervisor commands of mqtt-api.md section 4, validated with pydantic.

:func:`parse_command` turns raw bytes into a command or a :class:`CommandRejection`
naming the problem (`invalid_json`, `invalid_command`, `unknown_command`). It never
raises, whatever the payload: huge, deeply nested, wrong types.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
)

MAX_COMMAND_BYTES = 16 * 1024
MAX_NESTING = 32


class CommandBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    request_id: StrictStr = Field(min_length=1, max_length=200)
    operator: StrictStr = Field(min_length=1, max_length=200)


class NewShoe(CommandBase):
    command: Literal["new_shoe"]
    force: StrictBool = False


class CloseBetting(CommandBase):
    command: Literal["close_betting"]
    hand_no: StrictInt | None = None


class ManualCard(CommandBase):
    command: Literal["manual_card"]
    card_index: StrictInt
    card: StrictStr = Field(max_length=20)


class Resume(CommandBase):
    command: Literal["resume"]


class VoidHand(CommandBase):
    command: Literal["void_hand"]
    hand_no: StrictInt
    reason: StrictStr = Field(max_length=500)


class VoidShoe(CommandBase):
    command: Literal["void_shoe"]
    reason: StrictStr = Field(max_length=500)


class EndShoe(CommandBase):
    command: Literal["end_shoe"]


class Realign(CommandBase):
    command: Literal["realign"]
    card_index: StrictInt
    position: Literal["burn", "P1"]


class CutCardCommand(CommandBase):
    command: Literal["cut_card"]


class ReportMisorder(CommandBase):
    command: Literal["report_misorder"]
    hand_no: StrictInt
    detail: StrictStr = Field(max_length=500)


class Recall(CommandBase):
    command: Literal["recall"]
    hands: StrictInt = Field(default=10, ge=1, le=100)


class Replay(CommandBase):
    command: Literal["replay"]
    from_seq: StrictInt = Field(ge=1)
    to_seq: StrictInt | None = Field(default=None, ge=1)


Command = Annotated[
    NewShoe | CloseBetting | ManualCard | Resume | VoidHand | VoidShoe | EndShoe | Realign
    | CutCardCommand | ReportMisorder | Recall | Replay,
    Field(discriminator="command"),
]
COMMAND_ADAPTER: TypeAdapter[Command] = TypeAdapter(Command)
#: The command classes, as the Command union lists them.
COMMAND_CLASSES: tuple[type[CommandBase], ...] = get_args(get_args(Command)[0])


def command_name(cls: type[CommandBase]) -> str:
    """The `command` value a command class accepts (its Literal)."""
    name: str = get_args(cls.model_fields["command"].annotation)[0]
    return name


COMMAND_NAMES = frozenset(command_name(cls) for cls in COMMAND_CLASSES)
#: Commands that only read: answered, never recorded as a supervisor_action.
READ_ONLY_COMMANDS = frozenset({command_name(Recall), command_name(Replay)})


class CommandRejection(BaseModel):
    """A command that could not be read; `request_id` is None when none could be read."""

    model_config = ConfigDict(frozen=True)

    request_id: str | None
    code: Literal["invalid_json", "invalid_command", "unknown_command"]
    message: str


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:5]:
        location = ".".join(str(p) for p in item["loc"] if p not in COMMAND_NAMES) or "payload"
        parts.append(f"{location}: {item['msg']}")
    return "; ".join(parts)


def nesting_depth(text: str) -> int:
    """The deepest [ / { nesting outside JSON strings (a cheap pre-check before parsing)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def parse_command(payload: bytes | str) -> Command | CommandRejection:
    """Validate one command payload. Never raises."""
    if len(payload) > MAX_COMMAND_BYTES:
        return CommandRejection(
            request_id=None, code="invalid_json",
            message=f"expected at most {MAX_COMMAND_BYTES} bytes, got {len(payload)}",
        )
    try:
        text = payload.decode("utf-8") if isinstance(payload, bytes) else payload
    except UnicodeDecodeError as error:  # JSON text is UTF-8 (RFC 8259)
        return CommandRejection(request_id=None, code="invalid_json",
                                message=f"expected UTF-8, got byte 0x{payload[error.start]:02x} "
                                        f"at offset {error.start}")
    depth = nesting_depth(text)
    if depth > MAX_NESTING:
        # Refused before parsing: deep nesting would reach the interpreter's recursion
        # limit inside json/pydantic, which a hostile client must not be able to do.
        return CommandRejection(request_id=None, code="invalid_json",
                                message=f"expected JSON nested at most {MAX_NESTING} deep, "
                                        f"got {depth}")
    try:
        data: Any = json.loads(text)
    except (ValueError, RecursionError) as error:
        return CommandRejection(request_id=None, code="invalid_json",
                                message=f"not valid JSON: {str(error)[:200]}")
    if not isinstance(data, dict):
        return CommandRejection(request_id=None, code="invalid_command",
                                message=f"expected a JSON object, got {type(data).__name__}")
    raw_id = data.get("request_id")
    request_id = raw_id if isinstance(raw_id, str) and 0 < len(raw_id) <= 200 else None
    name = data.get("command")
    if not isinstance(name, str):
        return CommandRejection(request_id=request_id, code="invalid_command",
                                message="command: expected a string naming the command, "
                                        f"got {type(name).__name__}")
    if name not in COMMAND_NAMES:
        return CommandRejection(
            request_id=request_id, code="unknown_command",
            message=f"expected one of {', '.join(sorted(COMMAND_NAMES))}, got {name[:60]!r}",
        )
    try:
        return COMMAND_ADAPTER.validate_python(data)
    except ValidationError as error:
        return CommandRejection(request_id=request_id, code="invalid_command",
                                message=_describe(error))
    except RecursionError:
        return CommandRejection(request_id=request_id, code="invalid_command",
                                message="payload nested too deeply")

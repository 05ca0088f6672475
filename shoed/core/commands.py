"""Supervisor commands of mqtt-api.md section 4, validated with pydantic.

:func:`parse_command` turns raw bytes into a command or a :class:`CommandRejection`
naming the problem (`invalid_json`, `invalid_command`, `unknown_command`). It never
raises, whatever the payload: huge, deeply nested, wrong types.

Ambiguity is refused, not resolved (docs/decisions.md, "Commands"): a key given twice,
NaN or Infinity, an integer outside the range every JSON reader holds exactly
(|n| <= 2**53 - 1, RFC 7493), a string longer than :attr:`ParseLimits.max_string`, more
than :attr:`ParseLimits.max_fields` keys in an object, a top level that is not an object.

Roles (section 4) are data: :data:`ROLE_COMMANDS` maps each role to the commands it may
send; :func:`fingerprint` is what makes a repeated (sender, request_id) the *same* command.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
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
MAX_SAFE_INTEGER = 2**53 - 1  # beyond it, JSON readers in other languages round (RFC 7493)


@dataclass(frozen=True, slots=True)
class ParseLimits:
    """What a command payload may hold; `[commands]` in the configuration sets them."""

    max_bytes: int = MAX_COMMAND_BYTES
    max_nesting: int = MAX_NESTING
    max_string: int = 1000  # characters in any string, keys included
    max_fields: int = 32  # keys in any one object


DEFAULT_LIMITS = ParseLimits()

#: C0 controls but tab, line feed and carriage return; DEL; C1 controls. A NUL in an
#: operator's name reached the journal and stopped a PostgreSQL sink (jsonb refuses it),
#: and none of them belongs in a name, a reason or an id (decisions.md 223). Written in
#: escapes that Python's re and a JSON Schema pattern (ECMA-262) both read: the published
#: schema's `pattern` for command text is built from it.
CONTROL_CLASS = r"\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f"
CONTROL_CHARACTERS = re.compile(f"[{CONTROL_CLASS}]")


def _no_control_characters(value: str) -> str:
    found = CONTROL_CHARACTERS.search(value)
    if found is not None:
        raise ValueError(f"control character U+{ord(found.group()):04X} at position "
                         f"{found.start()} is not allowed")
    return value


#: A command's text field: a JSON string without control characters.
Text = Annotated[StrictStr, AfterValidator(_no_control_characters)]


class CommandBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    request_id: Text = Field(min_length=1, max_length=200)
    operator: Text = Field(min_length=1, max_length=200)


class NewShoe(CommandBase):
    command: Literal["new_shoe"]
    force: StrictBool = False


class CloseBetting(CommandBase):
    command: Literal["close_betting"]
    hand_no: StrictInt | None = None


class ManualCard(CommandBase):
    command: Literal["manual_card"]
    card_index: StrictInt
    card: Text = Field(max_length=20)


class Resume(CommandBase):
    command: Literal["resume"]


class VoidHand(CommandBase):
    command: Literal["void_hand"]
    hand_no: StrictInt
    reason: Text = Field(max_length=500)


class VoidShoe(CommandBase):
    command: Literal["void_shoe"]
    reason: Text = Field(max_length=500)


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
    detail: Text = Field(max_length=500)


class Recall(CommandBase):
    command: Literal["recall"]
    hands: StrictInt = Field(default=10, ge=1, le=100)


class Replay(CommandBase):
    command: Literal["replay"]
    from_seq: StrictInt = Field(ge=1, le=MAX_SAFE_INTEGER)
    to_seq: StrictInt | None = Field(default=None, ge=1, le=MAX_SAFE_INTEGER)


class RoadsCommand(CommandBase):
    """The current scoreboard (roads.md section 7); read-only, every role."""

    command: Literal["roads"]


class AckAlarm(CommandBase):
    """Acknowledge a held alarm that no rule resolves by itself (integrity.md section 2)."""

    command: Literal["ack_alarm"]
    alarm_id: Text = Field(min_length=1, max_length=200)


class Whoami(CommandBase):
    """Who the daemon takes the sender for: `authenticated_as`, `role`, `commands`."""

    command: Literal["whoami"]


Command = Annotated[
    NewShoe | CloseBetting | ManualCard | Resume | VoidHand | VoidShoe | EndShoe | Realign
    | CutCardCommand | ReportMisorder | Recall | Replay | RoadsCommand | AckAlarm | Whoami,
    Field(discriminator="command"),
]
COMMAND_ADAPTER: TypeAdapter[Command] = TypeAdapter(Command, config=ConfigDict(defer_build=True))
#: The command classes, as the Command union lists them.
COMMAND_CLASSES: tuple[type[CommandBase], ...] = get_args(get_args(Command)[0])


def command_name(cls: type[CommandBase]) -> str:
    """The `command` value a command class accepts (its Literal)."""
    name: str = get_args(cls.model_fields["command"].annotation)[0]
    return name


COMMAND_NAMES = frozenset(command_name(cls) for cls in COMMAND_CLASSES)
_FIELDS = {command_name(cls): frozenset(cls.model_fields) for cls in COMMAND_CLASSES}


#: The most bytes `ignored_fields` takes in an answer, as JSON (with json.dumps' escapes):
#: the answer's bound leaves this much room for it (CommandDesk._bounded).
IGNORED_FIELDS_MAX_BYTES = 400
_PLAIN_NAME = re.compile(r"[ -~]{1,60}")  # printable ASCII: each name's JSON is its length


def ignored_fields(payload: bytes | str, limits: ParseLimits = DEFAULT_LIMITS) -> list[str]:
    """The top-level fields of a command that its command does not take (ignored, as
    mqtt-api.md lets fields be added over time; an answer names them, so that a misspelt
    `to_sq` does not pass unnoticed). [] for anything that is not such an object, and for
    a payload over `limits.max_bytes` (refused unread: never decoded here either). Names
    of printable ASCII up to 60 characters, sorted, within IGNORED_FIELDS_MAX_BYTES as
    JSON; what does not fit, or is not such a name, is counted in a last entry
    "(+N more)"."""
    if len(payload) > limits.max_bytes:
        return []
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return []
    if not isinstance(data, dict):
        return []
    name = data.get("command")
    known = _FIELDS.get(name) if isinstance(name, str) else None
    if known is None:
        return []
    unknown = sorted(k for k in data if k not in known)
    named: list[str] = []
    room = IGNORED_FIELDS_MAX_BYTES - 16  # the brackets and the "(+N more)" entry
    for key in unknown:
        cost = len(key) + 4  # quotes, comma, space
        if not _PLAIN_NAME.fullmatch(key) or '"' in key or "\\" in key or cost > room:
            continue
        named.append(key)
        room -= cost
    if len(named) < len(unknown):
        named.append(f"(+{len(unknown) - len(named)} more)")
    return named


#: Commands that only read: answered, never recorded as a supervisor_action.
READ_ONLY_COMMANDS = frozenset({"recall", "replay", "roads", "whoami"})
#: Commands the shell answers itself: `replay` reads the journal, `whoami` the sender.
SHELL_COMMANDS = frozenset({"replay", "whoami"})

# Roles (mqtt-api.md section 4). Brokers' ACL files have no groups: users are mapped to
# these roles in the daemon's configuration (`[auth]`).
Role = Literal["supervisor", "game_server", "auditor"]
ROLES: tuple[Role, ...] = get_args(Role)
ROLE_COMMANDS: dict[Role, frozenset[str]] = {
    "supervisor": COMMAND_NAMES,
    "game_server": frozenset({"close_betting", "recall", "roads", "whoami"}),
    "auditor": frozenset({"recall", "replay", "roads", "whoami"}),
}
assert all(commands <= COMMAND_NAMES for commands in ROLE_COMMANDS.values())
ANONYMOUS = "anonymous"  # the sender on the bare `{root}/cmd`


def role_allows(role: Role, command: str) -> bool:
    return command in ROLE_COMMANDS[role]


# Every `error.code` an answer can carry (the contract's enum).
ERROR_CODES: tuple[str, ...] = (
    "invalid_json", "invalid_command", "unknown_command", "forbidden",
    "request_id_conflict", "retained_command_ignored", "expired", "too_large",
    "internal_error", "storage_failed", "out_of_range",
    "replay_failed",  # the page's events could not all be re-sent (added)
    # the engine's refusals (section 4)
    "shoe_in_play", "betting_control_none", "not_between_hands", "wrong_hand", "shoe_ended",
    "unknown_card", "hand_resolved", "bad_card", "not_held", "card_unknown", "unknown_hand",
    "already_voided", "no_shoe", "unknown_alarm", "not_ackable",
)


class CommandRejection(BaseModel):
    """A command that could not be read; `request_id` is None when none could be read."""

    model_config = ConfigDict(frozen=True)

    request_id: str | None
    code: Literal["invalid_json", "invalid_command", "unknown_command"]
    message: str
    command: str | None = None  # echoed when it could be read


def fingerprint(command: CommandBase) -> str:
    """The command's identity for (sender, request_id) memory: its validated fields in a
    canonical form, so spacing or key order do not make a repeat look different."""
    body = json.dumps(command.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:32]


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


class _Ambiguous(ValueError):
    """Raised from inside json.loads' hooks: the payload has no single meaning."""


def _reader(limits: ParseLimits) -> json.JSONDecoder:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        if len(items) > limits.max_fields:
            raise _Ambiguous(f"expected at most {limits.max_fields} fields in an object, "
                             f"got {len(items)}")
        out: dict[str, Any] = {}
        for key, item in items:
            if key in out:
                raise _Ambiguous(f"key {key[:60]!r} given twice")
            out[key] = item
        return out

    def constant(name: str) -> Any:
        raise _Ambiguous(f"{name} is not a JSON number")

    def integer(text: str) -> int:
        # More digits than 2**53 - 1 has: beyond it, without asking int() (which refuses
        # more than 4300 digits, and would take long over 16 KiB of them).
        if len(text.lstrip("-")) > len(str(MAX_SAFE_INTEGER)):
            raise _Ambiguous(f"integer {text[:30]}... ({len(text.lstrip('-'))} digits) is "
                             "beyond 2**53 - 1 (it would not be read exactly by every JSON "
                             "reader)")
        number = int(text)
        if abs(number) > MAX_SAFE_INTEGER:
            raise _Ambiguous(f"integer {text[:30]} is beyond 2**53 - 1 (it would not be read "
                             "exactly by every JSON reader)")
        return number

    def real(text: str) -> float:
        number = float(text)
        if not math.isfinite(number):
            raise _Ambiguous(f"number {text[:30]} is out of range")
        return number

    return json.JSONDecoder(object_pairs_hook=pairs, parse_constant=constant,
                            parse_int=integer, parse_float=real)


def _long_string(data: Any, limit: int) -> tuple[str, str] | None:
    """The first string (key or value) longer than `limit`: where it is (``reason``,
    ``x.y``, ``items[2]``, ``a key in x``) and its start; None when there is none."""
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if len(item) > limit:
                return where or "payload", item[:20]
        elif isinstance(item, dict):
            for key, value in item.items():
                if len(key) > limit:
                    return f"a key in {where or 'the payload'}", key[:20]
                stack.append((value, f"{where}.{key}" if where else key))
        elif isinstance(item, list):
            stack.extend((value, f"{where}[{i}]") for i, value in enumerate(item))
    return None


def _readable_ids(text: str) -> tuple[str | None, str | None]:
    """`request_id` and `command` of a payload refused as ambiguous (a key twice, NaN, an
    integer beyond 2**53 - 1, too many fields), read leniently so the answer can still
    name the request: each only when the top level is an object that gives it once, as
    a string within the limits a valid command has; else None."""
    try:  # numbers are not needed here: not converted (no digit limit, no range)
        pairs = json.loads(text, object_pairs_hook=lambda items: items,
                           parse_int=len, parse_float=len, parse_constant=len)
    except (ValueError, RecursionError):
        return None, None
    if not isinstance(pairs, list) or not all(isinstance(p, tuple) for p in pairs):
        return None, None
    found: dict[str, list[Any]] = {}
    for key, value in pairs:
        found.setdefault(key, []).append(value)

    def one(key: str, longest: int) -> str | None:
        values = found.get(key, [])
        if len(values) == 1 and isinstance(values[0], str) and 0 < len(values[0]) <= longest:
            return values[0]
        return None

    return one("request_id", 200), one("command", 60)


def parse_command(payload: bytes | str,
                  limits: ParseLimits = DEFAULT_LIMITS) -> Command | CommandRejection:
    """Validate one command payload. Never raises."""
    if len(payload) > limits.max_bytes:
        return CommandRejection(
            request_id=None, code="invalid_json",
            message=f"expected at most {limits.max_bytes} bytes, got {len(payload)}",
        )
    try:
        text = payload.decode("utf-8") if isinstance(payload, bytes) else payload
    except UnicodeDecodeError as error:  # JSON text is UTF-8 (RFC 8259)
        return CommandRejection(request_id=None, code="invalid_json",
                                message=f"expected UTF-8, got byte 0x{payload[error.start]:02x} "
                                        f"at offset {error.start}")
    depth = nesting_depth(text)
    if depth > limits.max_nesting:
        # Refused before parsing: deep nesting would reach the interpreter's recursion
        # limit inside json/pydantic, which a hostile client must not be able to do.
        return CommandRejection(request_id=None, code="invalid_json",
                                message=f"expected JSON nested at most {limits.max_nesting} "
                                        f"deep, got {depth}")
    try:
        data: Any = _reader(limits).decode(text)
    except _Ambiguous as error:
        request_id, name = _readable_ids(text)
        return CommandRejection(request_id=request_id, code="invalid_json", command=name,
                                message=f"ambiguous JSON: {error}")
    except (ValueError, RecursionError) as error:
        return CommandRejection(request_id=None, code="invalid_json",
                                message=f"not valid JSON: {str(error)[:200]}")
    if not isinstance(data, dict):
        return CommandRejection(request_id=None, code="invalid_command",
                                message=f"expected a JSON object, got {type(data).__name__}")
    raw_id = data.get("request_id")
    request_id = raw_id if isinstance(raw_id, str) and 0 < len(raw_id) <= 200 else None
    name = data.get("command")
    # Echoed whatever it names (an unknown command's answer says which it was), when it is
    # a string of ordinary length.
    echoed = name if isinstance(name, str) and 0 < len(name) <= 60 else None
    if (long := _long_string(data, limits.max_string)) is not None:
        where, start = long
        where = where if len(where) <= 100 else f"{where[:97]}..."
        return CommandRejection(request_id=request_id, code="invalid_command", command=echoed,
                                message=f"{where}: expected strings of at most "
                                        f"{limits.max_string} characters, got one starting "
                                        f"{start!r}")
    if not isinstance(name, str):
        return CommandRejection(request_id=request_id, code="invalid_command",
                                message="command: expected a string naming the command, "
                                        f"got {type(name).__name__}")
    if name not in COMMAND_NAMES:
        return CommandRejection(
            request_id=request_id, code="unknown_command", command=echoed,
            message=f"expected one of {', '.join(sorted(COMMAND_NAMES))}, got {name[:60]!r}",
        )
    try:
        return COMMAND_ADAPTER.validate_python(data)
    except ValidationError as error:
        return CommandRejection(request_id=request_id, code="invalid_command", command=name,
                                message=_describe(error))
    except RecursionError:
        return CommandRejection(request_id=request_id, code="invalid_command", command=name,
                                message="payload nested too deeply")

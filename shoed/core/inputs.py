"""Inputs of the dealing engine: decoded device frames and validated commands.

Each input carries the host's two readings of when it was taken: the engine has no
clock of its own, so replaying the same inputs gives the same events.

- `at`: wall-clock time (epoch seconds). Stamps events (`ts`, `drawn_at`, shoe ids).
  NTP may step it either way, so the engine measures no duration on it when it can help.
- `mono`: the daemon's uptime clock (seconds), monotonic within a run and accumulated
  across runs, supplied by the shell. Every duration the engine measures (the pull
  timeout, card-jam pauses) is taken on it. None in journals written before it existed;
  the engine then falls back to `at`.

Inputs are pydantic models so the journal can store and replay them as JSON.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from .commands import Command


class InputBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    at: float
    mono: float | None = None


class DeviceHello(InputBase):
    kind: Literal["hello"] = "hello"
    boot_id: int
    capabilities: int
    fw_version: str
    serial_no: str


class DeviceShoeLoaded(InputBase):
    kind: Literal["shoe_loaded"] = "shoe_loaded"


class DeviceItem(InputBase):
    """One item of a pull. Pull fields are None when the payload could not be read."""

    kind: Literal["item"] = "item"
    item: Literal["card", "unread", "cut"]
    pull_id: int | None
    pull_pos: int | None
    pull_size: int | None
    device_card_index: int | None = None
    card: str | None = None
    status: Literal["read", "unread", "foreign"] = "read"
    uid: str | None = None
    problem: str | None = None  # bad_payload: why the item counts as unread / incomplete


class DeviceFault(InputBase):
    kind: Literal["fault"] = "fault"
    code: int
    active: bool


class DeviceGap(InputBase):
    """Frames lost within one device boot (a seq gap): alarm cards_lost and a hold."""

    kind: Literal["gap"] = "gap"
    lost: int


class DeviceLink(InputBase):
    kind: Literal["link"] = "link"
    connected: bool
    # why it was lost, when the transport said so (unplugged, pty closed); None: silence
    reason: str | None = None


class Notice(InputBase):
    """A momentary protocol alarm: bad_payload or protocol_mismatch."""

    kind: Literal["notice"] = "notice"
    code: Literal["bad_payload", "protocol_mismatch"]
    message: str


class StorageStatus(InputBase):
    kind: Literal["storage"] = "storage"
    ok: bool
    message: str


class RootConflict(InputBase):
    """Another live daemon held this table's MQTT root (issue 13 section 3): the shell saw
    its retained `status` online with another `run_id` and did not publish under the root.

    `active=True` when the conflict is first seen (`at` is when; `other_run_id` is the
    other daemon's), `active=False` once this daemon is alone on the root again. The
    engine holds alarm `table_id_conflict` from the one to the other, so the episode is
    in the table's own stream (published after the daemon holds the root again).
    """

    kind: Literal["root_conflict"] = "root_conflict"
    active: bool
    other_run_id: str | None = None
    message: str


class JournalCorrupt(InputBase):
    """The journal failed SQLite's integrity check while the daemon ran (the check after
    READY). It is still written and read (the damage is in pages already there); the
    next start refuses it. The engine holds alarm `journal_corrupt` for the rest of this
    journal's life, so the pit and the stream know before that start."""

    kind: Literal["journal_corrupt"] = "journal_corrupt"
    message: str


class Tick(InputBase):
    """Time passed: lets the 3 s incomplete-pull timeout fire (see Engine.next_deadline)."""

    kind: Literal["tick"] = "tick"


class CommandInput(InputBase):
    kind: Literal["command"] = "command"
    command: Command
    # The broker user it came from (`{root}/cmd/by/{user}`), or "anonymous" on the bare
    # `{root}/cmd`; inputs journalled before it existed read as anonymous.
    authenticated_as: str = "anonymous"


Input = Annotated[
    DeviceHello | DeviceShoeLoaded | DeviceItem | DeviceFault | DeviceGap | DeviceLink
    | Notice | StorageStatus | RootConflict | JournalCorrupt | Tick | CommandInput,
    Field(discriminator="kind"),
]
INPUT_ADAPTER: TypeAdapter[Input] = TypeAdapter(Input, config=ConfigDict(defer_build=True))
#: The input classes, as the Input union lists them.
INPUT_CLASSES: tuple[type[InputBase], ...] = get_args(get_args(Input)[0])

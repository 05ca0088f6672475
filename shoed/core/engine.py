"""The dealing-procedure engine (dealing-rules.md section 3) as a pure state machine.

``Engine.handle(input) -> Output``: decoded device inputs and validated commands in;
events (mqtt-api.md section 2), requests to the shoe (gate, indicator) and a command
answer out. No I/O, no clock (every input carries its time), no randomness: the same
inputs from the same snapshot give the same events, byte for byte.

States (``shoe_state``) and what moves between them::

    no_shoe ──SHOE_LOADED / new_shoe──> commencement
    commencement ──first card + its burns, no hold──> between_hands
    between_hands ──burn (mode none) / close_betting (mode commands)──> dealing
    dealing ──last required card, no hold──> between_hands   (hand_result)
    dealing ──void_hand──> between_hands                      (hand_voided)
    dealing ──any hold──> held ──resume / manual_card / void_hand──> dealing
    between_hands / dealing ──cut card, end_shoe──> shoe_ended  (after the last hand)
    commencement / between_hands / dealing ──void_shoe, unnecessary cards──> shoe_voided
    shoe_ended / shoe_voided ──SHOE_LOADED / new_shoe──> commencement
    any shoe in play ──new_shoe force──> shoe_voided (replaced) ──> commencement

Invariants:
- every card that left the shoe while a shoe exists gets the next ``card_index`` of that
  shoe, in procedure order (upper card of a pull first), never reused;
- a hand's positions are *derived* from its cards in draw order (burn, P1, B1, P2, B2,
  then the thirds the rules ask for): a card whose position is not yet determined is
  pending, and placing cards never depends on the order items arrived in;
- a result is published exactly once, when the hand is complete and no hold is active;
- a refused command changes nothing and is answered with a stable error code;
- no exception escapes :meth:`Engine.handle`: an internal fault is answered as an
  ``engine_error`` alarm, and the state stays as it was before that input.
"""

from __future__ import annotations

import datetime as dt
import functools
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from pydantic import BaseModel, Field

from . import commands as cmd
from . import events as ev
from .cards import commencement_count, parse_card, value
from .errors import CardNotationError
from .game import DEAL_ORDER, evaluate, next_needed_by_values
from .inputs import (
    CommandInput,
    DeviceFault,
    DeviceGap,
    DeviceHello,
    DeviceItem,
    DeviceLink,
    DeviceShoeLoaded,
    Input,
    Notice,
    StorageStatus,
    Tick,
)
from .paytable import PayTable

PB_POSITIONS = frozenset({"P1", "B1", "P2", "B2", "P3", "B3"})
RESUMABLE = frozenset({"excess_card", "duplicate_uid", "cards_lost", "incomplete_pull",
                       "device_rebooted", "cover_open"})
PULL_TIMEOUT_S = 3.0
RECORDS_KEPT = 100
FAULT_NAMES = {1: "sensor dirty", 2: "card jam", 3: "cover open (tamper)",
               4: "reader failure", 5: "low voltage", 6: "buffer full"}
FAULT_COVER_OPEN = 3
FAULT_JAM = 2
CAP_GATE = 1 << 2
CAP_INDICATOR = 1 << 3
INDICATOR = {"off": 0, "burn": 1, "player": 2, "banker": 3, "last_hand": 4, "stop": 5}

#: The transition table: from each public `shoe_state`, the states one input may lead
#: to (itself included). One input can pass through several states (a pull whose last
#: item completes a hand and whose extra card starts the next), so a state may reach
#: more than its neighbours. The engine never leaves this table (tested on random
#: interleavings of inputs).
TRANSITIONS: dict[str, frozenset[str]] = {
    "no_shoe": frozenset({"no_shoe", "commencement"}),
    "commencement": frozenset({"commencement", "between_hands", "dealing", "held",
                               "shoe_ended", "shoe_voided"}),
    "between_hands": frozenset({"between_hands", "dealing", "held", "shoe_ended",
                                "shoe_voided", "commencement"}),
    "dealing": frozenset({"dealing", "held", "between_hands", "shoe_ended", "shoe_voided",
                          "commencement"}),
    "held": frozenset({"held", "dealing", "between_hands", "shoe_ended", "shoe_voided",
                       "commencement"}),
    "shoe_ended": frozenset({"shoe_ended", "commencement"}),
    "shoe_voided": frozenset({"shoe_voided", "commencement"}),
}

BettingControl = Literal["commands", "none"]
UnnecessaryProfile = Literal["burn_then_player", "burn_then_void"]


@dataclass(frozen=True)
class EngineConfig:
    table_id: str
    decks: int = 8
    table_type: Literal["commission", "super6", "ez"] = "commission"
    unnecessary_cards: UnnecessaryProfile = "burn_then_player"
    betting_control: BettingControl = "commands"
    paytable: PayTable | None = None

    @property
    def pays(self) -> PayTable:
        return self.paytable or PayTable.default(self.table_type)


# --- state ------------------------------------------------------------------------------


class CardRec(BaseModel):
    card_index: int
    card: str | None
    read: Literal["read", "unread", "foreign", "manual"]
    uid: str | None = None
    device_card_index: int | None = None
    pull_id: int | None = None
    drawn_at: float
    exposed: bool = False
    flags: list[str] = Field(default_factory=list)  # excess_card, duplicate_uid
    flags_cleared: bool = False
    alarmed: bool = False
    position: str | None = None
    hand_no: int | None = None
    published: str | None = None  # what the last card event said (to publish changes only)


class HandState(BaseModel):
    hand_no: int
    cards: list[CardRec] = Field(default_factory=list)
    has_burn: bool = True
    in_progress: bool = False
    holds: list[str] = Field(default_factory=list)  # explicit: cards_lost, incomplete_pull, ...
    unnecessary: int = 0
    last_hand: bool = False
    actions: list[dict[str, Any]] = Field(default_factory=list)


class CommencementState(BaseModel):
    cards: list[CardRec] = Field(default_factory=list)
    burn_count: int | None = None
    holds: list[str] = Field(default_factory=list)


class ShoeState(BaseModel):
    shoe_id: str
    phase: Literal["commencement", "between_hands", "dealing", "shoe_ended", "shoe_voided"]
    commencement: CommencementState = Field(default_factory=CommencementState)
    hand: HandState | None = None
    hand_no: int = 0  # the number of the newest hand created
    betting: Literal["open", "closed"] | None = None
    cut_card_seen: bool = False
    end_requested: bool = False
    counts: dict[str, int] = Field(default_factory=dict)
    uids: list[str] = Field(default_factory=list)
    card_counter: int = 0
    hands_played: int = 0
    hands_voided: int = 0
    resolved: dict[int, bool] = Field(default_factory=dict)  # hand_no -> voided?
    last_resolved: int | None = None


class PullItem(BaseModel):
    item: DeviceItem
    arrival: int


class PullBuffer(BaseModel):
    pull_id: int
    size: int
    items: list[PullItem] = Field(default_factory=list)
    last_at: float
    paused: float = 0.0


class AlarmState(BaseModel):
    alarm_id: str
    code: str
    since: str
    key: str
    card_index: int | None = None
    fault_code: int | None = None


class DeviceState(BaseModel):
    boot_id: int | None = None
    capabilities: int | None = None
    fw_version: str | None = None
    serial_no: str | None = None
    connected: bool = False
    faults: list[int] = Field(default_factory=list)


class EngineState(BaseModel):
    instance_id: str
    seq: int = 0
    shoe_counter: int = 0
    alarm_counter: int = 0
    shoe: ShoeState | None = None
    device: DeviceState = Field(default_factory=DeviceState)
    alarms: list[AlarmState] = Field(default_factory=list)
    pull: PullBuffer | None = None
    pull_arrivals: int = 0
    jam_since: float | None = None
    storage_failed: bool = False
    records: list[dict[str, Any]] = Field(default_factory=list)
    gate_sent: bool | None = None
    indicator_sent: int | None = None


# --- outputs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceRequest:
    """Ask the shoe to set its gate or indicator (only where it has one)."""

    kind: Literal["gate", "indicator"]
    value: int


@dataclass(frozen=True)
class CommandError:
    code: str
    message: str


@dataclass
class Output:
    events: list[ev.EventBase] = field(default_factory=list)
    device: list[DeviceRequest] = field(default_factory=list)
    ok: bool | None = None  # None: the input was not a command
    error: CommandError | None = None
    result: Any = None


class Refused(Exception):
    """A command refusal inside the engine (never escapes handle())."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@functools.lru_cache(maxsize=1024)
def _derive(cards: tuple[str | None, ...], has_burn: bool) -> tuple[str | None, ...]:
    return tuple(_derive_positions(cards, has_burn))


def derive_positions(cards: list[str | None], has_burn: bool) -> list[str | None]:
    """Memoised :func:`_derive_positions` (pure, and asked several times per input)."""
    return list(_derive(tuple(cards), has_burn))


def _derive_positions(cards: tuple[str | None, ...], has_burn: bool) -> list[str | None]:
    """Position of each card of a hand, given in draw order (None = value unknown).

    Burn, P1, B1, P2, B2 are fixed by order alone; a third card's position needs the
    values before it. Returns None for a pending card (its position hangs on an unknown
    value) and "surplus" for a card beyond what the complete hand needs.
    """
    out: list[str | None] = []
    values: list[int | None] = []
    blocked: str | None = None
    for i, card in enumerate(cards):
        if i == 0 and has_burn:
            out.append("burn")
            continue
        if blocked is not None:
            out.append(None if blocked == "pending" else blocked)
            continue
        position: str | None
        if len(values) < 4:
            position = DEAL_ORDER[len(values)]
        else:
            known = [v for v in values if v is not None]
            if len(known) < len(values):
                blocked = "pending"
                out.append(None)
                continue
            position = next_needed_by_values(known)
            if position is None:
                blocked = "surplus"
                out.append("surplus")
                continue
        out.append(position)
        values.append(None if card is None else value(card))
    return out


def iso(at: float) -> str:
    stamp = dt.datetime.fromtimestamp(at, dt.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


# --- the engine ----------------------------------------------------------------------------

_EMPTY_COMMENCEMENT = CommencementState()  # a placeholder while a checkpoint is pickled


class Engine:
    """The dealing state machine. See the module docstring for states and invariants."""

    def __init__(self, config: EngineConfig, state: EngineState | None = None,
                 instance_id: str = "0") -> None:
        self.config = config
        self.s = state or EngineState(instance_id=instance_id)
        self._out = Output()
        self._at = 0.0
        #: Restores the state from before the latest handle(): the daemon uses it when the
        #: journal cannot store what that input did (memory must not run ahead of disk).
        self.last_rollback: Callable[[], EngineState] | None = None
        # A device-input checkpoint taken ahead of time (prepare_checkpoint), valid while
        # the state object and the number of inputs handled are what they were then.
        self._prepared: tuple[EngineState, int, Callable[[], EngineState]] | None = None
        self._handled = 0

    # -- public API ---------------------------------------------------------------------

    def snapshot(self) -> str:
        return self.s.model_dump_json()

    @classmethod
    def restore(cls, config: EngineConfig, snapshot: str) -> Engine:
        return cls(config, EngineState.model_validate_json(snapshot))

    def handle(self, inp: Input) -> Output:
        """Apply one input. Never raises; a refused command changes nothing."""
        full = isinstance(inp, CommandInput)
        prepared, self._prepared = self._prepared, None
        if not full and prepared is not None and prepared[0] is self.s \
                and prepared[1] == self._handled:
            rollback = prepared[2]
        else:
            rollback = self.checkpoint(full)
        self._handled += 1
        self.last_rollback = rollback
        self._out = Output()
        self._at = inp.at
        try:
            self._dispatch(inp)
            self._sync_alarms()
            self._sync_device()
        except Refused as refusal:
            self.s = rollback()
            out = Output(ok=False, error=CommandError(refusal.code, refusal.message))
            return out
        except Exception as error:  # an engine bug must not take the table down
            self.s = rollback()
            self._out = Output()
            self._alarm_momentary("engine_error", f"input {inp.kind} not applied: {error!r}")
            if isinstance(inp, CommandInput):
                self._out.ok = False
                self._out.error = CommandError("engine_error", repr(error))
            return self._out
        return self._out

    def prepare_checkpoint(self) -> None:
        """Take the checkpoint the next device input needs now, while nothing waits (the
        daemon calls this after a card's event has left). handle() uses it only if the
        state is still the same object and no input was handled since; the state must
        not be changed in place outside handle() in between (nothing does)."""
        self._prepared = (self.s, self._handled, self.checkpoint(full=False))

    def checkpoint(self, full: bool) -> Callable[[], EngineState]:
        """Something to roll back to, paid for mostly on failure (pickle bytes, loaded only
        then). For device inputs (the hot path per card) two parts are kept by reference
        rather than serialised, because device inputs never change them in place: the
        finished-hand `records` (only appended to) and, once the shoe is past it, the
        commencement (changed only while the phase is "commencement"; a new shoe is a
        new object)."""
        if full:
            blob = pickle.dumps(self.s, protocol=pickle.HIGHEST_PROTOCOL)
            return lambda: cast(EngineState, pickle.loads(blob))
        records = self.s.records
        shoe = self.s.shoe
        commencement = shoe.commencement if shoe and shoe.phase != "commencement" else None
        self.s.records = []
        if shoe is not None and commencement is not None:
            shoe.commencement = _EMPTY_COMMENCEMENT
        try:
            blob = pickle.dumps(self.s, protocol=pickle.HIGHEST_PROTOCOL)
        finally:
            self.s.records = records
            if shoe is not None and commencement is not None:
                shoe.commencement = commencement
        kept = list(records)

        def load() -> EngineState:
            state = cast(EngineState, pickle.loads(blob))
            state.records = kept
            if state.shoe is not None and commencement is not None:
                state.shoe.commencement = commencement
            return state

        return load

    def next_deadline(self) -> float | None:
        """When a :class:`Tick` would change something (the incomplete-pull timeout)."""
        pull = self.s.pull
        if pull is None or self.s.jam_since is not None:
            return None
        return pull.last_at + pull.paused + PULL_TIMEOUT_S

    @property
    def seq(self) -> int:
        return self.s.seq

    @property
    def gate_locked(self) -> bool:
        shoe = self.s.shoe
        if self.s.storage_failed:
            return True
        if shoe is None:
            return False
        if shoe.phase in ("shoe_ended", "shoe_voided"):
            return True
        if self.config.betting_control == "commands" and shoe.betting == "open":
            return True
        return bool(self._active_holds())

    @property
    def indicator(self) -> int:
        shoe = self.s.shoe
        if shoe is None:
            return INDICATOR["off"]
        if shoe.phase in ("shoe_ended", "shoe_voided") or self._active_holds():
            return INDICATOR["stop"]
        if shoe.hand is not None and shoe.hand.last_hand:
            return INDICATOR["last_hand"]
        hand = shoe.hand
        if shoe.phase == "dealing" and hand is not None:
            nxt = self._next_position(hand)
            if nxt == "burn":
                return INDICATOR["burn"]
            if nxt is not None and nxt.startswith("P"):
                return INDICATOR["player"]
            if nxt is not None and nxt.startswith("B"):
                return INDICATOR["banker"]
            return INDICATOR["stop"]
        return INDICATOR["burn"]

    # -- dispatch -------------------------------------------------------------------------

    def _dispatch(self, inp: Input) -> None:
        if isinstance(inp, DeviceItem):
            self._on_item(inp)
        elif isinstance(inp, CommandInput):
            self._on_command(inp.command)
        elif isinstance(inp, DeviceHello):
            self._on_hello(inp)
        elif isinstance(inp, DeviceShoeLoaded):
            self._flush_pull_incomplete("a SHOE_LOADED arrived")
            self._on_shoe_loaded()
        elif isinstance(inp, DeviceFault):
            self._on_fault(inp)
        elif isinstance(inp, DeviceGap):
            self._hold_or_notice("cards_lost", f"{inp.lost} frame(s) from the shoe were lost")
        elif isinstance(inp, DeviceLink):
            self.s.device.connected = inp.connected
            if inp.connected:
                self._alarm_clear("device_lost")
            else:
                self._alarm_raise("device_lost", "device_lost",
                                  "no valid frame from the shoe for 5 s")
        elif isinstance(inp, Notice):
            self._alarm_momentary(inp.code, inp.message)
        elif isinstance(inp, StorageStatus):
            self.s.storage_failed = not inp.ok
            if inp.ok:
                self._alarm_clear("storage_failed")
            else:
                self._alarm_raise("storage_failed", "storage_failed", inp.message)
        elif isinstance(inp, Tick):
            deadline = self.next_deadline()
            if deadline is not None and inp.at >= deadline:
                self._flush_pull_incomplete(f"no next item for {PULL_TIMEOUT_S:g} s")

    # -- events ---------------------------------------------------------------------------

    def _emit(self, cls: type[ev.EventBase], **fields: Any) -> None:
        self.s.seq += 1
        shoe = self.s.shoe
        fields.setdefault("shoe_id", shoe.shoe_id if shoe else None)
        if "hand_no" not in fields:
            fields["hand_no"] = shoe.hand.hand_no if shoe and shoe.hand else None
        event = cls(
            event_id=f"{self.config.table_id}-{self.s.instance_id}-{self.s.seq}",
            seq=self.s.seq, instance=self.s.instance_id, ts=iso(self._at),
            table_id=self.config.table_id, **fields,
        )
        self._out.events.append(event)

    def _procedure(self, rule: str, action: str, cards: list[CardRec],
                   detail: str | None = None, hand_no: int | None = None) -> None:
        listed = [{"card_index": c.card_index, "card": c.card} for c in cards]
        extra: dict[str, Any] = {} if hand_no is None else {"hand_no": hand_no}
        self._emit(ev.Procedure, rule=rule, action=action, cards=listed, detail=detail, **extra)

    def _publish_card(self, card: CardRec, force: bool = False) -> None:
        key = f"{card.position}|{card.card}|{card.hand_no}|{card.exposed}|{card.read}"
        if key == card.published and not force:
            return
        card.published = key
        self._emit(
            ev.CardEvent, hand_no=card.hand_no, drawn_at=iso(card.drawn_at),
            position=card.position, card=card.card, card_index=card.card_index,
            device_card_index=card.device_card_index, pull_id=card.pull_id,
            source="manual" if card.read == "manual" else "shoe",
            exposed_during_betting=card.exposed, read=card.read, uid=card.uid,
        )
        if card.flags or card.read == "foreign":
            self._integrity_notice(card)

    def _integrity_notice(self, card: CardRec) -> None:
        """A flagged card outside P/B positions gets one momentary alarm (inside: a hold)."""
        if card.alarmed or card.position is None or card.position in PB_POSITIONS:
            return
        card.alarmed = True
        codes = list(card.flags) + (["foreign_card"] if card.read == "foreign" else [])
        for code in codes:
            self._alarm_momentary(code, f"card {card.card_index} ({card.card or card.uid}) "
                                        f"is {code.replace('_', ' ')}; it was drawn as "
                                        f"{card.position}", card_index=card.card_index)

    # -- alarms ---------------------------------------------------------------------------

    def _alarm_raise(self, key: str, code: str, message: str, card_index: int | None = None,
                     fault_code: int | None = None) -> None:
        if any(a.key == key for a in self.s.alarms):
            return
        self.s.alarm_counter += 1
        alarm_id = f"{self.config.table_id}-{self.s.instance_id}-A{self.s.alarm_counter}"
        self.s.alarms.append(AlarmState(alarm_id=alarm_id, code=code, since=iso(self._at),
                                        key=key, card_index=card_index, fault_code=fault_code))
        self._emit(ev.Alarm, alarm_id=alarm_id, code=code, active=True, message=message,
                   card_index=card_index, fault_code=fault_code)

    def _alarm_clear(self, key: str, message: str = "cleared") -> None:
        for alarm in list(self.s.alarms):
            if alarm.key == key:
                self.s.alarms.remove(alarm)
                self._emit(ev.Alarm, alarm_id=alarm.alarm_id, code=alarm.code, active=False,
                           message=message, card_index=alarm.card_index,
                           fault_code=alarm.fault_code)

    def _alarm_momentary(self, code: str, message: str, card_index: int | None = None) -> None:
        self.s.alarm_counter += 1
        alarm_id = f"{self.config.table_id}-{self.s.instance_id}-A{self.s.alarm_counter}"
        self._emit(ev.Alarm, alarm_id=alarm_id, code=code, active=True, message=message,
                   card_index=card_index, momentary=True)

    @staticmethod
    def _hold_alarm_wanted(detail: list[tuple[str, CardRec | None]]
                           ) -> dict[str, tuple[str, int | None, str]]:
        wanted: dict[str, tuple[str, int | None, str]] = {}
        for reason, card in detail:
            if reason == "cover_open":
                continue  # the device_fault alarm (code 3) says it
            key = f"hold:{reason}:{card.card_index if card else ''}"
            where = f"card {card.card_index}" if card else "the hand"
            wanted[key] = (reason, card.card_index if card else None,
                           f"{reason.replace('_', ' ')}: {where} holds the game")
        return wanted

    def _sync_alarms(self) -> None:
        detail = self._hold_detail()
        wanted = self._hold_alarm_wanted(detail)
        for alarm in list(self.s.alarms):
            if alarm.key.startswith("hold:") and alarm.key not in wanted:
                self._alarm_clear(alarm.key, "hold resolved")
        for key, (code, card_index, message) in wanted.items():
            self._alarm_raise(key, code, message, card_index=card_index)
        # Every card placed in a hold position has had its alarm now.
        for _, card in detail:
            if card is not None:
                card.alarmed = True

    def _sync_device(self, force: bool = False) -> None:
        caps = self.s.device.capabilities
        if caps is None:
            return
        if caps & CAP_GATE:
            locked = self.gate_locked
            if force or locked != self.s.gate_sent:
                self.s.gate_sent = locked
                self._out.device.append(DeviceRequest("gate", int(locked)))
        if caps & CAP_INDICATOR:
            pattern = self.indicator
            if force or pattern != self.s.indicator_sent:
                self.s.indicator_sent = pattern
                self._out.device.append(DeviceRequest("indicator", pattern))

    # -- holds ----------------------------------------------------------------------------

    def _hold_detail(self) -> list[tuple[str, CardRec | None]]:
        """Every active hold of the current context, with the card it concerns."""
        shoe = self.s.shoe
        if shoe is None or shoe.phase in ("shoe_ended", "shoe_voided"):
            return []
        out: list[tuple[str, CardRec | None]] = []
        if shoe.phase == "commencement":
            com = shoe.commencement
            out += [(h, None) for h in com.holds]
            if com.cards and com.cards[0].card is None:
                first = com.cards[0]
                out.append(("foreign_card" if first.read == "foreign" else "card_unread", first))
            return out
        hand = shoe.hand
        if hand is None:
            return out
        out += [(h, None) for h in hand.holds]
        for card, position in zip(hand.cards, self._positions(hand), strict=True):
            if position not in PB_POSITIONS:
                continue
            if card.card is None:
                out.append(("foreign_card" if card.read == "foreign" else "card_unread", card))
            elif card.flags and not card.flags_cleared:
                out.extend((flag, card) for flag in card.flags)
        return out

    def _active_holds(self) -> list[str]:
        return sorted({reason for reason, _ in self._hold_detail()})

    def _hold_or_notice(self, reason: str, message: str) -> None:
        """cards_lost / incomplete_pull / device_rebooted: hold the context, or just alarm."""
        shoe = self.s.shoe
        if shoe is None or shoe.phase in ("shoe_ended", "shoe_voided"):
            self._alarm_momentary(reason, message)
            return
        holds = shoe.commencement.holds if shoe.phase == "commencement" else self._next_hand().holds
        if reason not in holds:
            holds.append(reason)
        self._alarm_raise(f"hold:{reason}:", reason, message)
        self._advance()

    # -- device inputs --------------------------------------------------------------------

    def _on_hello(self, hello: DeviceHello) -> None:
        device = self.s.device
        rebooted = device.boot_id is not None and device.boot_id != hello.boot_id
        device.boot_id = hello.boot_id
        device.capabilities = hello.capabilities
        device.fw_version = hello.fw_version
        device.serial_no = hello.serial_no
        device.connected = True
        self._alarm_clear("device_lost", "the shoe answered")
        if rebooted:
            for code in list(device.faults):
                self._alarm_clear(f"fault:{code}", "cleared by the device's reboot")
            device.faults.clear()
            self.s.jam_since = None
            self._flush_pull_incomplete("the device rebooted")
            shoe = self.s.shoe
            if shoe is not None and shoe.phase in ("commencement", "between_hands", "dealing"):
                self._hold_or_notice("device_rebooted",
                                     "the shoe rebooted: frames pending in it were lost")
            else:
                self._alarm_momentary("device_rebooted", "the shoe rebooted")
        self._sync_alarms()
        self._sync_device(force=True)  # re-sent after every HELLO

    def _on_fault(self, fault: DeviceFault) -> None:
        name = FAULT_NAMES.get(fault.code, f"fault {fault.code}")
        device = self.s.device
        if fault.active:
            if fault.code not in device.faults:
                device.faults.append(fault.code)
            self._alarm_raise(f"fault:{fault.code}", "device_fault", f"shoe fault: {name}",
                              fault_code=fault.code)
            if fault.code == FAULT_JAM and self.s.jam_since is None:
                self.s.jam_since = fault.at
            shoe = self.s.shoe
            if (fault.code == FAULT_COVER_OPEN and shoe is not None
                    and shoe.phase == "dealing" and shoe.hand is not None
                    and "cover_open" not in shoe.hand.holds):
                shoe.hand.holds.append("cover_open")
        else:
            if fault.code in device.faults:
                device.faults.remove(fault.code)
            self._alarm_clear(f"fault:{fault.code}", f"shoe fault cleared: {name}")
            if fault.code == FAULT_JAM and self.s.jam_since is not None:
                if self.s.pull is not None:
                    self.s.pull.paused += fault.at - self.s.jam_since
                self.s.jam_since = None

    def _on_shoe_loaded(self) -> None:
        shoe = self.s.shoe
        if shoe is None or shoe.phase in ("shoe_ended", "shoe_voided"):
            self._start_shoe("shoe_loaded")
        elif shoe.phase == "commencement" and not shoe.commencement.cards:
            return  # before its first card, it simply belongs to that shoe
        else:
            self._alarm_momentary("shoe_loaded_in_play",
                                  f"a shoe was loaded while shoe {shoe.shoe_id} is in play")

    def _start_shoe(self, trigger: Literal["shoe_loaded", "new_shoe"]) -> None:
        self.s.shoe_counter += 1
        stamp = dt.datetime.fromtimestamp(self._at, dt.UTC).strftime("%Y%m%dT%H%M%S")
        shoe_id = f"{self.config.table_id}-{stamp}-{self.s.instance_id}-{self.s.shoe_counter}"
        self.s.shoe = ShoeState(shoe_id=shoe_id, phase="commencement")
        cfg = self.config
        self._emit(ev.ShoeStarted, decks=cfg.decks, table_type=cfg.table_type,
                   unnecessary_cards=cfg.unnecessary_cards,
                   betting_control=cfg.betting_control, trigger=trigger)

    # -- pulls ----------------------------------------------------------------------------

    def _on_item(self, item: DeviceItem) -> None:
        if item.problem is not None:
            self._alarm_momentary("bad_payload", item.problem)
        self.s.pull_arrivals += 1
        entry = PullItem(item=item, arrival=self.s.pull_arrivals)
        pid, pos, size = item.pull_id, item.pull_pos, item.pull_size
        if pid is None or pos is None or size is None or not 1 <= pos <= size <= 3:
            self._flush_pull_incomplete("an item of another pull arrived")
            self._apply_pull([entry], complete=False,
                             why=f"pull fields unreadable or out of range "
                                 f"(pull_pos {pos}, pull_size {size})")
            return
        pull = self.s.pull
        if pull is not None and (pull.pull_id != pid or pull.size != size
                                 or any(p.item.pull_pos == pos for p in pull.items)):
            self._flush_pull_incomplete(
                f"item of pull {pid} (pos {pos}/{size}) arrived before pull "
                f"{pull.pull_id} was complete")
            pull = None
        if pull is None:
            pull = PullBuffer(pull_id=pid, size=size, last_at=item.at)
            self.s.pull = pull
        pull.items.append(entry)
        pull.last_at = item.at
        pull.paused = 0.0
        if len(pull.items) == pull.size:
            self.s.pull = None
            self._apply_pull(pull.items, complete=True)

    def _flush_pull_incomplete(self, why: str) -> None:
        pull = self.s.pull
        if pull is None:
            return
        self.s.pull = None
        self._apply_pull(pull.items, complete=False,
                         why=f"pull {pull.pull_id}: {len(pull.items)} of {pull.size} items; {why}")

    def _apply_pull(self, entries: list[PullItem], complete: bool, why: str = "") -> None:
        ordered = sorted(entries, key=lambda e: (e.item.pull_pos or 0, e.arrival))
        shoe = self.s.shoe
        in_shoe = shoe is not None and shoe.phase != "shoe_voided"
        cards: list[tuple[DeviceItem, CardRec | None]] = []
        for entry in ordered:
            item = entry.item
            if item.item == "cut":
                cards.append((item, None))
                continue
            index = 0
            if in_shoe and shoe is not None:
                shoe.card_counter += 1
                index = shoe.card_counter
            cards.append((item, self._card_record(item, index)))
        size = max((e.item.pull_size or 1) for e in entries)
        if size > 1 and in_shoe:
            reordered = [e.arrival for e in ordered] != sorted(e.arrival for e in ordered)
            self._procedure("multi_card_pull", "reordered" if reordered else "recorded",
                            [c for _, c in cards if c is not None],
                            detail=f"{len(entries)} item(s), upper card first")
        resolved_before = self._resolutions()
        for _item, card in cards:
            surplus = self._resolutions() != resolved_before
            if card is None:
                self._cut_card()
            else:
                self._count(card)
                self._route(card, surplus=surplus)
        if not complete:
            self._hold_or_notice("incomplete_pull", f"incomplete pull: {why}")

    def _resolutions(self) -> int:
        shoe = self.s.shoe
        return 0 if shoe is None else shoe.hands_played + shoe.hands_voided

    def _card_record(self, item: DeviceItem, index: int) -> CardRec:
        status = item.status
        card = item.card
        if item.item == "unread" or card is None:
            status = "foreign" if status == "foreign" else "unread"
            card = None
        return CardRec(card_index=index, card=card, read=status, uid=item.uid,
                       device_card_index=item.device_card_index, pull_id=item.pull_id,
                       drawn_at=item.at)

    def _count(self, card: CardRec) -> None:
        """Card integrity (rule 11): excess copies and duplicate UIDs are flagged."""
        shoe = self.s.shoe
        if shoe is None or shoe.phase == "shoe_voided":
            return
        if card.uid is not None:
            if card.uid in shoe.uids:
                card.flags.append("duplicate_uid")
            else:
                shoe.uids.append(card.uid)
        if card.card is not None:
            shoe.counts[card.card] = shoe.counts.get(card.card, 0) + 1
            if shoe.counts[card.card] > self.config.decks:
                card.flags.append("excess_card")

    # -- routing cards --------------------------------------------------------------------

    def _route(self, card: CardRec, surplus: bool = False) -> None:
        shoe = self.s.shoe
        if shoe is None or shoe.phase == "shoe_voided":
            card.card_index = 0
            card.position, card.hand_no = "without_shoe", None
            self._emit(ev.CardEvent, shoe_id=None, hand_no=None, drawn_at=iso(card.drawn_at),
                       position="without_shoe", card=card.card, card_index=None,
                       device_card_index=card.device_card_index, pull_id=card.pull_id,
                       source="shoe", read=card.read, uid=card.uid)
            self._emit(ev.Procedure, shoe_id=None, hand_no=None, rule="card_without_shoe",
                       action="ignored", cards=[{"card_index": None, "card": card.card}])
            return
        if shoe.phase == "shoe_ended":
            self._after_end(card)
        elif shoe.phase == "commencement":
            shoe.commencement.cards.append(card)
            self._advance()
        elif surplus or (self.config.betting_control == "commands" and shoe.betting == "open"):
            self._unnecessary(card)
        else:
            hand = self._next_hand()
            hand.cards.append(card)
            if not hand.in_progress:
                hand.in_progress = True  # mode none: the burn starts the hand
                shoe.phase = "dealing"
            self._advance()

    def _after_end(self, card: CardRec) -> None:
        card.position, card.hand_no = "after_shoe_end", None
        self._publish_card(card)
        self._procedure("card_after_shoe_end", "ignored", [card], hand_no=None)

    def _next_hand(self) -> HandState:
        shoe = self.s.shoe
        assert shoe is not None
        if shoe.hand is None:
            shoe.hand_no += 1
            shoe.hand = HandState(hand_no=shoe.hand_no)
        return shoe.hand

    def _unnecessary(self, card: CardRec) -> None:
        shoe = self.s.shoe
        assert shoe is not None
        hand = self._next_hand()
        hand.unnecessary += 1
        commands_mode = self.config.betting_control == "commands"
        if hand.unnecessary == 1 and not hand.cards:
            hand.cards.append(card)
            hand.has_burn = True
            if not commands_mode:
                hand.in_progress = True
                shoe.phase = "dealing"
            self._procedure("unnecessary_card", "next_burn", [card], hand_no=hand.hand_no)
            self._advance()
        elif hand.unnecessary == 2 and self.config.unnecessary_cards == "burn_then_player":
            card.exposed = commands_mode
            hand.cards.append(card)
            self._procedure("unnecessary_card", "next_player_first", [card],
                            hand_no=hand.hand_no)
            if commands_mode:
                self._alarm_momentary("card_exposed_during_betting",
                                      f"card {card.card_index} was exposed during betting and "
                                      f"becomes P1 of hand {hand.hand_no}",
                                      card_index=card.card_index)
            self._advance()
        else:
            card.position, card.hand_no = "unnecessary", hand.hand_no
            self._publish_card(card)
            self._procedure("unnecessary_card", "shoe_voided", [card], hand_no=hand.hand_no,
                            detail=f"unnecessary card number {hand.unnecessary} "
                                   f"({self.config.unnecessary_cards})")
            self._void_shoe("unnecessary_cards", None)

    # -- positions -------------------------------------------------------------------------

    def _positions(self, hand: HandState) -> list[str | None]:
        """Derived position of each card of the hand; None = pending, "surplus" = beyond."""
        return derive_positions([c.card for c in hand.cards], hand.has_burn)

    def _next_position(self, hand: HandState) -> str | None:
        if not hand.cards and hand.has_burn:
            return "burn"
        known = [c.card for c in hand.cards]
        positions = derive_positions(known, hand.has_burn)
        if positions and positions[-1] in (None, "surplus"):
            return None
        # Where would one more card go? Only the position matters, not its value.
        nxt = derive_positions([*known, "AS"], hand.has_burn)[-1]
        return None if nxt == "surplus" else nxt

    def _complete(self, hand: HandState) -> bool:
        positions = self._positions(hand)
        dealt = [c for c, p in zip(hand.cards, positions, strict=True) if p in PB_POSITIONS]
        if len(dealt) < 4 or any(c.card is None for c in dealt):
            return False
        return next_needed_by_values([value(c.card) for c in dealt if c.card]) is None

    def _sync_hand(self, hand: HandState) -> None:
        for card, position in zip(hand.cards, self._positions(hand), strict=True):
            card.position = None if position == "surplus" else position
            card.hand_no = hand.hand_no
            self._publish_card(card)

    # -- advancing ------------------------------------------------------------------------

    def _advance(self) -> None:
        """Place what can be placed; end commencement, fix results, as the rules allow."""
        shoe = self.s.shoe
        if shoe is None:
            return
        if shoe.phase == "commencement":
            self._advance_commencement()
        elif shoe.phase in ("between_hands", "dealing") and shoe.hand is not None:
            hand = shoe.hand
            self._sync_hand(hand)
            if hand.in_progress and self._complete(hand) and not self._active_holds():
                self._resolve(hand)

    def _advance_commencement(self) -> None:
        shoe = self.s.shoe
        assert shoe is not None
        com = shoe.commencement
        if not com.cards:
            return
        first = com.cards[0]
        if first.position is None:
            if first.card is not None:
                com.burn_count = commencement_count(first.card)
            self._commencement_event(first)
        for i, card in enumerate(com.cards):
            if i == 0:
                card.position = "commencement"
            elif com.burn_count is not None and i <= com.burn_count:
                card.position = "commencement_burn"
            else:
                card.position = None
            self._publish_card(card)
        if (com.burn_count is not None and len(com.cards) > com.burn_count
                and not self._active_holds()):
            overflow = com.cards[com.burn_count + 1:]
            del com.cards[com.burn_count + 1:]
            self._open_betting()
            for card in overflow:
                self._route(card)

    def _commencement_event(self, first: CardRec) -> None:
        shoe = self.s.shoe
        assert shoe is not None
        self._emit(ev.Commencement, hand_no=None, card=first.card,
                   burn_count=shoe.commencement.burn_count, card_index=first.card_index)

    def _open_betting(self) -> None:
        shoe = self.s.shoe
        assert shoe is not None
        shoe.phase = "between_hands"
        shoe.betting = "open" if self.config.betting_control == "commands" else None

    def _resolve(self, hand: HandState) -> None:
        shoe = self.s.shoe
        assert shoe is not None
        self._sync_alarms()  # the hold's alarm clears before the result it releases
        positions = self._positions(hand)
        dealt = [c for c, p in zip(hand.cards, positions, strict=True) if p in PB_POSITIONS]
        surplus = [c for c, p in zip(hand.cards, positions, strict=True)
                   if p not in PB_POSITIONS and p != "burn"]
        hand.cards = [c for c in hand.cards if c not in surplus]
        result = evaluate([c.card for c in dealt if c.card is not None])
        payouts = self.config.pays.payouts(result)
        self._emit(ev.HandResultEvent, hand_no=hand.hand_no,
                   player_cards=list(result.player_cards),
                   banker_cards=list(result.banker_cards),
                   player_total=result.player_total, banker_total=result.banker_total,
                   winner=result.winner, player_natural=result.player_natural,
                   banker_natural=result.banker_natural, player_pair=result.player_pair,
                   banker_pair=result.banker_pair, cards_dealt=result.cards_dealt,
                   big_small=result.big_small, banker_six=result.banker_six,
                   payouts=payouts, card_indexes=[c.card_index for c in dealt])
        shoe.hands_played += 1
        shoe.resolved[hand.hand_no] = False
        shoe.last_resolved = hand.hand_no
        self._record(hand, result={"winner": result.winner,
                                   "player_cards": list(result.player_cards),
                                   "banker_cards": list(result.banker_cards),
                                   "player_total": result.player_total,
                                   "banker_total": result.banker_total, "payouts": payouts})
        self._finish_hand(hand, surplus)

    def _finish_hand(self, hand: HandState, leftovers: list[CardRec]) -> None:
        """After a result or a void: end the shoe after its last hand, else open betting."""
        shoe = self.s.shoe
        assert shoe is not None
        shoe.hand = None
        if hand.last_hand or shoe.end_requested:
            self._end_shoe()
            for card in leftovers:
                self._after_end(card)
            return
        self._open_betting()
        for card in leftovers:
            self._route(card, surplus=True)

    def _record(self, hand: HandState, result: dict[str, Any] | None = None,
                voided: dict[str, Any] | None = None) -> None:
        shoe = self.s.shoe
        assert shoe is not None
        positions = self._positions(hand)
        record = {
            "shoe_id": shoe.shoe_id, "hand_no": hand.hand_no,
            "cards": [{"card_index": c.card_index, "card": c.card,
                       "position": p if p not in (None, "surplus") else "pending",
                       "source": "manual" if c.read == "manual" else "shoe"}
                      for c, p in zip(hand.cards, positions, strict=True)],
            "result": result, "voided": voided, "supervisor_actions": list(hand.actions),
            "misorders": [],
        }
        self.s.records.append(record)
        del self.s.records[:-RECORDS_KEPT]

    def _find_record(self, hand_no: int) -> dict[str, Any] | None:
        shoe = self.s.shoe
        for record in reversed(self.s.records):
            if shoe is not None and record["shoe_id"] == shoe.shoe_id \
                    and record["hand_no"] == hand_no:
                found: dict[str, Any] = record
                return found
        return None

    def _end_shoe(self) -> None:
        shoe = self.s.shoe
        assert shoe is not None
        leftovers = shoe.hand.cards if shoe.hand is not None and not shoe.hand.in_progress \
            else []
        shoe.hand = None
        shoe.phase = "shoe_ended"
        shoe.betting = None
        self._emit(ev.ShoeEnded, hand_no=None, hands_played=shoe.hands_played,
                   hands_voided=shoe.hands_voided)
        for card in leftovers:
            self._after_end(card)

    def _void_hand_in_progress(self, hand: HandState, reason: str,
                               operator: str | None) -> None:
        shoe = self.s.shoe
        assert shoe is not None
        self._emit(ev.HandVoided, hand_no=hand.hand_no, reason=reason, operator=operator,
                   result_withdrawn=False)
        shoe.hands_voided += 1
        shoe.resolved[hand.hand_no] = True
        self._record(hand, voided={"reason": reason, "operator": operator,
                                   "result_withdrawn": False})

    def _void_shoe(self, reason: Literal["supervisor", "unnecessary_cards", "replaced"],
                   operator: str | None) -> None:
        shoe = self.s.shoe
        assert shoe is not None
        hand = shoe.hand
        if hand is not None and (hand.in_progress or hand.cards) and reason != "unnecessary_cards":
            self._void_hand_in_progress(hand, f"shoe voided ({reason})", operator)
        shoe.hand = None
        shoe.phase = "shoe_voided"
        shoe.betting = None
        self._emit(ev.ShoeVoided, hand_no=None, reason=reason, operator=operator)

    # -- the cut card -----------------------------------------------------------------------

    def _cut_card(self) -> None:
        shoe = self.s.shoe
        if shoe is None or shoe.phase in ("shoe_ended", "shoe_voided"):
            self._procedure("cut_card_ignored", "ignored", [], detail="no shoe in play")
            return
        if shoe.phase == "commencement":
            self._alarm_momentary("cut_card_in_commencement",
                                  "the cut card was drawn during commencement and is ignored")
            return
        if shoe.cut_card_seen:
            self._procedure("cut_card_ignored", "ignored", [],
                            detail="a second cut card in this shoe")
            return
        shoe.cut_card_seen = True
        self._last_hand("cut_card")

    def _last_hand(self, reason: Literal["cut_card", "end_shoe"]) -> None:
        shoe = self.s.shoe
        assert shoe is not None
        hand = shoe.hand
        if hand is not None and hand.in_progress:
            if not hand.last_hand:
                hand.last_hand = True
                self._emit(ev.LastHand, hand_no=hand.hand_no, reason=reason)
            return
        # Between hands: the hand just finished was the last one.
        self._emit(ev.LastHand, hand_no=shoe.last_resolved, reason=reason)
        self._end_shoe()

    # -- commands -------------------------------------------------------------------------

    def _on_command(self, command: cmd.Command) -> None:
        if self.s.storage_failed:
            raise Refused("storage_failed", "the journal cannot be written; commands wait")
        handler = getattr(self, f"_cmd_{command.command}", None)
        if handler is None:
            raise Refused("unknown_command", f"the engine does not handle {command.command}")
        result = handler(command)
        self._out.ok = True
        self._out.result = result
        if command.command not in ("recall", "replay"):
            detail = command.model_dump(exclude={"request_id", "operator", "command"})
            self._emit(ev.SupervisorAction, command=command.command,
                       operator=command.operator, request_id=command.request_id,
                       detail=detail)
            shoe = self.s.shoe
            if shoe is not None and shoe.hand is not None:
                shoe.hand.actions.append({"command": command.command,
                                          "operator": command.operator,
                                          "request_id": command.request_id, **detail})

    def _shoe_in_play(self) -> ShoeState:
        shoe = self.s.shoe
        if shoe is None or shoe.phase in ("shoe_ended", "shoe_voided"):
            raise Refused("no_shoe", "no shoe is in play")
        return shoe

    def _cmd_new_shoe(self, c: cmd.NewShoe) -> dict[str, Any]:
        shoe = self.s.shoe
        if shoe is not None and shoe.phase not in ("shoe_ended", "shoe_voided"):
            if not c.force:
                raise Refused("shoe_in_play", f"shoe {shoe.shoe_id} is in play "
                                              f"({shoe.phase}); send force: true to replace it")
            self._flush_pull_incomplete("the shoe was replaced")
            self._void_shoe("replaced", c.operator)
        self._start_shoe("new_shoe")
        assert self.s.shoe is not None
        return {"shoe_id": self.s.shoe.shoe_id}

    def _cmd_close_betting(self, c: cmd.CloseBetting) -> dict[str, Any]:
        if self.config.betting_control == "none":
            raise Refused("betting_control_none", "this table runs with betting_control none")
        shoe = self.s.shoe
        if shoe is None or shoe.phase in ("shoe_ended", "shoe_voided"):
            raise Refused("shoe_ended", "no shoe is in play")
        if shoe.phase == "commencement":
            raise Refused("not_between_hands", "the shoe is in commencement")
        hand = shoe.hand
        if shoe.betting == "closed" and hand is not None:
            if c.hand_no is None or c.hand_no == hand.hand_no:
                return {"hand_no": hand.hand_no, "repeat": True}
            raise Refused("wrong_hand", f"expected hand_no {hand.hand_no} (in progress), "
                                        f"got {c.hand_no}")
        upcoming = hand.hand_no if hand is not None else shoe.hand_no + 1
        if c.hand_no is not None and c.hand_no != upcoming:
            raise Refused("wrong_hand", f"expected hand_no {upcoming}, got {c.hand_no}")
        hand = self._next_hand()
        hand.in_progress = True
        shoe.betting = "closed"
        shoe.phase = "dealing"
        self._emit(ev.BettingClosed, hand_no=hand.hand_no)
        self._advance()
        return {"hand_no": hand.hand_no}

    def _find_card(self, card_index: int) -> tuple[CardRec, Literal["commencement", "hand"]]:
        shoe = self._shoe_in_play()
        if shoe.phase == "commencement":
            for card in shoe.commencement.cards:
                if card.card_index == card_index:
                    return card, "commencement"
        if shoe.hand is not None:
            for card in shoe.hand.cards:
                if card.card_index == card_index:
                    return card, "hand"
        for record in self.s.records:
            if record["shoe_id"] == shoe.shoe_id and any(
                    c["card_index"] == card_index for c in record["cards"]):
                raise Refused("hand_resolved", f"card {card_index} belongs to hand "
                                               f"{record['hand_no']}, already resolved")
        raise Refused("unknown_card", f"expected the index of a card of the unresolved hand, "
                                      f"a pending card or the commencement card; got "
                                      f"{card_index}")

    def _cmd_manual_card(self, c: cmd.ManualCard) -> dict[str, Any]:
        try:
            new = parse_card(c.card)
        except CardNotationError as error:
            raise Refused("bad_card", str(error)) from error
        card, where = self._find_card(c.card_index)
        shoe = self.s.shoe
        assert shoe is not None
        if where == "commencement" and card.card_index != shoe.commencement.cards[0].card_index:
            raise Refused("unknown_card", f"card {c.card_index} is a commencement burn; only "
                                          f"the commencement card takes an entry")
        if card.card is not None:
            shoe.counts[card.card] = max(0, shoe.counts.get(card.card, 1) - 1)
        shoe.counts[new] = shoe.counts.get(new, 0) + 1
        if shoe.counts[new] > self.config.decks:
            self._alarm_momentary("excess_card", f"manual entry {new} for card {c.card_index} "
                                                 f"exceeds {self.config.decks} decks",
                                  card_index=c.card_index)
        card.card = new
        card.read = "manual"
        card.flags_cleared = True
        self._publish_card(card, force=True)
        if where == "commencement":
            shoe.commencement.burn_count = commencement_count(new)
            self._commencement_event(card)
        self._advance()
        return {"card_index": c.card_index, "card": new}

    def _cmd_resume(self, c: cmd.Resume) -> dict[str, Any]:
        shoe = self._shoe_in_play()
        holds = self._hold_detail()
        if not holds:
            raise Refused("not_held", "nothing is held")
        unknown = [card.card_index for reason, card in holds
                   if reason in ("card_unread", "foreign_card") and card is not None]
        if unknown:
            raise Refused("card_unknown", f"card(s) {unknown} need a manual_card entry first")
        if shoe.phase == "commencement":
            shoe.commencement.holds.clear()
        elif shoe.hand is not None:
            shoe.hand.holds.clear()
            for card in shoe.hand.cards:
                card.flags_cleared = True
        self._advance()
        return {"resumed": sorted({r for r, _ in holds})}

    def _cmd_void_hand(self, c: cmd.VoidHand) -> dict[str, Any]:
        shoe = self.s.shoe
        if shoe is None:
            raise Refused("unknown_hand", f"no hand {c.hand_no}: no shoe")
        hand = shoe.hand
        if hand is not None and hand.hand_no == c.hand_no and shoe.phase in (
                "between_hands", "dealing") and (hand.in_progress or hand.cards or hand.holds):
            self._void_hand_in_progress(hand, c.reason, c.operator)
            self._finish_hand(hand, [])
            return {"hand_no": c.hand_no, "result_withdrawn": False}
        if c.hand_no in shoe.resolved:
            if shoe.resolved[c.hand_no]:
                raise Refused("already_voided", f"hand {c.hand_no} is already voided")
            shoe.resolved[c.hand_no] = True
            shoe.hands_played -= 1
            shoe.hands_voided += 1
            self._emit(ev.HandVoided, hand_no=c.hand_no, reason=c.reason, operator=c.operator,
                       result_withdrawn=True)
            record = self._find_record(c.hand_no)
            if record is not None:
                record["voided"] = {"reason": c.reason, "operator": c.operator,
                                    "result_withdrawn": True}
            return {"hand_no": c.hand_no, "result_withdrawn": True}
        raise Refused("unknown_hand", f"expected the hand in progress or a resolved hand of "
                                      f"shoe {shoe.shoe_id}, got {c.hand_no}")

    def _cmd_void_shoe(self, c: cmd.VoidShoe) -> dict[str, Any]:
        self._shoe_in_play()
        self._flush_pull_incomplete("the shoe was voided")
        self._void_shoe("supervisor", c.operator)
        return {}

    def _cmd_end_shoe(self, c: cmd.EndShoe) -> dict[str, Any]:
        shoe = self.s.shoe
        if shoe is not None and shoe.phase == "shoe_ended":
            return {"repeat": True}
        shoe = self._shoe_in_play()
        if shoe.phase == "commencement":
            self._end_shoe()
        elif shoe.hand is not None and shoe.hand.in_progress:
            shoe.end_requested = True
            self._last_hand("end_shoe")
        else:
            self._end_shoe()
        return {}

    def _cmd_cut_card(self, c: cmd.CutCardCommand) -> dict[str, Any]:
        self._shoe_in_play()
        self._cut_card()
        return {}

    def _cmd_realign(self, c: cmd.Realign) -> dict[str, Any]:
        card, where = self._find_card(c.card_index)
        shoe = self.s.shoe
        assert shoe is not None
        if where == "commencement":
            com = shoe.commencement
            index = com.cards.index(card)
            if index == 0:
                raise Refused("unknown_card", "the commencement card cannot start a hand")
            moved = com.cards[index:]
            del com.cards[index:]
            com.burn_count = len(com.cards) - 1
            com.holds.clear()
            self._open_betting()
        else:
            hand = shoe.hand
            assert hand is not None
            index = hand.cards.index(card)
            moved = hand.cards[index:]
            del hand.cards[index:]
            if hand.cards or hand.in_progress:
                self._void_hand_in_progress(hand, f"realign at card {c.card_index}", c.operator)
            shoe.hand = None
        new = self._next_hand()
        new.has_burn = c.position == "burn"
        new.in_progress = True
        new.cards = moved
        shoe.phase = "dealing"
        if self.config.betting_control == "commands":
            shoe.betting = "closed"
        self._advance()
        return {"hand_no": new.hand_no}

    def _cmd_report_misorder(self, c: cmd.ReportMisorder) -> dict[str, Any]:
        shoe = self.s.shoe
        exists = shoe is not None and (
            c.hand_no in shoe.resolved or (shoe.hand is not None
                                           and shoe.hand.hand_no == c.hand_no))
        if not exists:
            raise Refused("unknown_hand", f"hand {c.hand_no} does not exist in this shoe")
        self._procedure("misorder_reported", "recorded", [], detail=c.detail,
                        hand_no=c.hand_no)
        record = self._find_record(c.hand_no)
        if record is not None:
            record["misorders"].append({"detail": c.detail, "operator": c.operator})
        return {}

    def _cmd_recall(self, c: cmd.Recall) -> dict[str, Any]:
        return {"hands": list(reversed(self.s.records[-c.hands:]))}

    # -- the retained state topic ----------------------------------------------------------

    def public_state(self) -> dict[str, Any]:
        """The `{root}/state` snapshot of mqtt-api.md section 3."""
        shoe = self.s.shoe
        state: dict[str, Any] = {
            "schema_version": 1, "seq": self.s.seq, "instance": self.s.instance_id,
            "shoe_id": None, "shoe_state": "no_shoe",
            "betting": None, "hand_no": None, "last_hand": False, "cards": [],
            "pending_cards": [], "next_position": None, "commencement": None, "hold": None,
            "alarms": [{"alarm_id": a.alarm_id, "code": a.code, "since": a.since,
                        "card_index": a.card_index, "fault_code": a.fault_code}
                       for a in self.s.alarms],
            "hands_played": 0, "hands_voided": 0,
            "gate_locked": self.gate_locked, "indicator": self.indicator,
        }
        if shoe is None:
            return state
        holds = self._hold_detail()
        held = bool(holds)
        shoe_state: str = shoe.phase
        if held and shoe.phase == "dealing":
            shoe_state = "held"
        com = shoe.commencement
        state.update({
            "shoe_id": shoe.shoe_id, "shoe_state": shoe_state, "betting": shoe.betting,
            "hands_played": shoe.hands_played, "hands_voided": shoe.hands_voided,
            "commencement": {
                "card": com.cards[0].card if com.cards else None,
                "burn_count": com.burn_count,
                "burns_drawn": sum(1 for c in com.cards[1:] if c.position),
            },
        })
        if shoe.phase == "commencement":
            state["pending_cards"] = [{"card": c.card, "card_index": c.card_index}
                                      for c in com.cards if c.position is None]
        hand = shoe.hand
        if hand is not None:
            state["hand_no"] = hand.hand_no
            state["last_hand"] = hand.last_hand
            positions = self._positions(hand)
            state["cards"] = [{"position": p, "card": c.card, "card_index": c.card_index}
                              for c, p in zip(hand.cards, positions, strict=True)
                              if p not in (None, "surplus")]
            state["pending_cards"] = [{"card": c.card, "card_index": c.card_index}
                                      for c, p in zip(hand.cards, positions, strict=True)
                                      if p in (None, "surplus")]
            if hand.in_progress:
                state["next_position"] = self._next_position(hand)
        elif shoe.last_resolved is not None:
            state["hand_no"] = shoe.last_resolved
        if shoe.betting == "open":
            nh = hand
            positions = self._positions(nh) if nh is not None else []
            pick = {p: c.card for c, p in zip(nh.cards, positions, strict=True)} if nh else {}
            state["next_hand"] = {"hand_no": nh.hand_no if nh else shoe.hand_no + 1,
                                  "burn": pick.get("burn"), "P1": pick.get("P1"),
                                  "unnecessary_count": nh.unnecessary if nh else 0}
        if held:
            reasons = sorted({r for r, _ in holds})
            card_index = next((c.card_index for _, c in holds if c is not None), None)
            allowed = ["void_hand", "realign"]
            if any(r in ("card_unread", "foreign_card", "excess_card", "duplicate_uid")
                   for r in reasons):
                allowed.insert(0, "manual_card")
            if not any(r in ("card_unread", "foreign_card") for r in reasons):
                allowed.insert(0, "resume")
            state["hold"] = {"reasons": reasons, "card_index": card_index, "allowed": allowed}
        return state

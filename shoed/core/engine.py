"""The dealing-procedure engine (dealing-rules.md section 3) as a pure state machine.

``Engine.handle(input) -> Output``: decoded device inputs and validated commands in;
events (mqtt-api.md section 2), requests to the shoe (gate, indicator) and a command
answer out. No I/O, no clock (every input carries its times), no randomness: the same
inputs from the same snapshot give the same events, byte for byte.

Every change of the state happens in this module. Its parts live beside it:
:mod:`.state` (the models), :mod:`.view` (what the state says: positions, holds, gate,
indicator, the public state), :mod:`.pulls` (multi-card pulls and their clock),
:mod:`.checkpoint` (rolling back).

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
  shoe, in procedure order (upper card of a pull first), never reused; all of them pass
  through :meth:`Engine._deal`, in that order;
- a hand's positions are *derived* from its cards in draw order (burn, P1, B1, P2, B2,
  then the thirds the rules ask for): a card whose position is not yet determined is
  pending, and placing cards never depends on the order items arrived in;
- a result is published exactly once, when the hand is complete and no hold is active,
  by :meth:`Engine._hand_resolved` (the one place a result is recorded);
- the shoe-order watch (:mod:`.integrity`) sees every card of the shoe in play once, in
  that order, in :meth:`Engine._deal` before the card is placed (its hold is there before
  the card could complete a hand); the shoe report (:mod:`.report`) observes every event
  of its shoe in :meth:`Engine._emit`, and follows the input that ended the shoe;
- the scoreboard's input (``EngineState.roads``: the shoe's standing results) changes
  only with a ``shoe_started``, ``hand_result`` or ``hand_voided`` event, in
  :meth:`Engine._emit`; ``Output.roads_changed`` says so, :meth:`Engine.roads_message`
  gives the board;
- a refused command changes nothing and is answered with a stable error code;
- no exception escapes :meth:`Engine.handle`: an internal fault is answered as an
  ``engine_error`` alarm, and the state stays as it was before that input; but for a
  fault in the input's last step, the gate and the indicator (:meth:`Engine.settle_device`,
  which may run after the input's events were sent): the input stands, and the next
  input's ``engine_error`` alarm says what failed.

Time: ``at`` (wall clock) stamps events (``ts``, ``drawn_at``, shoe ids); every duration
(the pull timeout, card-jam pauses) is measured on ``mono`` (the uptime clock) when the
inputs carry it, on ``at`` only when they do not (journals from before ``mono``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from firmware_protocol.messages import FAULT_NAMES, Capability, FaultCode

from . import commands as cmd
from . import events as ev
from . import pulls
from .cards import commencement_count, parse_card, value
from .checkpoint import REBASE_EVERY, Checkpoint, Replayed, Trail, take
from .config import EngineConfig
from .errors import CardNotationError
from .game import PB_POSITIONS, HandResult, evaluate
from .inputs import (
    INPUT_ADAPTER,
    INPUT_CLASSES,
    CommandInput,
    DeviceFault,
    DeviceGap,
    DeviceHello,
    DeviceItem,
    DeviceLink,
    DeviceShoeLoaded,
    Input,
    InputBase,
    JournalCorrupt,
    Notice,
    RootConflict,
    StorageStatus,
    Tick,
)
from .integrity import IntegrityAlarm, IntegrityWatch
from .report import ShoeReportBuilder
from .roads import HandOutcome, RoadsFeed
from .state import (
    FINISHED_PHASES,
    AlarmState,
    CardRec,
    EngineState,
    HandState,
    Phase,
    PullBuffer,
    PullItem,
    RoadsState,
    ShoeState,
)
from .view import (
    UNSHUFFLED,
    Hold,
    active_holds,
    gate_locked,
    hand_complete,
    hold_detail,
    hold_reasons,
    indicator,
    positions,
    public_state,
)

# --- the rules, stated first ------------------------------------------------------------

#: The transition table: from each public `shoe_state`, the states one input may lead
#: to (itself included). One input can pass through several states (a pull whose last
#: item completes a hand and whose extra card starts the next), so a state may reach
#: more than its neighbours. The engine never leaves this table (tested on random
#: interleavings of inputs); it follows from PHASE_STEPS below.
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

#: One step of a shoe's phase (``held`` is ``dealing`` with a hold). Every change of
#: phase goes through :meth:`Engine._enter`, which refuses a step not listed here (an
#: ``engine_error``, rolled back); a new shoe starts in ``commencement`` only where no
#: shoe is in play.
PHASE_STEPS: dict[Phase, frozenset[Phase]] = {
    "commencement": frozenset({"between_hands", "shoe_ended", "shoe_voided"}),
    "between_hands": frozenset({"between_hands", "dealing", "shoe_ended", "shoe_voided"}),
    "dealing": frozenset({"dealing", "between_hands", "shoe_ended", "shoe_voided"}),
    "shoe_ended": frozenset(),
    "shoe_voided": frozenset(),
}

#: Hand records kept for `recall` (its `hands` goes up to this): the last 100 hands,
#: across shoes. The scoreboard does not depend on it: the current shoe's standing
#: results are kept whole in `EngineState.roads` (docs/decisions.md, "Roads and
#: integrity in the engine").
RECORDS_KEPT = 100
#: Shoe reports kept for `recall`: those of the shoes `records` still holds hands of (one
#: a hand at most, if every shoe had one hand), and the newest.
SHOE_REPORTS_KEPT = RECORDS_KEPT + 1
#: The events that change the scoreboard (roads.md section 7).
ROADS_EVENTS = frozenset({"shoe_started", "hand_result", "hand_voided"})
#: The key of the held alarm `table_id_conflict` (another daemon held the table's root).
CONFLICT_KEY = "table_id_conflict"

#: Alarm keys of the shoe-order watch's held alarms (one per detector).
INTEGRITY_KEY = "integrity:"
# The capability bits as plain ints: `int & IntFlag` runs Python code, twice per input.
_GATE = Capability.EXIT_GATE.value
_INDICATOR = Capability.INDICATOR_LIGHT.value
#: Hand results: every fact of HandResult goes into the hand_result event as it is.
RESULT_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(HandResult))
#: What a hand's record (recall) keeps of its result, besides the payouts.
RECORD_RESULT_FIELDS = ("winner", "player_cards", "banker_cards", "player_total",
                        "banker_total")


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
    #: the scoreboard changed in this input (a shoe_started, hand_result or hand_voided):
    #: republish Engine.roads_message() on `{root}/roads` after its events
    roads_changed: bool = False


class Refused(Exception):
    """A command refusal inside the engine (never escapes handle())."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def build_models() -> None:
    """Build the validators and serialisers of the events, inputs and commands now. They are
    deferred at import (``defer_build``: ~25 ms of a start, docs/performance.md "Seventh
    pass"); the daemon calls this right after READY, so that its first card or command
    does not pay for them either."""
    for model in (*ev.EVENT_TYPES, *INPUT_CLASSES, *cmd.COMMAND_CLASSES):
        model.model_rebuild()
    for adapter in (ev.EVENT_ADAPTER, INPUT_ADAPTER, cmd.COMMAND_ADAPTER):
        adapter.rebuild()


def iso_by_datetime(at: float) -> str:
    """A wall time as the events carry it (ISO 8601, UTC, milliseconds), by datetime:
    what :func:`iso` gives, for any time (iso's own way covers years 1970 to 9999)."""
    stamp = dt.datetime.fromtimestamp(at, dt.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


_EPOCH = dt.date(1970, 1, 1)
_DAYS: dict[int, str] = {}  # days since 1970-01-01 -> "YYYY-MM-DDT"
_LAST_SECOND = 253_402_300_799  # 9999-12-31T23:59:59Z


@functools.lru_cache(maxsize=64)
def iso(at: float) -> str:
    """:func:`iso_by_datetime`, the same string, by arithmetic: a card's first steps run
    with the machine's caches cold, where datetime's conversion cost ~45 us a card
    (docs/performance.md, "Twelfth pass"). Cached: an input's events share its time, and
    the cards in play keep theirs.

    Rounded as datetime rounds a timestamp (to the microsecond, half to even, the
    fraction taken apart from the whole seconds), then cut to the millisecond."""
    if not 0.0 <= at < _LAST_SECOND:  # NaN too
        return iso_by_datetime(at)  # before 1970 or in 9999's last second: datetime's way
    frac, whole = math.modf(at)
    micros = round(frac * 1_000_000)
    if micros >= 1_000_000:
        micros -= 1_000_000
        whole += 1.0
    day, second = divmod(int(whole), 86_400)
    date = _DAYS.get(day)
    if date is None:
        if len(_DAYS) > 1000:
            _DAYS.clear()
        date = _DAYS[day] = (_EPOCH + dt.timedelta(days=day)).isoformat() + "T"
    hour, second = divmod(second, 3600)
    minute, second = divmod(second, 60)
    return f"{date}{hour:02d}:{minute:02d}:{second:02d}.{micros // 1000:03d}Z"


def _result_facts(result: HandResult) -> dict[str, Any]:
    """HandResult's fields by name, tuples as lists (as events and records carry them)."""
    facts: dict[str, Any] = {}
    for name in RESULT_FIELDS:
        fact = getattr(result, name)
        facts[name] = list(fact) if isinstance(fact, tuple) else fact
    return facts


# --- the engine ----------------------------------------------------------------------------


class Engine:
    """The dealing state machine. See the module docstring for states and invariants."""

    def __init__(self, config: EngineConfig, state: EngineState | None = None,
                 instance_id: str = "0") -> None:
        self.config = config
        self._state = state or EngineState(instance_id=instance_id)
        self._out = Output()
        self._at = 0.0
        self._mono = 0.0  # the input's uptime reading (its `at` when it has none)
        # The scoreboard of the current shoe, built from `state.roads` (the object it was
        # built from beside it: a restore or a roll-back gives a new one, and a rebuild).
        self._feed: RoadsFeed | None = None
        self._feed_for: RoadsState | None = None
        if state is not None and "roads" not in state.model_fields_set:
            self._roads_from_records()  # a snapshot from before the roads were kept
        self._sender = "anonymous"  # the broker user of the command being handled
        #: Restores the state from before the latest handle(): the shell gives it to
        #: roll_back() when the journal cannot store what that input did (memory must not
        #: run ahead of disk).
        self.last_rollback: Checkpoint | None = None
        # The way back for device inputs (checkpoint.Replayed): a base and the inputs
        # handled since. None: the next device input starts one.
        self._trail: Trail | None = None
        # A scratch engine handling a trail's inputs again: its checkpoints are pickles.
        self._replaying = False
        # The gate's and the indicator's sync of the latest handle(device_later=True): its
        # Output, the holds it found and the input's kind, until settle_device() (or the
        # next use of the state).
        self._device_due: tuple[Output, list[Hold], str] | None = None

    # -- public API ---------------------------------------------------------------------

    @property
    def state(self) -> EngineState:
        """The engine's state (read it; only handle(), settle_device() and roll_back() change
        it)."""
        self.settle_device()
        return self._state

    def snapshot(self) -> str:
        self.settle_device()
        return self._state.model_dump_json()

    @classmethod
    def restore(cls, config: EngineConfig, snapshot: str) -> Engine:
        return cls(config, EngineState.model_validate_json(snapshot))

    def handle(self, inp: Input, device_later: bool = False) -> Output:
        """Apply one input. Never raises; a refused command changes nothing.

        `device_later`: the gate's and the indicator's requests (``Output.device``) are
        worked out by :meth:`settle_device`, which the shell calls once the input's events
        have been sent (they are the last step of an input, and a card's event need not
        wait for them). Anything that reads or copies the state settles them first: the
        next input, :attr:`state`, a snapshot, a checkpoint. The requests, the events and
        the state are the same either way; only when the requests are worked out
        differs. A command's are worked out at once (it is answered with its Output)."""
        self.settle_device()
        full = isinstance(inp, CommandInput)
        if full or self._replaying:
            rollback = self.checkpoint(full)
        else:
            trail = self._trail
            if trail is None:
                trail = self._trail = Trail.of(self._state)
            rollback = Replayed(trail, len(trail.inputs), self._replay)
        self.last_rollback = rollback
        try:
            return self._handle(inp, rollback,
                                device_later and not full and not self._replaying)
        finally:
            if self._trail is not None and not self._replaying:
                self._trail.inputs.append(inp)  # whatever it did, handling it again does

    def _handle(self, inp: Input, rollback: Checkpoint, device_later: bool) -> Output:
        self._out = Output()
        self._at = inp.at
        self._mono = inp.mono if inp.mono is not None else inp.at
        try:
            if self._state.device_error is not None:  # kept until an input is applied
                self._alarm_momentary("engine_error", self._state.device_error)
                self._state.device_error = None
            if inp.mono is not None:
                self._carry_over(inp)
            self._dispatch(inp)
            # Once for both: neither the alarms nor the shoe report change a hold.
            detail = hold_detail(self._state.shoe)
            self._sync_alarms(detail)
            self._report_if_due()
            self._device_due = (self._out, detail, inp.kind)
        except Refused as refusal:
            self._state = rollback()
            out = Output(ok=False, error=CommandError(refusal.code, refusal.message))
            return out
        except Exception as error:  # an engine bug must not take the table down
            self._state = rollback()
            self._out = Output()
            self._alarm_momentary("engine_error", f"input {inp.kind} not applied: {error!r}")
            if isinstance(inp, CommandInput):
                self._out.ok = False
                self._out.error = CommandError("engine_error", repr(error))
            return self._out
        if not device_later:
            self.settle_device()
        return self._out

    def settle_device(self) -> None:
        """The gate's and the indicator's requests of the latest ``handle(inp,
        device_later=True)``, added to its Output's ``device`` (nothing when none is due;
        handle() without it calls this itself). They come after the input's events, which
        may have gone by then, so an error here never undoes the input, with or without
        `device_later`: what the step had not asked for when it failed stays as it was,
        and the next input raises an ``engine_error`` alarm that says so (the error is
        kept in the state, ``device_error``, until then)."""
        due = self._device_due
        if due is None:
            return
        self._device_due = None
        out, detail, kind = due
        current, self._out = self._out, out
        try:
            self._sync_device(holds=hold_reasons(detail))
        except Exception as error:  # an engine bug must not take the table down
            self._state.device_error = (f"the gate and the indicator not worked out after "
                                        f"input {kind}: {error!r}")
        finally:
            self._out = current

    def roll_back(self, to: Checkpoint) -> None:
        """Put the state back to a checkpoint (:attr:`last_rollback` or :meth:`checkpoint`):
        what the shell does when the journal could not store the inputs since."""
        self._device_due = None  # of an input after the checkpoint: undone with it
        self._state = to()
        self._trail = to.trail_to_here() if isinstance(to, Replayed) else None

    def prepare_checkpoint(self) -> None:
        """Start a new trail when the current one is REBASE_EVERY inputs long (or there is
        none), while nothing waits: the daemon calls this after a card's event has left."""
        if self._trail is None or len(self._trail.inputs) >= REBASE_EVERY:
            self.settle_device()
            self._trail = Trail.of(self._state)

    def _replay(self, state: EngineState, inputs: Sequence[Input]) -> EngineState:
        """`inputs` handled again from `state` in a scratch engine (a Replayed checkpoint)."""
        scratch = Engine(self.config)
        scratch._state = state  # as it was (no rebuild of what a restore would rebuild)
        scratch._replaying = True
        for inp in inputs:
            scratch.handle(inp)
        return scratch._state

    def checkpoint(self, full: bool) -> Checkpoint:
        """Something to roll back to (see :func:`shoed.core.checkpoint.take`)."""
        self.settle_device()
        return take(self._state, full)

    def next_deadline(self) -> float | None:
        """When a :class:`Tick` would change something (the incomplete-pull timeout).

        On the uptime clock (inputs' ``mono``) once the inputs carry it; on the wall clock
        (``at``) only for a pull begun from inputs without it (see
        :func:`shoed.core.pulls.deadline`).
        """
        return pulls.deadline(self._state)

    @property
    def seq(self) -> int:
        return self._state.seq

    @property
    def gate_locked(self) -> bool:
        return gate_locked(self.config, self._state)

    @property
    def indicator(self) -> int:
        return indicator(self._state)

    def public_state(self) -> dict[str, Any]:
        """The `{root}/state` snapshot of mqtt-api.md section 3."""
        return public_state(self.config, self._state)

    @property
    def roads_seq(self) -> int:
        """The last event the scoreboard reflects (its `seq`): it changed when this did."""
        return self._state.roads.seq

    def roads_message(self) -> dict[str, Any]:
        """The `{root}/roads` message of roads.md section 7 for the current shoe, with the
        journal's `instance` after its `seq` (added: a `seq` is one journal's, as an
        event's; decisions.md 208)."""
        board = self._roads().message()
        return {"schema_version": board.pop("schema_version"), "seq": board.pop("seq"),
                "instance": self._state.instance_id, **board}

    # -- the scoreboard -------------------------------------------------------------------

    def _roads(self) -> RoadsFeed:
        roads = self._state.roads
        if self._feed is None or self._feed_for is not roads:
            cfg = self.config
            self._feed = RoadsFeed.restore(roads.model_dump(), rows=cfg.roads_rows,
                                           tail_mode=cfg.roads_tail_mode)
            self._feed_for = roads
        return self._feed

    def _roads_apply(self, event: ev.EventBase) -> None:
        feed = self._roads()
        if not feed.apply(event):
            return
        roads = self._state.roads
        if isinstance(event, ev.HandResultEvent) and roads.shoe_id == event.shoe_id:
            roads.results.append(feed.board.results[-1].as_dict())
        else:
            roads.results = [r.as_dict() for r in feed.board.results]
        roads.shoe_id, roads.seq = feed.board.shoe_id, feed.seq
        self._out.roads_changed = True

    def _roads_from_records(self) -> None:
        """The standing results of the current shoe from its hand records (a snapshot
        written before `roads` existed; records hold the last 100 hands)."""
        state, shoe = self._state, self._state.shoe
        if shoe is None:
            return
        results: list[dict[str, Any]] = []
        for record in state.records:
            result = record.get("result")
            if record.get("shoe_id") != shoe.shoe_id or not result or record.get("voided"):
                continue
            pc, bc = result["player_cards"], result["banker_cards"]
            natural = any(len(c) >= 2 and (value(c[0]) + value(c[1])) % 10 >= 8
                          for c in (pc, bc))
            results.append(HandOutcome(
                hand_no=record["hand_no"], winner=result["winner"],
                player_pair=len(pc) >= 2 and pc[0][0] == pc[1][0],
                banker_pair=len(bc) >= 2 and bc[0][0] == bc[1][0],
                natural=natural).as_dict())
        state.roads = RoadsState(shoe_id=shoe.shoe_id, seq=state.seq, results=results)

    # -- clocks -----------------------------------------------------------------------------

    def _carry_over(self, now: InputBase) -> None:
        """Give marks taken without ``mono`` (an older journal) their uptime reading, from
        `now`'s pair of readings: from here on they are measured on ``mono``."""
        assert now.mono is not None
        state = self._state
        pull = state.pull
        if pull is not None and pull.last_mono is None:
            pull.last_mono = now.mono - (now.at - pull.last_at)
        if state.jam_since is not None and state.jam_since_mono is None:
            state.jam_since_mono = now.mono - (now.at - state.jam_since)

    # -- phases -----------------------------------------------------------------------------

    def _enter(self, shoe: ShoeState, phase: Phase) -> None:
        """The one way a shoe changes phase: only along PHASE_STEPS."""
        if phase not in PHASE_STEPS[shoe.phase]:
            raise RuntimeError(f"expected a phase step in {sorted(PHASE_STEPS[shoe.phase])} "
                               f"from {shoe.phase}, got {phase}")
        shoe.phase = phase

    # -- dispatch -------------------------------------------------------------------------

    def _dispatch(self, inp: Input) -> None:
        if isinstance(inp, DeviceItem):
            self._on_item(inp)
        elif isinstance(inp, CommandInput):
            self._on_command(inp.command, inp.authenticated_as)
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
            self._state.device.connected = inp.connected
            if inp.connected:
                self._alarm_clear("device_lost")
            else:
                self._alarm_raise("device_lost", "device_lost",
                                  inp.reason or "no valid frame from the shoe for 5 s")
        elif isinstance(inp, Notice):
            self._alarm_momentary(inp.code, inp.message)
        elif isinstance(inp, StorageStatus):
            self._state.storage_failed = not inp.ok
            if inp.ok:
                self._alarm_clear("storage_failed")
            else:
                self._alarm_raise("storage_failed", "storage_failed", inp.message)
        elif isinstance(inp, RootConflict):
            self._on_root_conflict(inp)
        elif isinstance(inp, JournalCorrupt):
            self._alarm_raise("journal_corrupt", "journal_corrupt", inp.message)
        elif isinstance(inp, Tick) and pulls.timed_out(self._state, inp):
            self._flush_pull_incomplete(f"no next item for {pulls.PULL_TIMEOUT_S:g} s")

    # -- events ---------------------------------------------------------------------------

    def _emit(self, cls: type[ev.EventBase], **fields: Any) -> None:
        self._state.seq += 1
        shoe = self._state.shoe
        fields.setdefault("shoe_id", shoe.shoe_id if shoe else None)
        if "hand_no" not in fields:
            fields["hand_no"] = shoe.hand.hand_no if shoe and shoe.hand else None
        event = cls(
            event_id=f"{self.config.table_id}-{self._state.instance_id}-{self._state.seq}",
            seq=self._state.seq, instance=self._state.instance_id, ts=iso(self._at),
            table_id=self.config.table_id, **fields,
        )
        self._out.events.append(event)
        if shoe is not None and shoe.report is not None:
            shoe.report.observe(event, self._mono)
        if event.type in ROADS_EVENTS:
            self._roads_apply(event)

    def _procedure(self, rule: str, action: str, cards: list[CardRec],
                   detail: str | None = None, hand_no: int | None = None) -> None:
        listed = [{"card_index": c.card_index, "card": c.card} for c in cards]
        extra: dict[str, Any] = {} if hand_no is None else {"hand_no": hand_no}
        self._emit(ev.Procedure, rule=rule, action=action, cards=listed, detail=detail, **extra)

    def _publish_card(self, card: CardRec, force: bool = False, voided: bool = False) -> None:
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
            voided=voided,
        )
        if card.flags or card.read == "foreign":
            self._integrity_notice(card)

    def _integrity_notice(self, card: CardRec, drawn_as: str | None = None) -> None:
        """A flagged card outside P/B positions gets one momentary alarm (inside: a hold).
        `drawn_as`: where a card that is never placed went (its position stays null)."""
        where = drawn_as or card.position
        if not (card.flags or card.read == "foreign") or card.alarmed or where is None \
                or where in PB_POSITIONS:
            return
        card.alarmed = True
        codes = list(card.flags) + (["foreign_card"] if card.read == "foreign" else [])
        for code in codes:
            self._alarm_momentary(code, f"card {card.card_index} ({card.card or card.uid}) "
                                        f"is {code.replace('_', ' ')}; it was drawn as "
                                        f"{where}", card_index=card.card_index)

    # -- alarms ---------------------------------------------------------------------------

    def _alarm_raise(self, key: str, code: str, message: str, card_index: int | None = None,
                     fault_code: int | None = None, *, detector: str | None = None,
                     cards: list[dict[str, Any]] | None = None, ackable: bool = False) -> None:
        state = self._state
        if any(a.key == key for a in state.alarms):
            return
        state.alarm_counter += 1
        alarm_id = f"{self.config.table_id}-{state.instance_id}-A{state.alarm_counter}"
        state.alarms.append(AlarmState(alarm_id=alarm_id, code=code, since=iso(self._at),
                                       key=key, card_index=card_index, fault_code=fault_code,
                                       detector=detector, ackable=ackable))
        self._emit(ev.Alarm, alarm_id=alarm_id, code=code, active=True, message=message,
                   card_index=card_index, fault_code=fault_code, detector=detector,
                   cards=cards)

    def _alarm_clear(self, key: str, message: str = "cleared") -> None:
        for alarm in list(self._state.alarms):
            if alarm.key == key:
                self._state.alarms.remove(alarm)
                self._emit(ev.Alarm, alarm_id=alarm.alarm_id, code=alarm.code, active=False,
                           message=message, card_index=alarm.card_index,
                           fault_code=alarm.fault_code, detector=alarm.detector)

    def _alarm_momentary(self, code: str, message: str, card_index: int | None = None, *,
                         detector: str | None = None,
                         cards: list[dict[str, Any]] | None = None) -> None:
        state = self._state
        state.alarm_counter += 1
        alarm_id = f"{self.config.table_id}-{state.instance_id}-A{state.alarm_counter}"
        self._emit(ev.Alarm, alarm_id=alarm_id, code=code, active=True, message=message,
                   card_index=card_index, momentary=True, detector=detector, cards=cards)

    @staticmethod
    def _hold_alarm_wanted(detail: list[Hold]) -> dict[str, tuple[str, int | None, str]]:
        wanted: dict[str, tuple[str, int | None, str]] = {}
        for reason, card in detail:
            if reason in ("cover_open", UNSHUFFLED):
                continue  # the device_fault alarm (code 3) says it; the watch's own alarm
            key = f"hold:{reason}:{card.card_index if card else ''}"
            where = f"card {card.card_index}" if card else "the hand"
            wanted[key] = (reason, card.card_index if card else None,
                           f"{reason.replace('_', ' ')}: {where} holds the game")
        return wanted

    def _sync_alarms(self, detail: list[Hold] | None = None) -> None:
        """`detail`: hold_detail(self._state.shoe), when the caller has it already."""
        if detail is None:
            detail = hold_detail(self._state.shoe)
        wanted = self._hold_alarm_wanted(detail)
        for alarm in list(self._state.alarms):
            if alarm.key.startswith("hold:") and alarm.key not in wanted:
                self._alarm_clear(alarm.key, "hold resolved")
        for key, (code, card_index, message) in wanted.items():
            self._alarm_raise(key, code, message, card_index=card_index)
        # Every card placed in a hold position has had its alarm now.
        for _, card in detail:
            if card is not None:
                card.alarmed = True

    def _sync_device(self, force: bool = False, holds: list[str] | None = None) -> None:
        """`holds`: active_holds(self._state.shoe), when the caller has it already."""
        caps = self._state.device.capabilities
        if caps is None:
            return
        if holds is None:  # once for the gate and the indicator
            holds = active_holds(self._state.shoe)
        if caps & _GATE:
            locked = gate_locked(self.config, self._state, holds)
            if force or locked != self._state.gate_sent:
                self._state.gate_sent = locked
                self._out.device.append(DeviceRequest("gate", int(locked)))
        if caps & _INDICATOR:
            pattern = indicator(self._state, holds)
            if force or pattern != self._state.indicator_sent:
                self._state.indicator_sent = pattern
                self._out.device.append(DeviceRequest("indicator", pattern))

    # -- the shoe-order watch and the shoe report ----------------------------------------------

    def _watch(self, card: CardRec) -> None:
        """Feed the shoe-order watch (integrity.md section 1) one card of the shoe in
        play, before it is placed: a hold it raises is there before the card could
        complete a hand. Unread and foreign cards go in as unknown."""
        shoe = self._state.shoe
        if shoe is None or shoe.phase in FINISHED_PHASES:
            return
        watch = shoe.integrity
        if watch is None:  # a shoe begun before the watch existed: watched from here
            watch = shoe.integrity = self._new_watch()
        for alarm in watch.feed(card.card, card.card_index):
            self._integrity_alarm(shoe, alarm)

    def _new_watch(self) -> IntegrityWatch:
        state = self._state
        previous, ended = state.previous_shoe_order, state.ended_shoe_order
        return IntegrityWatch(decks=self.config.decks, thresholds=self.config.integrity,
                              previous_shoe_order=list(previous),
                              ended_shoe_order=list(ended) if ended != previous else [])

    def _integrity_alarm(self, shoe: ShoeState, alarm: IntegrityAlarm) -> None:
        if alarm.kind == "shoe_order_suspect":  # the preliminary notice: momentary
            self._alarm_momentary(alarm.kind, alarm.message, card_index=alarm.card_index,
                                  detector=alarm.detector, cards=list(alarm.cards))
            return
        hold = self.config.on_unshuffled == "hold"
        if hold:
            shoe.integrity_hold = True
        message = alarm.message + ("; the game is held (resume, void_hand or void_shoe)"
                                   if hold else "; dealing goes on (ack_alarm clears it)")
        self._alarm_raise(f"{INTEGRITY_KEY}{alarm.detector}", alarm.kind, message,
                          card_index=alarm.card_index, detector=alarm.detector,
                          cards=list(alarm.cards), ackable=not hold)

    def _clear_integrity(self, message: str) -> None:
        """The watch's hold and its held alarms end (resume, the shoe's end or void)."""
        shoe = self._state.shoe
        if shoe is not None:
            shoe.integrity_hold = False
        for alarm in list(self._state.alarms):
            if alarm.key.startswith(INTEGRITY_KEY):
                self._alarm_clear(alarm.key, message)

    def _shoe_over(self, shoe: ShoeState, message: str, ended: bool) -> None:
        """The shoe ended (`ended`) or was voided: its dealt order becomes the previous
        shoe's (if it had cards dealt), and the last ended shoe's if it ended; the
        watch's alarms clear."""
        if shoe.integrity is not None and shoe.integrity.cards:
            order = shoe.integrity.dealt_order()
            self._state.previous_shoe_order = order
            if ended:
                self._state.ended_shoe_order = order
        self._clear_integrity(message)

    def _report_if_due(self) -> None:
        """The shoe_report (integrity.md section 3), once the shoe ended or was voided:
        after the events of the input that ended it, before any later shoe's."""
        state = self._state
        shoe = state.shoe
        if shoe is None or shoe.report is None or not shoe.report.finished:
            return
        self._emit(ev.ShoeReport, hand_no=None, **shoe.report.build())
        report = self._out.events[-1].model_dump(mode="json")
        kept = {r["shoe_id"] for r in state.records}
        older = [r for r in state.shoe_reports if r["shoe_id"] in kept]
        state.shoe_reports = [*older, report][-SHOE_REPORTS_KEPT:]

    # -- holds ----------------------------------------------------------------------------

    def _hold_or_notice(self, reason: str, message: str) -> None:
        """cards_lost / incomplete_pull / device_rebooted: hold the context, or just alarm."""
        shoe = self._state.shoe
        if shoe is None or shoe.phase in FINISHED_PHASES:
            self._alarm_momentary(reason, message)
            return
        holds = shoe.commencement.holds if shoe.phase == "commencement" else self._next_hand().holds
        if reason not in holds:
            holds.append(reason)
        self._alarm_raise(f"hold:{reason}:", reason, message)
        self._advance()

    # -- device inputs --------------------------------------------------------------------

    def _on_hello(self, hello: DeviceHello) -> None:
        device = self._state.device
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
            self._state.jam_since = None
            self._state.jam_since_mono = None
            self._flush_pull_incomplete("the device rebooted")
            shoe = self._state.shoe
            if shoe is not None and shoe.phase not in FINISHED_PHASES:
                self._hold_or_notice("device_rebooted",
                                     "the shoe rebooted: frames pending in it were lost")
            else:
                self._alarm_momentary("device_rebooted", "the shoe rebooted")
        self._sync_alarms()
        self._sync_device(force=True)  # re-sent after every HELLO

    def _on_root_conflict(self, conflict: RootConflict) -> None:
        """Another daemon held the table's root: a held alarm, raised with the other
        daemon's run_id and when it was seen, cleared when this one is alone again."""
        if conflict.active:
            self._alarm_raise(CONFLICT_KEY, "table_id_conflict",
                              f"another daemon (run_id {conflict.other_run_id}) holds this "
                              f"table's root, seen at {iso(conflict.at)}; {conflict.message}")
        else:
            self._alarm_clear(CONFLICT_KEY, conflict.message)

    def _on_fault(self, fault: DeviceFault) -> None:
        name = FAULT_NAMES.get(fault.code, f"fault {fault.code}")
        device = self._state.device
        if fault.active:
            if fault.code not in device.faults:
                device.faults.append(fault.code)
            self._alarm_raise(f"fault:{fault.code}", "device_fault", f"shoe fault: {name}",
                              fault_code=fault.code)
            if fault.code == FaultCode.CARD_JAM and self._state.jam_since is None:
                self._state.jam_since = fault.at
                self._state.jam_since_mono = fault.mono
            shoe = self._state.shoe
            if (fault.code == FaultCode.COVER_OPEN and shoe is not None
                    and shoe.phase == "dealing" and shoe.hand is not None
                    and "cover_open" not in shoe.hand.holds):
                shoe.hand.holds.append("cover_open")
        else:
            if fault.code in device.faults:
                device.faults.remove(fault.code)
            self._alarm_clear(f"fault:{fault.code}", f"shoe fault cleared: {name}")
            if fault.code == FaultCode.CARD_JAM and self._state.jam_since is not None:
                if self._state.pull is not None:
                    self._state.pull.paused += pulls.jam_paused(self._state, fault)
                self._state.jam_since = None
                self._state.jam_since_mono = None

    def _on_shoe_loaded(self) -> None:
        shoe = self._state.shoe
        if shoe is None or shoe.phase in FINISHED_PHASES:
            self._start_shoe("shoe_loaded")
        elif shoe.phase == "commencement" and not shoe.commencement.cards:
            return  # before its first card, it simply belongs to that shoe
        else:
            self._alarm_momentary("shoe_loaded_in_play",
                                  f"a shoe was loaded while shoe {shoe.shoe_id} is in play")

    def _start_shoe(self, trigger: Literal["shoe_loaded", "new_shoe"]) -> None:
        state = self._state
        if state.shoe is not None and state.shoe.phase not in FINISHED_PHASES:
            raise RuntimeError(f"expected no shoe in play for a new shoe, got "
                               f"{state.shoe.shoe_id} in {state.shoe.phase}")
        self._report_if_due()  # the shoe just voided (new_shoe force) reports first
        self._clear_integrity("a new shoe")
        state.shoe_counter += 1
        stamp = dt.datetime.fromtimestamp(self._at, dt.UTC).strftime("%Y%m%dT%H%M%S")
        shoe_id = f"{self.config.table_id}-{stamp}-{state.instance_id}-{state.shoe_counter}"
        state.shoe = ShoeState(shoe_id=shoe_id, phase="commencement",
                               integrity=self._new_watch(),
                               report=ShoeReportBuilder(shoe_id=shoe_id,
                                                        decks=self.config.decks))
        cfg = self.config
        self._emit(ev.ShoeStarted, decks=cfg.decks, table_type=cfg.table_type,
                   unnecessary_cards=cfg.unnecessary_cards,
                   betting_control=cfg.betting_control, trigger=trigger)

    # -- pulls ----------------------------------------------------------------------------

    def _on_item(self, item: DeviceItem) -> None:
        if item.problem is not None:
            self._alarm_momentary("bad_payload", item.problem)
        self._state.pull_arrivals += 1
        problem = pulls.fields_problem(item)
        if problem is not None:
            self._flush_pull_incomplete("an item of another pull arrived")
            self._apply_items([item], item.pull_size or 1, False, complete=False, why=problem)
            return
        pid, size = item.pull_id, item.pull_size
        assert pid is not None and size is not None
        pull = self._state.pull
        if pull is not None and pulls.breaks(pull, item):
            self._flush_pull_incomplete(
                f"item of pull {pid} (pos {item.pull_pos}/{size}) arrived before pull "
                f"{pull.pull_id} was complete")
            pull = None
        if pull is None:
            if size == 1:  # most pulls: complete at once, no buffer (nor PullItem) needed
                self._apply_items([item], 1, False, complete=True)
                return
            pull = PullBuffer(pull_id=pid, size=size, last_at=item.at, last_mono=item.mono)
            self._state.pull = pull
        else:
            pull.last_at = item.at
            pull.last_mono = item.mono
            pull.paused = 0.0
        pull.items.append(PullItem(item=item, arrival=self._state.pull_arrivals))
        if len(pull.items) == pull.size:
            self._state.pull = None
            self._apply_pull(pull.items, complete=True, voided_hand=pull.voided_hand,
                             betting_open=pull.betting_open)

    def _flush_pull_incomplete(self, why: str) -> None:
        pull = self._state.pull
        if pull is None:
            return
        self._state.pull = None
        self._apply_pull(pull.items, complete=False,
                         why=f"pull {pull.pull_id}: {len(pull.items)} of {pull.size} items; {why}",
                         voided_hand=pull.voided_hand, betting_open=pull.betting_open)

    def _apply_pull(self, entries: list[PullItem], complete: bool, why: str = "",
                    voided_hand: int | None = None, betting_open: bool = False) -> None:
        """A buffered pull's items, complete or not, in procedure order."""
        ordered = pulls.upper_first(entries)
        size = max((e.item.pull_size or 1) for e in entries)
        self._apply_items([e.item for e in ordered], size, size > 1 and pulls.reordered(ordered),
                          complete, why, voided_hand, betting_open)

    def _apply_items(self, ordered: list[DeviceItem], size: int, reordered: bool,
                     complete: bool, why: str = "", voided_hand: int | None = None,
                     betting_open: bool = False) -> None:
        """The items of one pull in procedure order (its size as the items say; reordered:
        they arrived in another order): counted, watched, placed; or, of a pull pending
        when its hand was voided (`voided_hand`), voided with that hand; of a pull pending
        when betting closed (`betting_open`), unnecessary cards (rule 5)."""
        shoe = self._state.shoe
        in_shoe = shoe is not None and shoe.phase != "shoe_voided"
        cards: list[tuple[DeviceItem, CardRec | None]] = []
        for item in ordered:
            if item.item == "cut":
                cards.append((item, None))
                continue
            index = 0
            if in_shoe and shoe is not None:
                shoe.card_counter += 1
                index = shoe.card_counter
            cards.append((item, self._card_record(item, index)))
        if size > 1 and in_shoe:
            self._procedure("multi_card_pull", "reordered" if reordered else "recorded",
                            [c for _, c in cards if c is not None],
                            detail=f"{len(ordered)} item(s), upper card first")
        resolved_before = self._resolutions()
        for _item, card in cards:
            surplus = self._resolutions() != resolved_before
            if card is None:
                self._cut_card()
            elif voided_hand is not None and in_shoe:
                self._deal_voided(card, voided_hand)
            else:
                self._deal(card, surplus or betting_open)
        if not complete and voided_hand is not None:
            # Its missing items were drawn before the void too: the voided hand's, not
            # the next hand's, which is not held for them.
            self._alarm_momentary("incomplete_pull", f"incomplete pull of voided hand "
                                                     f"{voided_hand}: {why}")
        elif not complete:
            self._hold_or_notice("incomplete_pull", f"incomplete pull: {why}")

    def _deal(self, card: CardRec, surplus: bool) -> None:
        """Every card that leaves the shoe passes here once, in procedure order (its
        card_index given, its read status known), before it is counted and placed."""
        self._count(card)
        self._watch(card)
        self._route(card, surplus=surplus)

    def _deal_voided(self, card: CardRec, hand_no: int) -> None:
        """A card of a pull that was pending when `void_hand` voided its hand: drawn before
        the command, it is voided with that hand (rule 10), never placed (position null,
        the voided hand's number); counted and watched as every card."""
        self._count(card)
        self._watch(card)
        card.position, card.hand_no = None, hand_no
        self._publish_card(card, voided=True)  # published once, already voided
        self._procedure("card_of_voided_hand", "voided", [card], hand_no=hand_no)
        self._integrity_notice(card, drawn_as="voided")

    def _resolutions(self) -> int:
        shoe = self._state.shoe
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
        """Card integrity (rule 11): excess copies and duplicate UIDs are flagged (every card
        of a shoe: one drawn before its void, a later item of the voiding pull, too)."""
        shoe = self._state.shoe
        if shoe is None or (shoe.phase == "shoe_voided" and not card.card_index):
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
        shoe = self._state.shoe
        if shoe is not None and shoe.phase == "shoe_voided" and card.card_index:
            # Drawn while the shoe was in play (a later item of the pull whose card voided
            # it, a card pending in a hold that ended in the void): a card of this shoe,
            # its card_index kept (mqtt-api.md section 2: a later placement re-publishes
            # the same card_index), an unnecessary card past the one that voided the shoe
            # (rule 6), not a card without a shoe (outside review of the cores).
            card.position, card.hand_no = "unnecessary", shoe.hand_no or None
            self._publish_card(card)
            self._procedure("unnecessary_card", "ignored", [card], hand_no=card.hand_no,
                            detail="drawn before the shoe was voided by an earlier card")
            return
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
                self._enter(shoe, "dealing")
            self._advance()

    def _after_end(self, card: CardRec) -> None:
        card.position, card.hand_no = "after_shoe_end", None
        self._publish_card(card)
        self._procedure("card_after_shoe_end", "ignored", [card], hand_no=None)

    def _next_hand(self) -> HandState:
        shoe = self._state.shoe
        assert shoe is not None
        if shoe.hand is None:
            shoe.hand_no += 1
            shoe.hand = HandState(hand_no=shoe.hand_no)
        return shoe.hand

    def _unnecessary(self, card: CardRec) -> None:
        shoe = self._state.shoe
        assert shoe is not None
        hand = self._next_hand()
        hand.unnecessary += 1
        commands_mode = self.config.betting_control == "commands"
        if hand.unnecessary == 1 and not hand.cards:
            hand.cards.append(card)
            hand.has_burn = True
            if not commands_mode:
                hand.in_progress = True
                self._enter(shoe, "dealing")
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

    def _sync_hand(self, hand: HandState) -> None:
        hand_no = hand.hand_no
        for card, position in zip(hand.cards, positions(hand), strict=True):
            placed = None if position == "surplus" else position
            # Assigned only when changed: a model's __setattr__ is ~1 us, and every card
            # of the hand passes here on every input (docs/performance.md, sixth pass).
            if card.position != placed:
                card.position = placed
            if card.hand_no != hand_no:
                card.hand_no = hand_no
            self._publish_card(card)

    # -- advancing ------------------------------------------------------------------------

    def _advance(self) -> None:
        """Place what can be placed; end commencement, fix results, as the rules allow."""
        shoe = self._state.shoe
        if shoe is None:
            return
        if shoe.phase == "commencement":
            self._advance_commencement()
        elif shoe.phase in ("between_hands", "dealing") and shoe.hand is not None:
            hand = shoe.hand
            self._sync_hand(hand)
            if hand.in_progress and hand_complete(hand) and not active_holds(self._state.shoe):
                self._resolve(hand)
            elif hand.cut_at is not None and hand.in_progress and not active_holds(shoe) \
                    and None not in positions(hand)[:hand.cut_at]:
                # A cut card held back (_cut_card_acts) with the hold over and every card
                # before it this unfinished hand's own: it came during this hand, which is
                # the last now, as it was when read (rule 9; decisions.md 226).
                hand.cut_at = None
                self._last_hand("cut_card")

    def _advance_commencement(self) -> None:
        shoe = self._state.shoe
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
                and not active_holds(self._state.shoe)):
            overflow = com.cards[com.burn_count + 1:]
            del com.cards[com.burn_count + 1:]
            self._open_betting()
            for card in overflow:
                self._route(card)

    def _commencement_event(self, first: CardRec) -> None:
        shoe = self._state.shoe
        assert shoe is not None
        self._emit(ev.Commencement, hand_no=None, card=first.card,
                   burn_count=shoe.commencement.burn_count, card_index=first.card_index)

    def _open_betting(self) -> None:
        shoe = self._state.shoe
        assert shoe is not None
        self._enter(shoe, "between_hands")
        shoe.betting = "open" if self.config.betting_control == "commands" else None

    def _resolve(self, hand: HandState) -> None:
        shoe = self._state.shoe
        assert shoe is not None
        self._sync_alarms()  # the hold's alarm clears before the result it releases
        derived = positions(hand)
        dealt = [c for c, p in zip(hand.cards, derived, strict=True) if p in PB_POSITIONS]
        surplus = [c for c, p in zip(hand.cards, derived, strict=True)
                   if p not in PB_POSITIONS and p != "burn"]
        hand.cards = [c for c in hand.cards if c not in surplus]
        result = evaluate([c.card for c in dealt if c.card is not None])
        self._hand_resolved(hand, dealt, result)
        self._finish_hand(hand, surplus, completed_by=dealt[-1].pull_id if dealt else None)

    def _hand_resolved(self, hand: HandState, dealt: list[CardRec],
                       result: HandResult) -> None:
        """The one place a hand's result is recorded: its event, the shoe's counts and
        the hand's record (recall)."""
        shoe = self._state.shoe
        assert shoe is not None
        payouts = self.config.pays.payouts(result)
        facts = _result_facts(result)
        self._emit(ev.HandResultEvent, hand_no=hand.hand_no, payouts=payouts,
                   card_indexes=[c.card_index for c in dealt], **facts)
        shoe.hands_played += 1
        shoe.resolved[hand.hand_no] = False
        shoe.last_resolved = hand.hand_no
        recorded = {name: facts[name] for name in RECORD_RESULT_FIELDS}
        self._record(hand, result={**recorded, "payouts": payouts})

    def _finish_hand(self, hand: HandState, leftovers: list[CardRec],
                     completed_by: int | None = None) -> None:
        """After a result or a void: end the shoe after its last hand, else open betting.
        `leftovers`: the hand's cards beyond what it needed, held as pending until a hold
        ended (rule 10), in draw order; `completed_by`: the pull of its last required card.

        They are dealt pull by pull, as they came (_apply_items): the cards of a pull
        after the result it brought are unnecessary (rules 6, 7), so those of the pull
        that completed this hand and of any pull among them that completes another; in
        stand-alone mode a later pull's card is the next hand's burn, as if nothing had
        been held (rule 5: "only surplus cards of the pull that completed a hand are
        unnecessary"). In commands mode betting is open again: all are unnecessary."""
        shoe = self._state.shoe
        assert shoe is not None
        shoe.hand = None
        # A cut card held back (_cut_card): among this hand's own cards, or right after
        # them, it makes this hand the last; among the leftovers, it acts where it came.
        cut_at, hand.cut_at = hand.cut_at, None
        if cut_at is not None:
            cut_at -= len(hand.cards)  # its own cards (the leftovers are taken out)
            if cut_at <= 0:
                cut_at = None
                if not hand.last_hand:
                    hand.last_hand = True
                    self._emit(ev.LastHand, hand_no=hand.hand_no, reason="cut_card")
        if hand.last_hand or shoe.end_requested:
            self._end_shoe()
            for card in leftovers:
                self._after_end(card)
            return
        self._open_betting()
        pull = completed_by
        resolved_before = -1  # the completing pull brought this hand's result
        for i, card in enumerate(leftovers):
            if i == cut_at:
                self._held_cut_card()
            if card.pull_id is None or card.pull_id != pull:
                pull, resolved_before = card.pull_id, self._resolutions()
            self._route(card, surplus=self._resolutions() != resolved_before)
        if cut_at is not None and cut_at >= len(leftovers):
            self._held_cut_card()

    def _held_cut_card(self) -> None:
        """A cut card held back while a hand was held, at its place among the cards that
        turned out surplus: as if it came now (rule 9), unless the shoe is over."""
        shoe = self._state.shoe
        assert shoe is not None
        if shoe.phase in FINISHED_PHASES:
            self._procedure("cut_card_ignored", "ignored", [], detail="the shoe is over")
        else:
            self._cut_card_acts()

    def _record(self, hand: HandState, result: dict[str, Any] | None = None,
                voided: dict[str, Any] | None = None) -> None:
        shoe = self._state.shoe
        assert shoe is not None
        derived = positions(hand)
        record = {
            "shoe_id": shoe.shoe_id, "hand_no": hand.hand_no,
            "cards": [{"card_index": c.card_index, "card": c.card,
                       "position": p if p not in (None, "surplus") else "pending",
                       "source": "manual" if c.read == "manual" else "shoe"}
                      for c, p in zip(hand.cards, derived, strict=True)],
            "result": result, "voided": voided, "supervisor_actions": list(hand.actions),
            "misorders": list(hand.misorders),
        }
        self._state.records.append(record)
        del self._state.records[:-RECORDS_KEPT]

    def _find_record(self, hand_no: int) -> dict[str, Any] | None:
        shoe = self._state.shoe
        for record in reversed(self._state.records):
            if shoe is not None and record["shoe_id"] == shoe.shoe_id \
                    and record["hand_no"] == hand_no:
                found: dict[str, Any] = record
                return found
        return None

    def _end_shoe(self) -> None:
        shoe = self._state.shoe
        assert shoe is not None
        leftovers = shoe.hand.cards if shoe.hand is not None and not shoe.hand.in_progress \
            else []
        shoe.hand = None
        self._enter(shoe, "shoe_ended")
        shoe.betting = None
        self._emit(ev.ShoeEnded, hand_no=None, hands_played=shoe.hands_played,
                   hands_voided=shoe.hands_voided)
        self._shoe_over(shoe, "the shoe ended", ended=True)
        for card in leftovers:
            self._after_end(card)

    def _void_hand_in_progress(self, hand: HandState, reason: str,
                               operator: str | None) -> None:
        shoe = self._state.shoe
        assert shoe is not None
        self._emit(ev.HandVoided, hand_no=hand.hand_no, reason=reason, operator=operator,
                   result_withdrawn=False)
        shoe.hands_voided += 1
        shoe.resolved[hand.hand_no] = True
        self._record(hand, voided={"reason": reason, "operator": operator,
                                   "result_withdrawn": False})

    def _void_shoe(self, reason: Literal["supervisor", "unnecessary_cards", "replaced"],
                   operator: str | None) -> None:
        shoe = self._state.shoe
        assert shoe is not None
        hand = shoe.hand
        # A hand that began (rule 5: in commands mode from close_betting), or one held from
        # its start; not the next hand's burn drawn while betting is open (an unnecessary
        # card): no hand_voided for a hand that never began (outside review of the cores).
        if hand is not None and (hand.in_progress or hand.holds) and reason != "unnecessary_cards":
            self._void_hand_in_progress(hand, f"shoe voided ({reason})", operator)
        shoe.hand = None
        self._enter(shoe, "shoe_voided")
        shoe.betting = None
        self._emit(ev.ShoeVoided, hand_no=None, reason=reason, operator=operator)
        self._shoe_over(shoe, "the shoe was voided", ended=False)

    # -- the cut card -----------------------------------------------------------------------

    def _cut_card(self) -> None:
        shoe = self._state.shoe
        if shoe is None or shoe.phase in FINISHED_PHASES:
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
        self._cut_card_acts()

    def _cut_card_acts(self) -> None:
        """The cut card's effect where it came in draw order (rule 9)."""
        shoe = self._state.shoe
        assert shoe is not None
        hand = shoe.hand
        if hand is not None and hand.in_progress and any(
                p is None or p == "surplus" for p in positions(hand)):
            # Held with cards pending: whether the cut came during this hand or after it
            # (during the next, rule 9) is known only once they are placed (rule 10).
            hand.cut_at = len(hand.cards)
            self._procedure("cut_card_held", "recorded", [], hand_no=hand.hand_no,
                            detail=f"drawn after card {hand.cards[-1].card_index} of held "
                                   f"hand {hand.hand_no}; it takes effect in draw order "
                                   f"when the hold ends")
            return
        self._last_hand("cut_card")

    def _last_hand(self, reason: Literal["cut_card", "end_shoe"]) -> None:
        shoe = self._state.shoe
        assert shoe is not None
        hand = shoe.hand
        if hand is not None and hand.in_progress:
            if not hand.last_hand:
                hand.last_hand = True
                self._emit(ev.LastHand, hand_no=hand.hand_no, reason=reason)
            return
        # Between hands: the hand just finished (by a result or a void) was the last one.
        # (A next hand that has not begun, its cards drawn while betting was open, is not.)
        finished = shoe.hand_no - (1 if shoe.hand is not None else 0)
        self._emit(ev.LastHand, hand_no=finished or None, reason=reason)
        self._end_shoe()

    # -- commands -------------------------------------------------------------------------

    def _on_command(self, command: cmd.Command, authenticated_as: str) -> None:
        if self._state.storage_failed:
            raise Refused("storage_failed", "the journal cannot be written; commands wait")
        handler = COMMAND_HANDLERS.get(command.command)
        self._sender = authenticated_as
        if handler is None:
            raise Refused("unknown_command", f"the engine does not handle {command.command}")
        result = handler(self, command)
        self._out.ok = True
        self._out.result = result
        if command.command not in cmd.READ_ONLY_COMMANDS:
            detail = command.model_dump(exclude={"request_id", "operator", "command"})
            self._emit(ev.SupervisorAction, command=command.command,
                       operator=command.operator, request_id=command.request_id,
                       detail=detail, authenticated_as=authenticated_as)
            action = {"command": command.command, "operator": command.operator,
                      "authenticated_as": authenticated_as,
                      "request_id": command.request_id, **detail}
            # With the hand it names (void_hand, report_misorder of a resolved hand: its
            # record), else the hand in progress (outside review: a void of hand 1 was
            # listed with hand 2, and a hand voided in progress lacked its own void).
            shoe = self._state.shoe
            named = getattr(command, "hand_no", None)
            hand = shoe.hand if shoe is not None else None
            record = None if named is None or (hand is not None and hand.hand_no == named) \
                else self._find_record(named)
            if record is not None:
                record["supervisor_actions"].append(action)
            elif hand is not None:
                hand.actions.append(action)

    def _shoe_in_play(self, code: str = "no_shoe", what: str = "") -> ShoeState:
        """The shoe in play, else refused with `code` (each command's own code in
        mqtt-api.md section 4: `no_shoe` where it lists it)."""
        shoe = self._state.shoe
        if shoe is None or shoe.phase in FINISHED_PHASES:
            raise Refused(code, f"no shoe is in play{what}")
        return shoe

    def _cmd_new_shoe(self, c: cmd.NewShoe) -> dict[str, Any]:
        shoe = self._state.shoe
        if shoe is not None and shoe.phase not in FINISHED_PHASES:
            if not c.force:
                raise Refused("shoe_in_play", f"shoe {shoe.shoe_id} is in play "
                                              f"({shoe.phase}); send force: true to replace it")
            self._flush_pull_incomplete("the shoe was replaced")
            if shoe.phase not in FINISHED_PHASES:  # (the pull's cards may have ended it)
                self._void_shoe("replaced", c.operator)
                # Its report counts the command that voided it (the supervisor_action
                # event comes after the new shoe's start, so the new shoe's counts it too)
                if shoe.report is not None:
                    actions = shoe.report.supervisor_actions
                    actions["new_shoe"] = actions.get("new_shoe", 0) + 1
        self._start_shoe("new_shoe")
        assert self._state.shoe is not None
        return {"shoe_id": self._state.shoe.shoe_id}

    def _cmd_close_betting(self, c: cmd.CloseBetting) -> dict[str, Any]:
        if self.config.betting_control == "none":
            raise Refused("betting_control_none", "this table runs with betting_control none")
        shoe = self._state.shoe
        if shoe is None or shoe.phase in FINISHED_PHASES:
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
        if self._state.pull is not None:
            # A pull half received: its items left the shoe together, while betting was
            # open (outside review of the cores: they became the hand's burn, P1 and B1,
            # not exposed)
            self._state.pull.betting_open = True
        hand = self._next_hand()
        hand.in_progress = True
        shoe.betting = "closed"
        self._enter(shoe, "dealing")
        self._emit(ev.BettingClosed, hand_no=hand.hand_no)
        self._advance()
        return {"hand_no": hand.hand_no}

    def _find_card(self, card_index: int, command: Literal["manual_card", "realign"]
                   = "manual_card") -> tuple[CardRec, Literal["commencement", "hand"]]:
        shoe = self._shoe_in_play("unknown_card", f": no card {card_index} to {command}")
        if shoe.phase == "commencement":
            for card in shoe.commencement.cards:
                if card.card_index == card_index:
                    return card, "commencement"
        if shoe.hand is not None:
            for card in shoe.hand.cards:
                if card.card_index == card_index:
                    return card, "hand"
        for record in self._state.records:
            if record["shoe_id"] == shoe.shoe_id and any(
                    c["card_index"] == card_index for c in record["cards"]):
                # realign's only code is unknown_card (mqtt-api.md section 4)
                raise Refused("hand_resolved" if command == "manual_card" else "unknown_card",
                              f"card {card_index} belongs to hand {record['hand_no']}, "
                              f"already resolved")
        other = "the commencement card" if command == "manual_card" else \
            "a commencement burn (before a hand of the shoe is resolved)"
        raise Refused("unknown_card", f"expected the index of a card of the unresolved hand, "
                                      f"a pending card or {other}; got {card_index}")

    def _cmd_manual_card(self, c: cmd.ManualCard) -> dict[str, Any]:
        try:
            new = parse_card(c.card)
        except CardNotationError as error:
            raise Refused("bad_card", str(error)) from error
        card, where = self._find_card(c.card_index)
        shoe = self._state.shoe
        assert shoe is not None
        first = card.card_index == shoe.commencement.cards[0].card_index
        if where == "commencement" and not first and card.position is not None:
            # (a card behind an unread commencement card is pending: it takes an entry)
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
        if where == "commencement" and first:
            shoe.commencement.burn_count = commencement_count(new)
            self._commencement_event(card)
        self._advance()
        return {"card_index": c.card_index, "card": new}

    def _cmd_resume(self, c: cmd.Resume) -> dict[str, Any]:
        shoe = self._shoe_in_play("not_held", ": nothing is held")
        holds = hold_detail(self._state.shoe)
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
            # Only the flagged cards the hold showed (placed, in P/B): a pending card
            # flagged later is judged where it is placed, as if no hold had been (rule
            # 11; outside review: resume let an excess card into the next hand's P1).
            for _, card in holds:
                if card is not None:
                    card.flags_cleared = True
        if shoe.integrity_hold:  # a supervisor looked and lets the shoe go on
            self._clear_integrity(f"resumed by {c.operator}")
        self._advance()
        return {"resumed": sorted({r for r, _ in holds})}

    def _cmd_void_hand(self, c: cmd.VoidHand) -> dict[str, Any]:
        shoe = self._state.shoe
        if shoe is None:
            raise Refused("unknown_hand", f"no hand {c.hand_no}: no shoe")
        hand = shoe.hand
        if hand is not None and hand.hand_no == c.hand_no and shoe.phase in (
                "between_hands", "dealing") and (hand.in_progress or hand.cards or hand.holds):
            if self._state.pull is not None:  # its items were drawn before the command
                self._state.pull.voided_hand = hand.hand_no
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
                                    "authenticated_as": self._sender,
                                    "result_withdrawn": True}
            return {"hand_no": c.hand_no, "result_withdrawn": True}
        if shoe.phase == "commencement":
            raise Refused("unknown_hand", f"shoe {shoe.shoe_id} is in commencement: it has no "
                                          f"hand {c.hand_no} (void_shoe voids the shoe)")
        raise Refused("unknown_hand", f"expected the hand in progress or a resolved hand of "
                                      f"shoe {shoe.shoe_id}, got {c.hand_no}")

    def _cmd_void_shoe(self, c: cmd.VoidShoe) -> dict[str, Any]:
        shoe = self._shoe_in_play()
        self._flush_pull_incomplete("the shoe was voided")
        if shoe.phase in FINISHED_PHASES:
            # The pending pull's own cards, applied first, ended the shoe (unnecessary
            # cards void it under burn_then_void): it is over, nothing more to void.
            return {"already": shoe.phase}
        self._void_shoe("supervisor", c.operator)
        return {}

    def _cmd_end_shoe(self, c: cmd.EndShoe) -> dict[str, Any]:
        shoe = self._state.shoe
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
        shoe = self._shoe_in_play("unknown_card", f": no card {c.card_index} to realign")
        moved = self._realign_cards(shoe, c)
        hand = shoe.hand
        # A cut card (or end_shoe) in the hand being repaired makes the new hand the last:
        # the cards are the same, only their count was wrong (rule 9).
        last = hand is not None and (hand.last_hand or hand.cut_at is not None)
        if hand is not None:
            if hand.cards or hand.in_progress:  # the hand it interrupts
                self._void_hand_in_progress(hand, f"realign at card {c.card_index}", c.operator)
                shoe.hand = None
            else:  # it had not begun (its cards drawn while betting was open, all moved):
                hand.unnecessary = 0  # the new hand keeps its number
        new = self._next_hand()
        new.has_burn = c.position == "burn"
        new.in_progress = True
        new.cards = moved
        self._enter(shoe, "dealing")
        if self.config.betting_control == "commands" and shoe.betting != "closed":
            # The new hand is dealt: the game server must stop taking bets on it, and
            # only the stream tells it (rule 5; outside review).
            shoe.betting = "closed"
            self._emit(ev.BettingClosed, hand_no=new.hand_no, trigger="realign")
        if last and not new.last_hand:
            new.last_hand = True
            self._emit(ev.LastHand, hand_no=new.hand_no,
                       reason="end_shoe" if shoe.end_requested else "cut_card")
        self._advance()
        return {"hand_no": new.hand_no}

    def _realign_cards(self, shoe: ShoeState, c: cmd.Realign) -> list[CardRec]:
        """The cards from `c.card_index` on, in draw order, taken from where they were:
        the commencement's in progress (it ends there); while no hand of the shoe has been
        resolved or voided, those of a commencement that ended on a card of hand 1 (too
        few burns drawn), with the hand's after them (decisions.md 7); else the
        unresolved hand's."""
        com = shoe.commencement
        in_commencement = shoe.phase == "commencement"
        index = next((i for i, card in enumerate(com.cards)
                      if card.card_index == c.card_index and (i > 0 or in_commencement)),
                     None)
        if index is None:
            card, _ = self._find_card(c.card_index, "realign")  # the unresolved hand's
            hand = shoe.hand
            assert hand is not None
            index = hand.cards.index(card)
            moved = hand.cards[index:]
            del hand.cards[index:]
            return moved
        if index == 0:
            raise Refused("unknown_card", "the commencement card cannot start a hand")
        if not in_commencement and shoe.resolved:
            raise Refused("unknown_card", f"card {c.card_index} is a commencement burn, and "
                                          f"hands of shoe {shoe.shoe_id} have been resolved "
                                          "or voided since: it can no longer start a hand")
        moved = com.cards[index:]
        del com.cards[index:]
        com.burn_count = len(com.cards) - 1
        if in_commencement:
            com.holds.clear()
            # The count the supervisor's repair makes, in the stream; not for an unread
            # commencement card (mqtt-api.md section 2: card and burn_count are both null
            # while it is unread; its burns' card events carry their positions).
            if com.cards[0].card is not None:
                self._commencement_event(com.cards[0])
            self._open_betting()
        elif shoe.hand is not None:
            moved += shoe.hand.cards
            shoe.hand.cards = []
        return moved

    def _cmd_report_misorder(self, c: cmd.ReportMisorder) -> dict[str, Any]:
        shoe = self._state.shoe
        exists = shoe is not None and (
            c.hand_no in shoe.resolved or (shoe.hand is not None
                                           and shoe.hand.hand_no == c.hand_no))
        if not exists:
            raise Refused("unknown_hand", f"hand {c.hand_no} does not exist in this shoe")
        self._procedure("misorder_reported", "recorded", [], detail=c.detail,
                        hand_no=c.hand_no)
        misorder = {"detail": c.detail, "operator": c.operator,
                    "authenticated_as": self._sender}
        assert shoe is not None
        if shoe.hand is not None and shoe.hand.hand_no == c.hand_no:
            shoe.hand.misorders.append(misorder)  # in its record once resolved
        else:
            record = self._find_record(c.hand_no)
            if record is not None:
                record["misorders"].append(misorder)
        return {}

    def _cmd_recall(self, c: cmd.Recall) -> dict[str, Any]:
        hands = list(reversed(self._state.records[-c.hands:]))
        shoes = {h["shoe_id"] for h in hands}
        reports = [r for r in reversed(self._state.shoe_reports) if r["shoe_id"] in shoes]
        shoe = self._state.shoe
        # The current shoe's alarm events, newest first (added: a console opened mid-shoe
        # shows the shoe's history, not only what it saw since it opened).
        history = list(reversed(shoe.report.alarm_log)) \
            if shoe is not None and shoe.report is not None else []
        return {"hands": hands, "shoe_reports": reports, "alarm_history": history}

    def _cmd_roads(self, c: cmd.RoadsCommand) -> dict[str, Any]:
        return self.roads_message()

    def _cmd_ack_alarm(self, c: cmd.AckAlarm) -> dict[str, Any]:
        alarms = self._state.alarms
        alarm = next((a for a in alarms if a.alarm_id == c.alarm_id), None)
        if alarm is None:
            active = ", ".join(f"{a.alarm_id} ({a.code})" for a in alarms) or "none"
            raise Refused("unknown_alarm", f"no active alarm {c.alarm_id}; active: {active}")
        if not alarm.ackable:
            raise Refused("not_ackable", f"alarm {c.alarm_id} ({alarm.code}) is resolved by "
                                         f"the rules (its hold, the device or the journal), "
                                         f"not acknowledged")
        self._alarm_clear(alarm.key, f"acknowledged by {c.operator}")
        return {"alarm_id": alarm.alarm_id, "code": alarm.code}


#: How the engine answers each command it handles (``replay`` is the shell's: it reads
#: the journal). A handler returns the command's result or raises Refused.
CommandHandler = Callable[[Engine, Any], dict[str, Any]]
COMMAND_HANDLERS: dict[str, CommandHandler] = {
    "new_shoe": Engine._cmd_new_shoe,
    "close_betting": Engine._cmd_close_betting,
    "manual_card": Engine._cmd_manual_card,
    "resume": Engine._cmd_resume,
    "void_hand": Engine._cmd_void_hand,
    "void_shoe": Engine._cmd_void_shoe,
    "end_shoe": Engine._cmd_end_shoe,
    "realign": Engine._cmd_realign,
    "cut_card": Engine._cmd_cut_card,
    "report_misorder": Engine._cmd_report_misorder,
    "recall": Engine._cmd_recall,
    "roads": Engine._cmd_roads,
    "ack_alarm": Engine._cmd_ack_alarm,
}

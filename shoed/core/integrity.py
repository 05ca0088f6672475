"""The shoe-order watch (integrity.md section 1): eight detectors of an unshuffled shoe.

A pure, incremental watch: the engine feeds it every card that leaves the shoe while a
shoe is in play, in procedure order (``None`` for an unread card), and it answers with
the alarms that card raised: a preliminary ``shoe_order_suspect`` notice (a run detector
one card short of its threshold, a CUSUM within 2 of its h) and the final
``shoe_unshuffled`` (a detector reached its threshold). Each detector raises at most one
of each per shoe.

The work per card is constant (a few comparisons, two CUSUM steps, one look-up of the
last n cards in each repeat detector's hash set). The watch is a pydantic model so that
it sits in the engine's state and is snapshotted, journalled and rolled back with it;
the hash sets are private and rebuilt from the dealt order after a restore.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from firmware_protocol.messages import RANKS

DETECTORS: tuple[str, ...] = (
    "suited_step_run", "monotone_run", "same_suit_run", "same_rank_run",
    "repeat_within_shoe", "repeat_previous_shoe", "cusum_rank_step", "cusum_suit",
)
RUN_DETECTORS = ("suited_step_run", "monotone_run", "same_suit_run", "same_rank_run")
CUSUM_DETECTORS = ("cusum_rank_step", "cusum_suit")
#: How close a CUSUM comes to h before the preliminary notice (integrity.md section 2).
CUSUM_MARGIN = 2.0
CUSUM_P1 = {"cusum_rank_step": 0.6, "cusum_suit": 0.7}

MAX_CARDS = 12 * 52  # a threshold longer than the largest shoe (12 decks) never fires
AlarmKind = Literal["shoe_order_suspect", "shoe_unshuffled"]
_RANK = {r: i + 1 for i, r in enumerate(RANKS)}  # A=1 ... K=13


class IntegrityThresholds(BaseModel):
    """One threshold per detector (``0`` disables it); the defaults of integrity.md."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    suited_step_run: int = Field(default=6, ge=0, le=MAX_CARDS)
    monotone_run: int = Field(default=8, ge=0, le=MAX_CARDS)
    same_suit_run: int = Field(default=13, ge=0, le=MAX_CARDS)
    same_rank_run: int = Field(default=7, ge=0, le=MAX_CARDS)
    repeat_within_shoe: int = Field(default=6, ge=0, le=MAX_CARDS)
    repeat_previous_shoe: int = Field(default=6, ge=0, le=MAX_CARDS)
    cusum_rank_step: float = Field(default=16.0, ge=0, le=1000)
    cusum_suit: float = Field(default=18.0, ge=0, le=1000)

    @field_validator("*", mode="before")
    @classmethod
    def _not_a_boolean(cls, value: object) -> object:
        if isinstance(value, bool):
            raise ValueError("expected a number (0: off), not a boolean")
        return value

    @field_validator("suited_step_run", "monotone_run", "same_suit_run", "same_rank_run")
    @classmethod
    def _run(cls, n: int) -> int:
        if n in (1, 2):
            raise ValueError(f"expected 0 (off) or a run of at least 3 cards, got {n} "
                             f"(the preliminary notice comes one card earlier)")
        return n

    @field_validator("repeat_within_shoe", "repeat_previous_shoe")
    @classmethod
    def _repeat(cls, n: int) -> int:
        if n == 1:
            raise ValueError("expected 0 (off) or a sequence of at least 2 cards, got 1")
        return n

    @field_validator("cusum_rank_step", "cusum_suit")
    @classmethod
    def _cusum(cls, h: float) -> float:
        if 0 < h <= CUSUM_MARGIN:
            raise ValueError(f"expected 0 (off) or h above {CUSUM_MARGIN:g} (the preliminary "
                             f"notice comes at h - {CUSUM_MARGIN:g}), got {h:g}")
        return h


@dataclass(frozen=True, slots=True)
class IntegrityAlarm:
    """One alarm of the watch: which detector, the card that completed it, the cards."""

    kind: AlarmKind
    detector: str
    card_index: int
    cards: list[dict[str, object]] = field(default_factory=list)  # card_index, card

    @property
    def message(self) -> str:
        shown = " ".join(str(c["card"]) for c in self.cards[-16:])
        if self.kind == "shoe_unshuffled":
            what = "the shoe looks unshuffled"
        else:
            what = "the shoe order is suspect (preliminary)"
        return (f"{what}: {self.detector} at card {self.card_index} "
                f"({len(self.cards)} card(s): {shown})")

    def alarm_fields(self) -> dict[str, object]:
        """The fields of its ``alarm`` event (events.Alarm) besides the envelope and the
        alarm_id: the preliminary notice is momentary, the final one is held."""
        return {"code": self.kind, "message": self.message, "card_index": self.card_index,
                "detector": self.detector, "cards": list(self.cards),
                "momentary": self.kind == "shoe_order_suspect"}


def cusum_p0(detector: str, decks: int) -> float:
    """The chance a fair shuffle gives a hit on the next card (integrity.md section 1)."""
    n = 52 * decks
    if detector == "cusum_rank_step":
        return (24 / 13) * 4 * decks / (n - 1)
    return (13 * decks - 1) / (n - 1)


class _Derived:
    """What the watch derives from its own fields (rebuilt after a restore)."""

    __slots__ = ("limits", "previous", "seen", "steps")

    def __init__(self, watch: IntegrityWatch) -> None:
        t = watch.thresholds
        never = 1 << 30
        # the run length (cards) at which each run detector gives notice; `never` if off
        self.limits = tuple(getattr(t, d) - 1 if getattr(t, d) else never for d in RUN_DETECTORS)
        steps: list[float] = []
        for detector in CUSUM_DETECTORS:
            p0, p1 = cusum_p0(detector, watch.decks), CUSUM_P1[detector]
            steps += [math.log(p1 / p0), math.log((1 - p1) / (1 - p0))]
        self.steps = tuple(steps)
        n = t.repeat_within_shoe
        # every window of this shoe before the newest card (the one being fed)
        self.seen = _grams(watch.cards[:-1], n) if n else set()
        m = t.repeat_previous_shoe
        self.previous: set[str] = set()
        for order in (watch.previous_shoe_order, watch.ended_shoe_order) if m else ():
            self.previous |= _grams(order, m) | _grams(order[::-1], m)

    def __eq__(self, other: object) -> bool:
        """Derived data never makes two watches differ (a restored one has none yet)."""
        return other is None or isinstance(other, _Derived)

    __hash__ = None  # type: ignore[assignment]


# indexes into IntegrityWatch.runs
STEP, UP, DOWN, SUIT, RANK, READ = range(6)


class IntegrityWatch(BaseModel):
    """The watch over one shoe. Build it at the shoe's start; :meth:`feed` every card.

    ``previous_shoe_order`` is the dealt order of the previous shoe (the last one that
    had cards dealt, ended or voided; ``None`` for an unread card), as
    :meth:`dealt_order` gave it then. ``ended_shoe_order``, when the previous shoe was
    voided, is the order of the last shoe that ended: `repeat_previous_shoe` looks in
    both, so that a short voided shoe (an unshuffled pack caught at its sixth card) does
    not hide a reload of the last shoe dealt out. Every field is plain data (the model dumps to JSON
    and back); the mutable ones are lists changed in place, which keeps a card's work
    small.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    decks: int = Field(ge=1, le=12)
    thresholds: IntegrityThresholds = Field(default_factory=IntegrityThresholds)
    previous_shoe_order: list[str | None] = Field(default_factory=list)
    ended_shoe_order: list[str | None] = Field(default_factory=list)
    #: the cards fed this shoe, in order, and their card_index
    cards: list[str | None] = Field(default_factory=list)
    indexes: list[int] = Field(default_factory=list)
    #: run lengths in cards ending at the last card (0 after an unread card):
    #: suited step, up, down, same suit, same rank, read cards since the last unread one
    runs: list[int] = Field(default_factory=lambda: [0] * 6)
    #: the two CUSUMs (rank step, suit) and where in `cards` their excursion started
    cusum: list[float] = Field(default_factory=lambda: [0.0, 0.0])
    cusum_from: list[int] = Field(default_factory=lambda: [0, 0])
    preliminary: list[str] = Field(default_factory=list)  # detectors that gave notice
    final: list[str] = Field(default_factory=list)  # detectors that raised the alarm
    derived: _Derived | None = Field(default=None, exclude=True, repr=False)

    def __getstate__(self) -> dict[Any, Any]:
        """Pickled (the engine's rollback checkpoint) without the derived hash sets, which
        the next card rebuilds: a checkpoint per card stays small."""
        state = super().__getstate__()
        state["__dict__"] = {**state["__dict__"], "derived": None}
        return state

    @field_validator("thresholds", mode="after")
    @classmethod
    def _plain_thresholds(cls, value: IntegrityThresholds) -> IntegrityThresholds:
        """Keep only the thresholds (a config section may carry more keys)."""
        if type(value) is IntegrityThresholds:
            return value
        return IntegrityThresholds(**{k: getattr(value, k) for k in DETECTORS})

    # -- public API ---------------------------------------------------------------------

    def dealt_order(self) -> list[str | None]:
        """The cards fed so far, in order: journal it as the next shoe's previous order."""
        return list(self.cards)

    def feed(self, card: str | None, card_index: int) -> list[IntegrityAlarm]:
        """One card out of the shoe (``None``: unread); the alarms it raises, if any."""
        cards = self.cards
        previous = cards[-1] if cards else None
        cards.append(card)
        self.indexes.append(card_index)
        derived = self.derived
        if derived is None:
            derived = _Derived(self)
            object.__setattr__(self, "derived", derived)  # not a field change
        runs = self.runs
        if card is None:
            runs[:] = [0] * 6
            return []
        alarms: list[IntegrityAlarm] = []
        runs[READ] += 1
        if previous is None:
            runs[STEP] = runs[UP] = runs[DOWN] = runs[SUIT] = runs[RANK] = 1
        else:
            delta = _RANK[card[0]] - _RANK[previous[0]]
            same_suit = card[1] == previous[1]
            step = delta == 1 or delta == -1
            runs[SUIT] = runs[SUIT] + 1 if same_suit else 1
            runs[RANK] = runs[RANK] + 1 if delta == 0 else 1
            runs[STEP] = runs[STEP] + 1 if step and same_suit else 1
            runs[UP] = runs[UP] + 1 if delta == 1 else 1
            runs[DOWN] = runs[DOWN] + 1 if delta == -1 else 1
            cusum, steps = self.cusum, derived.steps
            s = cusum[0] + (steps[0] if step else steps[1])
            if s <= 0.0:
                cusum[0] = 0.0
                self.cusum_from[0] = len(cards) - 1
            else:
                cusum[0] = s
                self._check_cusum(0, alarms)
            s = cusum[1] + (steps[2] if same_suit else steps[3])
            if s <= 0.0:
                cusum[1] = 0.0
                self.cusum_from[1] = len(cards) - 1
            else:
                cusum[1] = s
                self._check_cusum(1, alarms)
        limits = derived.limits
        if runs[STEP] >= limits[0]:
            self._run(0, runs[STEP], alarms)
        monotone = runs[UP] if runs[UP] > runs[DOWN] else runs[DOWN]
        if monotone >= limits[1]:
            self._run(1, monotone, alarms)
        if runs[SUIT] >= limits[2]:
            self._run(2, runs[SUIT], alarms)
        if runs[RANK] >= limits[3]:
            self._run(3, runs[RANK], alarms)
        t = self.thresholds
        n = t.repeat_within_shoe
        if n and runs[READ] >= n:
            gram = "".join(cards[-n:])  # type: ignore[arg-type]  # no None in a window
            if gram in derived.seen:
                if "repeat_within_shoe" not in self.final:
                    self._raise("shoe_unshuffled", "repeat_within_shoe", n, alarms)
            else:
                derived.seen.add(gram)
        m = t.repeat_previous_shoe
        if m and runs[READ] >= m and "repeat_previous_shoe" not in self.final:
            gram = "".join(cards[-m:])  # type: ignore[arg-type]
            if gram in derived.previous:
                self._raise("shoe_unshuffled", "repeat_previous_shoe", m, alarms)
        return alarms

    # -- detectors ------------------------------------------------------------------------

    def _tail(self, length: int) -> list[dict[str, object]]:
        start = len(self.cards) - length
        return [{"card_index": i, "card": c}
                for i, c in zip(self.indexes[start:], self.cards[start:], strict=True)]

    def _raise(self, kind: AlarmKind, detector: str, length: int,
               alarms: list[IntegrityAlarm]) -> None:
        (self.final if kind == "shoe_unshuffled" else self.preliminary).append(detector)
        alarms.append(IntegrityAlarm(kind=kind, detector=detector,
                                     card_index=self.indexes[-1], cards=self._tail(length)))

    def _run(self, which: int, run: int, alarms: list[IntegrityAlarm]) -> None:
        """A run detector at or past its notice length (threshold - 1 cards)."""
        detector = RUN_DETECTORS[which]
        if detector in self.final:
            return
        if run >= getattr(self.thresholds, detector):
            self._raise("shoe_unshuffled", detector, run, alarms)
        elif detector not in self.preliminary:
            self._raise("shoe_order_suspect", detector, run, alarms)

    def _check_cusum(self, which: int, alarms: list[IntegrityAlarm]) -> None:
        detector = CUSUM_DETECTORS[which]
        h: float = getattr(self.thresholds, detector)
        s = self.cusum[which]
        if h == 0 or s < h - CUSUM_MARGIN or detector in self.final:
            return
        length = len(self.cards) - self.cusum_from[which]
        if s >= h:
            self._raise("shoe_unshuffled", detector, length, alarms)
        elif detector not in self.preliminary:
            self._raise("shoe_order_suspect", detector, length, alarms)


def _grams(order: list[str | None], n: int) -> set[str]:
    """Every run of n read cards in `order`, as one string of 2n characters."""
    out: set[str] = set()
    segment: list[str] = []
    for card in [*order, None]:
        if card is not None:
            segment.append(card)
            continue
        if len(segment) >= n:
            text = "".join(segment)
            width = 2 * n
            out.update(text[i:i + width] for i in range(0, len(text) - width + 1, 2))
        segment = []
    return out

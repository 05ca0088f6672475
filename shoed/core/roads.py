"""The scoreboard of roads.md: bead plate, big road, derived roads, ask road, statistics.

Pure: the standing results of a shoe in, the `{root}/roads` message (roads.md section 7)
out. `Scoreboard` keeps the roads of one shoe and extends them by one result at a time
(every cell already placed keeps its place, so an append only adds); a void recomputes
the shoe from its remaining results. `roads_message` is the same computed from scratch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict

Winner = Literal["banker", "player", "tie"]
Side = Literal["banker", "player"]
Colour = Literal["red", "blue"]
TailMode = Literal["stay", "drop"]

SCHEMA_VERSION = 1
DERIVED_ROADS: tuple[tuple[str, int], ...] = (
    ("big_eye_boy", 1), ("small_road", 2), ("cockroach_pig", 3))
_WINNERS = ("banker", "player", "tie")


@dataclass(frozen=True, slots=True)
class HandOutcome:
    """What the roads use of one standing `hand_result` (roads.md section 1)."""

    hand_no: int
    winner: Winner
    player_pair: bool = False
    banker_pair: bool = False
    natural: bool = False  # either side had a natural

    def __post_init__(self) -> None:
        if self.winner not in _WINNERS:
            raise ValueError(f"winner must be banker, player or tie, got {self.winner!r}")

    @classmethod
    def from_event(cls, event: Mapping[str, Any] | Any) -> HandOutcome:
        """From a `hand_result` event: a `HandResultEvent` or its JSON form (a mapping)."""
        def get(key: str) -> Any:
            try:
                return event[key] if isinstance(event, Mapping) else getattr(event, key)
            except (KeyError, AttributeError):
                raise ValueError(f"a hand_result needs {key!r}") from None

        hand_no = get("hand_no")
        if isinstance(hand_no, bool) or not isinstance(hand_no, int):
            raise ValueError(f"a hand_result needs an integer hand_no, got {hand_no!r}")
        return cls(hand_no=hand_no, winner=get("winner"),
                   player_pair=bool(get("player_pair")), banker_pair=bool(get("banker_pair")),
                   natural=bool(get("player_natural")) or bool(get("banker_natural")))

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form (for a snapshot of the shoe's standing results)."""
        return {"hand_no": self.hand_no, "winner": self.winner,
                "player_pair": self.player_pair, "banker_pair": self.banker_pair,
                "natural": self.natural}

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> HandOutcome:
        """The inverse of `as_dict`; a missing or bad field raises ValueError naming it."""
        try:
            return cls(hand_no=int(value["hand_no"]), winner=value["winner"],
                       player_pair=bool(value["player_pair"]),
                       banker_pair=bool(value["banker_pair"]), natural=bool(value["natural"]))
        except KeyError as error:
            raise ValueError(f"a standing result needs {error.args[0]!r}: got {value!r}") from error
        except TypeError as error:
            raise ValueError(f"not a standing result: {value!r}: {error}") from error


# --- layout (roads.md section 3, used by every road) ---------------------------------


class _Grid:
    """Places the entries of a road: streaks, dragon tails, openings taken by a tail."""

    __slots__ = ("label", "last", "open_col", "rows", "tail_mode", "taken", "turned")

    def __init__(self, rows: int, tail_mode: TailMode) -> None:
        self.rows = rows
        self.tail_mode = tail_mode
        self.taken: set[tuple[int, int]] = set()
        self.open_col = -1  # the column where the current streak opened
        self.last: tuple[int, int] | None = None  # the current streak's last cell
        self.label: str | None = None
        self.turned = False

    def place(self, label: str) -> tuple[int, int]:
        if self.last is None or label != self.label:
            col = self.open_col + 1
            while (col, 0) in self.taken:  # the opening cell is under an earlier tail
                col += 1
            self.open_col, self.label, self.turned = col, label, False
            cell = (col, 0)
        else:
            col, row = self.last
            below = (col, row + 1)
            may_go_down = self.tail_mode == "drop" or not self.turned
            if may_go_down and row + 1 < self.rows and below not in self.taken:
                cell = below
            else:
                self.turned = True
                col += 1
                while (col, row) in self.taken:  # never needed in `stay`; kept as a guard
                    col += 1
                cell = (col, row)
        self.taken.add(cell)
        self.last = cell
        return cell


# --- derived roads (roads.md section 4) ----------------------------------------------


def derived_colour(k: int, n: int, m: int, lengths: list[int]) -> Colour | None:
    """The mark road `k` adds for big-road entry (n, m), or None before the road starts.

    `lengths[j - 1]` is the length of streak j; every streak before n is complete.
    """
    if n < k + 1 or (n == k + 1 and m == 1):
        return None
    if m >= 2:
        return "blue" if m == lengths[n - k - 1] + 1 else "red"
    return "red" if lengths[n - 2] == lengths[n - 2 - k] else "blue"


class _DerivedRoad:
    __slots__ = ("cells", "grid", "k", "marks")

    def __init__(self, k: int, rows: int, tail_mode: TailMode) -> None:
        self.k = k
        self.grid = _Grid(rows, tail_mode)
        self.marks: list[Colour] = []
        self.cells: list[tuple[Colour, int, int, int]] = []  # colour, col, row, hand_no

    def add(self, n: int, m: int, lengths: list[int], hand_no: int) -> None:
        colour = derived_colour(self.k, n, m, lengths)
        if colour is not None:
            col, row = self.grid.place(colour)
            self.marks.append(colour)
            self.cells.append((colour, col, row, hand_no))


# --- the scoreboard -------------------------------------------------------------------


class _BigCell:
    __slots__ = ("col", "outcome", "row", "ties")

    def __init__(self, outcome: HandOutcome, col: int, row: int, ties: int) -> None:
        self.outcome = outcome
        self.col = col
        self.row = row
        self.ties = ties


def check_rows(rows: int) -> int:
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ValueError(f"rows must be a whole number of at least 1, got {rows!r}")
    return rows


def check_tail_mode(tail_mode: str) -> TailMode:
    if tail_mode not in ("stay", "drop"):
        raise ValueError(f"tail_mode must be 'stay' or 'drop', got {tail_mode!r}")
    return cast(TailMode, tail_mode)


class Scoreboard:
    """The roads of one shoe, extended result by result; equal to `roads_message`."""

    def __init__(self, shoe_id: str | None = None, *, rows: int = 6,
                 tail_mode: TailMode = "stay", results: Iterable[HandOutcome] = ()) -> None:
        self.rows = check_rows(rows)
        self.tail_mode = check_tail_mode(tail_mode)
        self.reset(shoe_id)
        for result in results:
            self.append(result)

    @property
    def results(self) -> tuple[HandOutcome, ...]:
        """The standing results, in play order."""
        return tuple(self._results)

    def reset(self, shoe_id: str | None) -> None:
        """A new shoe: empty roads."""
        self.shoe_id = shoe_id
        self._results: list[HandOutcome] = []
        self._hand_nos: set[int] = set()
        self._big: list[_BigCell] = []
        self._big_grid = _Grid(self.rows, self.tail_mode)
        self._leading_ties = 0  # ties before the first banker or player result
        self._lengths: list[int] = []  # streak lengths; the last one is the current streak
        self._side: Side | None = None  # the current streak's side
        self._derived = [_DerivedRoad(k, self.rows, self.tail_mode) for _, k in DERIVED_ROADS]
        self._counts = {"banker": 0, "player": 0, "tie": 0, "player_pair": 0,
                        "banker_pair": 0, "natural": 0}
        self._longest = {"banker": 0, "player": 0}

    def append(self, result: HandOutcome) -> None:
        """A standing result of this shoe, the next in play order."""
        if result.hand_no in self._hand_nos:
            raise ValueError(f"hand {result.hand_no} already has a standing result")
        self._results.append(result)
        self._hand_nos.add(result.hand_no)
        counts = self._counts
        counts[result.winner] += 1
        counts["player_pair"] += result.player_pair
        counts["banker_pair"] += result.banker_pair
        counts["natural"] += result.natural
        if result.winner == "tie":
            if self._big:
                self._big[-1].ties += 1
            else:
                self._leading_ties += 1
            return
        side: Side = result.winner
        if side == self._side:
            self._lengths[-1] += 1
        else:
            self._lengths.append(1)
            self._side = side
        n, m = len(self._lengths), self._lengths[-1]
        self._longest[side] = max(self._longest[side], m)
        col, row = self._big_grid.place(side)
        ties = 0
        if not self._big:
            ties, self._leading_ties = self._leading_ties, 0
        self._big.append(_BigCell(result, col, row, ties))
        for road in self._derived:
            road.add(n, m, self._lengths, result.hand_no)

    def void(self, hand_no: int) -> bool:
        """Remove a hand's result (as if never dealt); False if it had none standing."""
        if hand_no not in self._hand_nos:
            return False
        remaining = [r for r in self._results if r.hand_no != hand_no]
        self.reset(self.shoe_id)
        for result in remaining:
            self.append(result)
        return True

    def ask(self, side: Side) -> dict[str, Colour | None]:
        """The mark each derived road would add if the next result were `side`."""
        if self._side is None:
            return {name: None for name, _ in DERIVED_ROADS}
        if side == self._side:
            n, m, lengths = len(self._lengths), self._lengths[-1] + 1, self._lengths
        else:
            n, m, lengths = len(self._lengths) + 1, 1, [*self._lengths, 0]
        return {name: derived_colour(k, n, m, lengths) for name, k in DERIVED_ROADS}

    def message(self, seq: int) -> dict[str, Any]:
        """The `{root}/roads` message (roads.md section 7); `seq` of the last event."""
        rows = self.rows
        bead = [{"hand_no": r.hand_no, "winner": r.winner, "player_pair": r.player_pair,
                 "banker_pair": r.banker_pair, "natural": r.natural,
                 "col": i // rows, "row": i % rows} for i, r in enumerate(self._results)]
        big: list[dict[str, Any]] = []
        for cell in self._big:
            o = cell.outcome
            big.append({"hand_no": o.hand_no, "winner": o.winner, "ties": cell.ties,
                        "player_pair": o.player_pair, "banker_pair": o.banker_pair,
                        "natural": o.natural, "col": cell.col, "row": cell.row})
        if not big and self._leading_ties:
            big.append({"hand_no": None, "winner": None, "ties": self._leading_ties,
                        "player_pair": False, "banker_pair": False, "natural": False,
                        "col": 0, "row": 0})
        message: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION, "seq": seq, "shoe_id": self.shoe_id,
            "rows": rows, "tail_mode": self.tail_mode, "bead_plate": bead, "big_road": big}
        for (name, _), road in zip(DERIVED_ROADS, self._derived, strict=True):
            message[name] = {
                "marks": list(road.marks),
                "cells": [{"colour": c, "col": col, "row": row, "hand_no": h}
                          for c, col, row, h in road.cells]}
        message["ask"] = {"banker": self.ask("banker"), "player": self.ask("player")}
        counts = self._counts
        current = None if self._side is None else {"side": self._side,
                                                   "length": self._lengths[-1]}
        message["stats"] = {
            "hands": len(self._results), "banker": counts["banker"],
            "player": counts["player"], "tie": counts["tie"],
            "player_pair": counts["player_pair"], "banker_pair": counts["banker_pair"],
            "natural": counts["natural"], "longest_banker_streak": self._longest["banker"],
            "longest_player_streak": self._longest["player"], "current_streak": current}
        return message


def roads_message(results: Iterable[HandOutcome], *, seq: int, shoe_id: str | None,
                  rows: int = 6, tail_mode: TailMode = "stay") -> dict[str, Any]:
    """The `{root}/roads` message for these standing results, computed from scratch."""
    board = Scoreboard(shoe_id, rows=rows, tail_mode=tail_mode, results=results)
    return board.message(seq)


class RoadsFeed:
    """The board kept from the event stream: what the engine or the daemon holds per table.

    `apply` takes every event (a model or its JSON form) in `seq` order and says whether
    the board must be republished: after every `shoe_started`, `hand_result` and
    `hand_voided` (roads.md section 7). An event at or below the `seq` already applied is
    ignored, so replaying events after a restart changes nothing. `snapshot` and
    `restore` carry the shoe's standing results across restarts.
    """

    def __init__(self, *, rows: int = 6, tail_mode: TailMode = "stay") -> None:
        self.board = Scoreboard(None, rows=rows, tail_mode=tail_mode)
        self.seq = 0  # the last event the board reflects

    def apply(self, event: Mapping[str, Any] | Any) -> bool:
        def get(key: str) -> Any:
            return event.get(key) if isinstance(event, Mapping) else getattr(event, key, None)

        kind, seq = get("type"), get("seq")
        if kind not in ("shoe_started", "hand_result", "hand_voided"):
            return False
        if not isinstance(seq, int) or seq <= self.seq:
            return False
        shoe_id = get("shoe_id")
        if kind == "shoe_started" or shoe_id != self.board.shoe_id:
            self.board.reset(shoe_id)
        if kind == "hand_result":
            self.board.append(HandOutcome.from_event(event))
        elif kind == "hand_voided" and get("hand_no") is not None:
            self.board.void(int(get("hand_no")))
        self.seq = seq
        return True

    def message(self) -> dict[str, Any]:
        return self.board.message(self.seq)

    def snapshot(self) -> dict[str, Any]:
        return {"shoe_id": self.board.shoe_id, "seq": self.seq,
                "results": [r.as_dict() for r in self.board.results]}

    @classmethod
    def restore(cls, snapshot: Mapping[str, Any], *, rows: int = 6,
                tail_mode: TailMode = "stay") -> RoadsFeed:
        feed = cls(rows=rows, tail_mode=tail_mode)
        feed.board = Scoreboard(snapshot["shoe_id"], rows=rows, tail_mode=tail_mode,
                                results=[HandOutcome.from_dict(r) for r in snapshot["results"]])
        feed.seq = int(snapshot["seq"])
        return feed


# --- the message's models, for its JSON Schema (`shoed schema`) ------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BeadCell(_Model):
    hand_no: int
    winner: Winner
    player_pair: bool
    banker_pair: bool
    natural: bool
    col: int
    row: int


class BigRoadCell(_Model):
    hand_no: int | None  # null only on the ties-only cell
    winner: Side | None
    ties: int
    player_pair: bool
    banker_pair: bool
    natural: bool
    col: int
    row: int


class DerivedCell(_Model):
    colour: Colour
    col: int
    row: int
    hand_no: int  # the big-road entry that added the mark


class DerivedRoad(_Model):
    marks: list[Colour]
    cells: list[DerivedCell]


class AskMarks(_Model):
    big_eye_boy: Colour | None
    small_road: Colour | None
    cockroach_pig: Colour | None


class Ask(_Model):
    banker: AskMarks
    player: AskMarks


class CurrentStreak(_Model):
    side: Side
    length: int


class RoadStats(_Model):
    hands: int
    banker: int
    player: int
    tie: int
    player_pair: int
    banker_pair: int
    natural: int
    longest_banker_streak: int
    longest_player_streak: int
    current_streak: CurrentStreak | None


class RoadsMessage(_Model):
    """What `{root}/roads` carries (and a `roads` command's `result`)."""

    schema_version: Literal[1]
    seq: int
    #: the journal instance `seq` belongs to (added; absent from a board computed
    #: outside a daemon, and from a daemon before it)
    instance: str | None = None
    shoe_id: str | None
    rows: int
    tail_mode: TailMode
    bead_plate: list[BeadCell]
    big_road: list[BigRoadCell]
    big_eye_boy: DerivedRoad
    small_road: DerivedRoad
    cockroach_pig: DerivedRoad
    ask: Ask
    stats: RoadStats

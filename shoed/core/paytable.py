"""Pay tables (dealing-rules.md section 2): net units won per unit staked.

The table types (commission, Super 6, EZ) and the optional side bets (Dragon 7, Panda 8,
Dragon Bonus player and banker, Lucky 6, Perfect Pair, Either Pair). A side bet settles
every hand to one named *outcome* (``win``, ``two_cards``, ``win_by_9``, ...) or to none
(the stake is lost); its pay table gives the net pay of each outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from .game import HandResult

TableType = Literal["commission", "super6", "ez"]
TABLE_TYPES: tuple[TableType, ...] = ("commission", "super6", "ez")
BETS = ("banker", "player", "tie", "banker_pair", "player_pair", "big", "small")

SIDE_BETS = ("dragon7", "panda8", "dragon_bonus_player", "dragon_bonus_banker", "lucky6",
             "perfect_pair", "either_pair")
#: the outcomes each side bet can pay on (anything else loses the stake)
SIDE_BET_OUTCOMES: dict[str, tuple[str, ...]] = {
    "dragon7": ("win",),
    "panda8": ("win",),
    "dragon_bonus_player": ("natural_win", "natural_tie", "win_by_9", "win_by_8", "win_by_7",
                            "win_by_6", "win_by_5", "win_by_4"),
    "dragon_bonus_banker": ("natural_win", "natural_tie", "win_by_9", "win_by_8", "win_by_7",
                            "win_by_6", "win_by_5", "win_by_4"),
    "lucky6": ("two_cards", "three_cards"),
    "perfect_pair": ("one", "both"),
    "either_pair": ("win",),
}
_DRAGON_BONUS = {"natural_win": 1.0, "natural_tie": 0.0, "win_by_9": 30.0, "win_by_8": 10.0,
                 "win_by_7": 6.0, "win_by_6": 4.0, "win_by_5": 2.0, "win_by_4": 1.0}
#: named presets: the standard pay tables (the first one of each bet is its default)
SIDE_BET_PRESETS: dict[str, dict[str, dict[str, float]]] = {
    "dragon7": {"standard": {"win": 40.0}},
    "panda8": {"standard": {"win": 25.0}},
    "dragon_bonus_player": {"standard": dict(_DRAGON_BONUS)},
    "dragon_bonus_banker": {"standard": dict(_DRAGON_BONUS)},
    "lucky6": {"12/20": {"two_cards": 12.0, "three_cards": 20.0},
               "12/23": {"two_cards": 12.0, "three_cards": 23.0}},
    "perfect_pair": {"either_25": {"one": 25.0, "both": 25.0},
                     "one_25_both_250": {"one": 25.0, "both": 250.0}},
    "either_pair": {"standard": {"win": 5.0}},
}
DEFAULT_PRESET = {bet: next(iter(presets)) for bet, presets in SIDE_BET_PRESETS.items()}
#: the side bets an EZ table offers unless its configuration turns them off
EZ_SIDE_BETS = ("dragon7", "panda8")


@dataclass(frozen=True, slots=True)
class SideBet:
    """One side bet: its name and the net pay of each outcome it pays on."""

    name: str
    pays: tuple[tuple[str, float], ...]

    @classmethod
    def preset(cls, name: str, preset: str | None = None,
               overrides: Mapping[str, float] | None = None) -> SideBet:
        """A side bet from a named preset (its default if None), figures overridden."""
        if name not in SIDE_BET_PRESETS:
            raise ValueError(f"expected a side bet in {', '.join(SIDE_BETS)}, got {name!r}")
        presets = SIDE_BET_PRESETS[name]
        chosen = DEFAULT_PRESET[name] if preset is None else preset
        if chosen not in presets:
            raise ValueError(f"{name}: expected a preset in {', '.join(presets)}, got {chosen!r}")
        figures = dict(presets[chosen])
        for outcome, pay in (overrides or {}).items():
            if outcome not in figures:
                raise ValueError(f"{name}: expected an outcome in {', '.join(figures)}, "
                                 f"got {outcome!r}")
            figures[outcome] = float(pay)
        return cls(name=name, pays=tuple(figures.items()))

    def pay(self, outcome: str | None) -> float:
        """The net result of a 1-unit stake for this outcome (None: lost)."""
        if outcome is None:
            return -1.0
        for name, pay in self.pays:
            if name == outcome:
                return pay
        return -1.0

    def settle(self, result: HandResult) -> float:
        return self.pay(side_bet_outcome(self.name, result))


def side_bet_outcome(bet: str, result: HandResult) -> str | None:
    """Which outcome of `bet` this hand is, or None when the bet loses."""
    if bet == "dragon7":
        return "win" if result.banker_three_card_seven else None
    if bet == "panda8":
        return "win" if result.player_three_card_eight else None
    if bet in ("dragon_bonus_player", "dragon_bonus_banker"):
        side = "player" if bet == "dragon_bonus_player" else "banker"
        return dragon_bonus_outcome(side, result.winner, result.margin, result.natural)
    if bet == "lucky6":
        if result.winner == "banker" and result.banker_total == 6:
            return "two_cards" if result.banker_card_count == 2 else "three_cards"
        return None
    if bet == "perfect_pair":
        pairs = result.player_suited_pair + result.banker_suited_pair
        return {0: None, 1: "one", 2: "both"}[pairs]
    if bet == "either_pair":
        return "win" if result.player_pair or result.banker_pair else None
    raise ValueError(f"expected a side bet in {', '.join(SIDE_BETS)}, got {bet!r}")


def dragon_bonus_outcome(side: str, winner: str, margin: int, natural: bool) -> str | None:
    """Dragon Bonus on `side`: a natural win, a natural tie (push), or a win by 4..9."""
    if natural:
        if winner == side:
            return "natural_win"
        return "natural_tie" if winner == "tie" else None
    if winner == side and margin >= 4:
        return f"win_by_{margin}"
    return None


@dataclass(frozen=True, slots=True)
class PayTable:
    """Every figure is configurable; :meth:`default` gives the spec's figures."""

    table_type: TableType
    banker: float
    banker_six: float | None = None  # None: a banker win on 6 pays `banker`
    player: float = 1.0
    tie: float = 8.0
    pair: float = 11.0
    big: float = 0.54
    small: float = 1.5
    #: EZ: a banker win with three cards totalling 7 (None: pays `banker`; EZ: 0, a push)
    banker_three_card_seven: float | None = None
    side_bets: tuple[SideBet, ...] = field(default=())

    @classmethod
    def default(cls, table_type: TableType, **overrides: float) -> PayTable:
        base: dict[str, float] = (
            {"banker": 0.95} if table_type == "commission"
            else {"banker": 1.0, "banker_six": 0.5} if table_type == "super6"
            else {"banker": 1.0, "banker_three_card_seven": 0.0}
        )
        base.update(overrides)
        side_bets = tuple(SideBet.preset(b) for b in EZ_SIDE_BETS) if table_type == "ez" else ()
        return cls(table_type=table_type, side_bets=side_bets, **base)

    @property
    def banker_on_six(self) -> float:
        return self.banker if self.banker_six is None else self.banker_six

    @property
    def banker_on_three_card_seven(self) -> float:
        return self.banker if self.banker_three_card_seven is None \
            else self.banker_three_card_seven

    def side_bet(self, name: str) -> SideBet | None:
        return next((b for b in self.side_bets if b.name == name), None)

    def payouts(self, result: HandResult) -> dict[str, float]:
        """Net result of a 1-unit stake on every bet (-1 lost, 0 push), side bets included."""
        winner = result.winner
        if winner == "banker":
            if result.banker_three_card_seven:
                banker = self.banker_on_three_card_seven
            elif result.banker_six:
                banker = self.banker_on_six
            else:
                banker = self.banker
        else:
            banker = 0.0 if winner == "tie" else -1.0
        out = {
            "banker": banker,
            "player": self.player if winner == "player" else (0.0 if winner == "tie" else -1.0),
            "tie": self.tie if winner == "tie" else -1.0,
            "banker_pair": self.pair if result.banker_pair else -1.0,
            "player_pair": self.pair if result.player_pair else -1.0,
            "big": self.big if result.big_small == "big" else -1.0,
            "small": self.small if result.big_small == "small" else -1.0,
        }
        for bet in self.side_bets:
            out[bet.name] = bet.settle(result)
        return out

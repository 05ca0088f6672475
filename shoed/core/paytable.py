"""Pay tables (dealing-rules.md section 2): net units won per unit staked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .game import HandResult

TableType = Literal["commission", "super6"]
BETS = ("banker", "player", "tie", "banker_pair", "player_pair", "big", "small")


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

    @classmethod
    def default(cls, table_type: TableType, **overrides: float) -> PayTable:
        base: dict[str, float] = (
            {"banker": 0.95} if table_type == "commission" else {"banker": 1.0, "banker_six": 0.5}
        )
        base.update(overrides)
        return cls(table_type=table_type, **base)

    @property
    def banker_on_six(self) -> float:
        return self.banker if self.banker_six is None else self.banker_six

    def payouts(self, result: HandResult) -> dict[str, float]:
        """Net result of a 1-unit stake on every bet (-1 lost, 0 push)."""
        winner = result.winner
        if winner == "banker":
            banker = self.banker_on_six if result.banker_six else self.banker
        else:
            banker = 0.0 if winner == "tie" else -1.0
        return {
            "banker": banker,
            "player": self.player if winner == "player" else (0.0 if winner == "tie" else -1.0),
            "tie": self.tie if winner == "tie" else -1.0,
            "banker_pair": self.pair if result.banker_pair else -1.0,
            "player_pair": self.pair if result.player_pair else -1.0,
            "big": self.big if result.big_small == "big" else -1.0,
            "small": self.small if result.big_small == "small" else -1.0,
        }

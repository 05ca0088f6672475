"""The table's configuration as the engine reads it (dealing-rules.md section 4)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .integrity import IntegrityThresholds
from .paytable import PayTable
from .roads import TailMode

BettingControl = Literal["commands", "none"]
UnnecessaryProfile = Literal["burn_then_player", "burn_then_void"]
OnUnshuffled = Literal["hold", "alarm"]


@dataclass(frozen=True)
class EngineConfig:
    table_id: str
    decks: int = 8
    table_type: Literal["commission", "super6", "ez"] = "commission"
    unnecessary_cards: UnnecessaryProfile = "burn_then_player"
    betting_control: BettingControl = "commands"
    paytable: PayTable | None = None
    #: the shoe-order watch (integrity.md): thresholds, and what `shoe_unshuffled` does
    integrity: IntegrityThresholds = field(default_factory=IntegrityThresholds)
    on_unshuffled: OnUnshuffled = "hold"
    #: the scoreboard (roads.md section 7): grid height and dragon tails
    roads_rows: int = 6
    roads_tail_mode: TailMode = "stay"

    @property
    def pays(self) -> PayTable:
        return self.paytable or PayTable.default(self.table_type)

"""The table's configuration as the engine reads it (dealing-rules.md section 4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .paytable import PayTable

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

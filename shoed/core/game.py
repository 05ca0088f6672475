"""Punto banco drawing rules and outcome facts (dealing-rules.md section 1).

The functions on *values* (0..9) are the single source of the third-card rules: the
dealing engine and the exact odds analyser both call them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .cards import rank_of, value
from .errors import RulesError

Position = Literal["P1", "B1", "P2", "B2", "P3", "B3"]
DEAL_ORDER: tuple[Position, ...] = ("P1", "B1", "P2", "B2")
#: The positions that make a hand (a burn is not one of them).
PB_POSITIONS: frozenset[str] = frozenset({"P1", "B1", "P2", "B2", "P3", "B3"})
Winner = Literal["player", "banker", "tie"]


def is_natural(two_card_total: int) -> bool:
    return two_card_total >= 8


def player_draws(player_total: int) -> bool:
    """Player draws on 0..5 (when neither side has a natural)."""
    return player_total <= 5


def banker_draws(banker_total: int, player_third: int | None) -> bool:
    """Banker's rule; `player_third` is the value of P3, or None if Player stood."""
    if player_third is None:
        return banker_total <= 5
    if banker_total <= 2:
        return True
    if banker_total == 3:
        return player_third != 8
    if banker_total == 4:
        return 2 <= player_third <= 7
    if banker_total == 5:
        return 4 <= player_third <= 7
    if banker_total == 6:
        return player_third in (6, 7)
    return False


def next_needed_by_values(values: list[int]) -> Position | None:
    """Given card values in draw order (P1, B1, P2, B2, then thirds), what comes next.

    Returns the next position, or None when the hand is complete.
    """
    n = len(values)
    if n < 4:
        return DEAL_ORDER[n]
    player = (values[0] + values[2]) % 10
    banker = (values[1] + values[3]) % 10
    if is_natural(player) or is_natural(banker):
        if n > 4:
            raise RulesError(f"expected 4 cards after a natural, got {n}")
        return None
    if player_draws(player):
        if n == 4:
            return "P3"
        if banker_draws(banker, values[4]):
            if n == 5:
                return "B3"
            if n == 6:
                return None
        elif n == 5:
            return None
    else:
        if banker_draws(banker, None):
            if n == 4:
                return "B3"
            if n == 5:
                return None
        elif n == 4:
            return None
    raise RulesError(f"expected at most the cards the rules require, got {n}")


def next_needed(cards: list[str]) -> Position | None:
    """Cards dealt so far in draw order -> the next position needed, or None if complete."""
    return next_needed_by_values([value(c) for c in cards])


def positions_in_draw_order(values: list[int]) -> list[Position]:
    """The position of each card of a complete or partial hand, in draw order."""
    out: list[Position] = []
    for i in range(len(values)):
        nxt = next_needed_by_values(values[:i])
        if nxt is None:
            raise RulesError(f"expected at most {i} cards for this hand, got {len(values)}")
        out.append(nxt)
    return out


@dataclass(frozen=True, slots=True)
class HandResult:
    """Every outcome fact of one hand (dealing-rules.md section 1)."""

    player_cards: tuple[str, ...]
    banker_cards: tuple[str, ...]
    player_total: int
    banker_total: int
    winner: Winner
    player_natural: bool
    banker_natural: bool
    player_pair: bool
    banker_pair: bool
    cards_dealt: int
    big_small: Literal["big", "small"]
    banker_six: bool

    # -- the facts the side bets need (paytable.py settles them) -------------------------

    @property
    def player_card_count(self) -> int:
        return len(self.player_cards)

    @property
    def banker_card_count(self) -> int:
        return len(self.banker_cards)

    @property
    def margin(self) -> int:
        """The winner's lead in points (0 on a tie)."""
        return abs(self.player_total - self.banker_total)

    @property
    def natural(self) -> bool:
        """Either side had a natural: nobody drew."""
        return self.player_natural or self.banker_natural

    @property
    def player_suited_pair(self) -> bool:
        """Player's first two cards are the same rank and suit (a perfect pair)."""
        return self.player_cards[0] == self.player_cards[1]

    @property
    def banker_suited_pair(self) -> bool:
        return self.banker_cards[0] == self.banker_cards[1]

    @property
    def banker_three_card_seven(self) -> bool:
        """Banker wins with exactly three cards totalling 7 (Dragon 7; EZ's push)."""
        return self.winner == "banker" and self.banker_card_count == 3 \
            and self.banker_total == 7

    @property
    def player_three_card_eight(self) -> bool:
        """Player wins with exactly three cards totalling 8 (Panda 8)."""
        return self.winner == "player" and self.player_card_count == 3 \
            and self.player_total == 8


def evaluate(cards: list[str]) -> HandResult:
    """Evaluate a complete hand given in draw order. Raises RulesError if incomplete."""
    if next_needed(cards) is not None or len(cards) < 4:
        raise RulesError(f"expected a complete hand, got {len(cards)} cards: {cards}")
    positions = positions_in_draw_order([value(c) for c in cards])
    by_position = dict(zip(positions, cards, strict=True))
    player = tuple(by_position[p] for p in ("P1", "P2", "P3") if p in by_position)
    banker = tuple(by_position[p] for p in ("B1", "B2", "B3") if p in by_position)
    player_total = sum(value(c) for c in player) % 10
    banker_total = sum(value(c) for c in banker) % 10
    winner: Winner = (
        "player" if player_total > banker_total
        else "banker" if banker_total > player_total
        else "tie"
    )
    return HandResult(
        player_cards=player,
        banker_cards=banker,
        player_total=player_total,
        banker_total=banker_total,
        winner=winner,
        player_natural=is_natural((value(player[0]) + value(player[1])) % 10),
        banker_natural=is_natural((value(banker[0]) + value(banker[1])) % 10),
        player_pair=rank_of(player[0]) == rank_of(player[1]),
        banker_pair=rank_of(banker[0]) == rank_of(banker[1]),
        cards_dealt=len(cards),
        big_small="small" if len(cards) == 4 else "big",
        banker_six=winner == "banker" and banker_total == 6,
    )

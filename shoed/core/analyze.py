"""Exact probabilities and house edges by exhaustive combinatorics (no sampling).

The shoe is modelled by card *value* with multiplicities (value 0 has 16 cards per
deck, 1..9 four each), dealt without replacement, through the same drawing-rule
functions the dealing engine uses. Every path is weighted by integer counts over the
common denominator N(N-1)...(N-5), so the results are exact fractions.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .game import banker_draws, is_natural, player_draws
from .paytable import PayTable, TableType


@dataclass(frozen=True, slots=True)
class Odds:
    decks: int
    banker_win: Fraction
    banker_win_six: Fraction
    player_win: Fraction
    tie: Fraction
    small: Fraction
    big: Fraction
    natural: Fraction
    pair: Fraction  # either side's first two cards of the same rank


def exact_odds(decks: int) -> Odds:
    """Enumerate every ordered sequence of card values a hand can use."""
    if decks < 1:
        raise ValueError(f"expected at least 1 deck, got {decks}")
    counts = [16 * decks] + [4 * decks] * 9
    n = 52 * decks
    scale4 = (n - 4) * (n - 5)
    scale5 = n - 5
    # tallies: banker (not 6), banker on 6, player, tie; small; natural
    banker = banker6 = player = tie = small = natural = 0

    def tally(p_total: int, b_total: int, weight: int) -> None:
        nonlocal banker, banker6, player, tie
        if p_total > b_total:
            player += weight
        elif b_total > p_total:
            if b_total == 6:
                banker6 += weight
            else:
                banker += weight
        else:
            tie += weight

    values = range(10)
    for v1 in values:
        w1 = counts[v1]
        counts[v1] -= 1
        for v2 in values:
            w2 = w1 * counts[v2]
            counts[v2] -= 1
            for v3 in values:
                w3 = w2 * counts[v3]
                counts[v3] -= 1
                p_total = (v1 + v3) % 10
                for v4 in values:
                    w4 = w3 * counts[v4]
                    if w4 == 0:
                        continue
                    counts[v4] -= 1
                    b_total = (v2 + v4) % 10
                    if is_natural(p_total) or is_natural(b_total):
                        weight = w4 * scale4
                        natural += weight
                        small += weight
                        tally(p_total, b_total, weight)
                    elif player_draws(p_total):
                        for v5 in values:
                            w5 = w4 * counts[v5]
                            if w5 == 0:
                                continue
                            p3_total = (p_total + v5) % 10
                            if banker_draws(b_total, v5):
                                counts[v5] -= 1
                                for v6 in values:
                                    w6 = w5 * counts[v6]
                                    if w6:
                                        tally(p3_total, (b_total + v6) % 10, w6)
                                counts[v5] += 1
                            else:
                                tally(p3_total, b_total, w5 * scale5)
                    elif banker_draws(b_total, None):
                        for v6 in values:
                            w6 = w4 * counts[v6]
                            if w6:
                                tally(p_total, (b_total + v6) % 10, w6 * scale5)
                    else:
                        weight = w4 * scale4
                        small += weight
                        tally(p_total, b_total, weight)
                    counts[v4] += 1
                counts[v3] += 1
            counts[v2] += 1
        counts[v1] += 1
    denominator = n * (n - 1) * (n - 2) * (n - 3) * (n - 4) * (n - 5)
    per_rank = 4 * decks
    pair = Fraction(13 * per_rank * (per_rank - 1), n * (n - 1))

    def f(x: int) -> Fraction:
        return Fraction(x, denominator)

    return Odds(
        decks=decks,
        banker_win=f(banker + banker6),
        banker_win_six=f(banker6),
        player_win=f(player),
        tie=f(tie),
        small=f(small),
        big=1 - f(small),
        natural=f(natural),
        pair=pair,
    )


def house_edges(odds: Odds, table: PayTable) -> dict[str, Fraction]:
    """House edge of each bet as a fraction of the stake (0.010579 is 1.0579 %)."""

    def q(x: float) -> Fraction:
        return Fraction(str(x))  # the configured figure exactly, not its binary float

    banker_not6 = odds.banker_win - odds.banker_win_six
    banker_ev = (banker_not6 * q(table.banker) + odds.banker_win_six * q(table.banker_on_six)
                 - odds.player_win)
    pair_ev = odds.pair * q(table.pair) - (1 - odds.pair)
    return {
        "banker": -banker_ev,
        "player": -(odds.player_win * q(table.player) - odds.banker_win),
        "tie": -(odds.tie * q(table.tie) - (1 - odds.tie)),
        "player_pair": -pair_ev,
        "banker_pair": -pair_ev,
        "big": -(odds.big * q(table.big) - odds.small),
        "small": -(odds.small * q(table.small) - odds.big),
    }


def analysis(decks: int, table_type: TableType, table: PayTable | None = None) -> dict[str, object]:
    """The `shoed analyze --json` document."""
    table = table or PayTable.default(table_type)
    odds = exact_odds(decks)
    return {
        "decks": decks,
        "table": table_type,
        "probabilities": {
            "banker_win": float(odds.banker_win),
            "player_win": float(odds.player_win),
            "tie": float(odds.tie),
            "player_pair": float(odds.pair),
            "banker_pair": float(odds.pair),
            "small": float(odds.small),
            "big": float(odds.big),
            "banker_six": float(odds.banker_win_six),
            "natural": float(odds.natural),
        },
        "house_edge": {k: float(v) for k, v in house_edges(odds, table).items()},
        "exact": {
            "banker_win": str(odds.banker_win),
            "player_win": str(odds.player_win),
            "tie": str(odds.tie),
            "pair": str(odds.pair),
        },
    }

"""Exact probabilities and house edges by exhaustive combinatorics (no sampling).

The shoe is modelled by card *value* with multiplicities (value 0 has 16 cards per
deck, 1..9 four each), dealt without replacement, through the same drawing-rule
functions the dealing engine uses. Every path is weighted by integer counts over the
common denominator N(N-1)...(N-5), so the results are exact fractions.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from .game import banker_draws, is_natural, player_draws
from .paytable import (
    SIDE_BET_OUTCOMES,
    PayTable,
    SideBet,
    TableType,
    dragon_bonus_outcome,
)


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
    pair: Fraction  # a given side's first two cards of the same rank
    #: (player total, banker total, player cards, banker cards, natural) -> probability
    distribution: dict[tuple[int, int, int, int, bool], Fraction] = field(default_factory=dict)
    pairs: dict[str, Fraction] = field(default_factory=dict)


@functools.lru_cache(maxsize=12)
def exact_odds(decks: int) -> Odds:
    """Enumerate every ordered sequence of card values a hand can use (cached per deck
    count: the result is exact and never changed)."""
    if decks < 1:
        raise ValueError(f"expected at least 1 deck, got {decks}")
    counts = [16 * decks] + [4 * decks] * 9
    n = 52 * decks
    scale4 = (n - 4) * (n - 5)
    scale5 = n - 5
    # weight of each (player total, banker total, player cards, banker cards, natural)
    outcomes: dict[tuple[int, int, int, int, bool], int] = {}

    def tally(p_total: int, b_total: int, weight: int, cards: tuple[int, int] = (2, 2),
              nat: bool = False) -> None:
        key = (p_total, b_total, cards[0], cards[1], nat)
        outcomes[key] = outcomes.get(key, 0) + weight

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
                        tally(p_total, b_total, w4 * scale4, nat=True)
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
                                        tally(p3_total, (b_total + v6) % 10, w6, (3, 3))
                                counts[v5] += 1
                            else:
                                tally(p3_total, b_total, w5 * scale5, (3, 2))
                    elif banker_draws(b_total, None):
                        for v6 in values:
                            w6 = w4 * counts[v6]
                            if w6:
                                tally(p_total, (b_total + v6) % 10, w6 * scale5, (2, 3))
                    else:
                        tally(p_total, b_total, w4 * scale4)
                    counts[v4] += 1
                counts[v3] += 1
            counts[v2] += 1
        counts[v1] += 1
    denominator = n * (n - 1) * (n - 2) * (n - 3) * (n - 4) * (n - 5)
    per_rank = 4 * decks
    distribution = {key: Fraction(w, denominator) for key, w in outcomes.items()}

    def p(test: Callable[[int, int, int, int, bool], bool]) -> Fraction:
        return sum((f for k, f in distribution.items() if test(*k)), Fraction(0))

    return Odds(
        decks=decks,
        banker_win=p(lambda pt, bt, _np, _nb, _n: bt > pt),
        banker_win_six=p(lambda pt, bt, _np, _nb, _n: bt > pt and bt == 6),
        player_win=p(lambda pt, bt, _np, _nb, _n: pt > bt),
        tie=p(lambda pt, bt, _np, _nb, _n: pt == bt),
        small=p(lambda _pt, _bt, np_, nb, _n: np_ + nb == 4),
        big=p(lambda _pt, _bt, np_, nb, _n: np_ + nb > 4),
        natural=p(lambda _pt, _bt, _np, _nb, nat: nat),
        pair=Fraction(13 * per_rank * (per_rank - 1), n * (n - 1)),
        distribution=distribution,
        pairs=_pair_odds(decks),
    )


def _pair_odds(decks: int) -> dict[str, Fraction]:
    """Pairs of the first two cards of each side (P1, P2 and B1, B2), suits included.

    Only those four cards matter, and they are a uniform ordered sample of the shoe, so
    the chances follow from counting: a side's pair by rank, by rank and suit, both
    sides' pairs together.
    """
    n = 52 * decks
    rank, card = 4 * decks, decks  # copies of one rank, of one exact card

    def both(copies: int, kinds: int) -> Fraction:
        """Both sides pair, `kinds` kinds of `copies` copies each (rank: 13, card: 52)."""
        first = Fraction(copies - 1, n - 1)  # the player's two cards pair
        same = (copies - 2) * (copies - 3)  # the banker pairs on the same kind
        other = (kinds - 1) * copies * (copies - 1)  # or on another kind
        return first * Fraction(same + other, (n - 2) * (n - 3))

    one_rank = Fraction(rank - 1, n - 1)
    one_card = Fraction(card - 1, n - 1)
    both_rank, both_card = both(rank, 13), both(card, 52)
    return {
        "rank_one_side": one_rank,  # the chance that a given side pairs by rank
        "rank_either": 2 * one_rank - both_rank,
        "rank_both": both_rank,
        "suited_one_side": one_card,
        "suited_exactly_one": 2 * (one_card - both_card),
        "suited_both": both_card,
    }


def side_bet_probabilities(odds: Odds, bet: str) -> dict[str, Fraction]:
    """The chance of each outcome of side bet `bet` (every outcome it pays on)."""
    dist = odds.distribution
    out: dict[str, Fraction] = {o: Fraction(0) for o in SIDE_BET_OUTCOMES[bet]}
    if bet == "perfect_pair":
        return {"one": odds.pairs["suited_exactly_one"], "both": odds.pairs["suited_both"]}
    if bet == "either_pair":
        return {"win": odds.pairs["rank_either"]}
    for (pt, bt, np_, nb, nat), f in dist.items():
        winner = "player" if pt > bt else "banker" if bt > pt else "tie"
        outcome: str | None = None
        if bet == "dragon7":
            outcome = "win" if winner == "banker" and nb == 3 and bt == 7 else None
        elif bet == "panda8":
            outcome = "win" if winner == "player" and np_ == 3 and pt == 8 else None
        elif bet == "lucky6":
            if winner == "banker" and bt == 6:
                outcome = "two_cards" if nb == 2 else "three_cards"
        else:
            side = "player" if bet == "dragon_bonus_player" else "banker"
            outcome = dragon_bonus_outcome(side, winner, abs(pt - bt), nat)
        if outcome is not None:
            out[outcome] += f
    return out


def side_bet_edge(probabilities: dict[str, Fraction], bet: SideBet) -> Fraction:
    """House edge of a side bet: minus its expected net result per unit staked."""
    paying = sum(probabilities.values(), Fraction(0))
    ev = sum((f * _q(bet.pay(o)) for o, f in probabilities.items()), Fraction(0))
    return -(ev - (1 - paying))


def _q(x: float) -> Fraction:
    return Fraction(str(x))  # the configured figure exactly, not its binary float


def three_card_seven(odds: Odds) -> Fraction:
    """Banker wins with exactly three cards totalling 7 (EZ's push, Dragon 7's win)."""
    return side_bet_probabilities(odds, "dragon7")["win"]


def house_edges(odds: Odds, table: PayTable) -> dict[str, Fraction]:
    """House edge of each bet as a fraction of the stake (0.010579 is 1.0579 %)."""
    q = _q
    seven = three_card_seven(odds)
    # a banker win pays `banker`, on 6 `banker_on_six`, with a three-card 7 (EZ) its own
    banker_other = odds.banker_win - odds.banker_win_six - seven
    banker_ev = (banker_other * q(table.banker) + odds.banker_win_six * q(table.banker_on_six)
                 + seven * q(table.banker_on_three_card_seven) - odds.player_win)
    pair_ev = odds.pair * q(table.pair) - (1 - odds.pair)
    edges = {
        "banker": -banker_ev,
        "player": -(odds.player_win * q(table.player) - odds.banker_win),
        "tie": -(odds.tie * q(table.tie) - (1 - odds.tie)),
        "player_pair": -pair_ev,
        "banker_pair": -pair_ev,
        "big": -(odds.big * q(table.big) - odds.small),
        "small": -(odds.small * q(table.small) - odds.big),
    }
    for bet in table.side_bets:
        edges[bet.name] = side_bet_edge(side_bet_probabilities(odds, bet.name), bet)
    return edges


def with_side_bets(table: PayTable, names: list[str] | None) -> PayTable:
    """`table` offering exactly `names` (each as configured there, else its default
    preset); None keeps the table's own side bets."""
    if names is None:
        return table
    chosen = tuple(table.side_bet(n) or SideBet.preset(n) for n in names)
    return dataclasses.replace(table, side_bets=chosen)


def analysis(decks: int, table_type: TableType, table: PayTable | None = None,
             side_bets: list[str] | None = None) -> dict[str, object]:
    """The `shoed analyze --json` document.

    `side_bets` names the side bets to analyse (None: the ones `table` offers; an EZ
    table's default offers Dragon 7 and Panda 8).
    """
    if not 1 <= decks <= 12:
        raise ValueError(f"expected 1 to 12 decks, got {decks}")
    table = with_side_bets(table or PayTable.default(table_type), side_bets)
    odds = exact_odds(decks)
    probabilities: dict[str, float] = {
        "banker_win": float(odds.banker_win),
        "player_win": float(odds.player_win),
        "tie": float(odds.tie),
        "player_pair": float(odds.pair),
        "banker_pair": float(odds.pair),
        "small": float(odds.small),
        "big": float(odds.big),
        "banker_six": float(odds.banker_win_six),
        "natural": float(odds.natural),
    }
    if table.table_type == "ez":
        probabilities["banker_three_card_seven"] = float(three_card_seven(odds))
    exact = {
        "banker_win": str(odds.banker_win),
        "player_win": str(odds.player_win),
        "tie": str(odds.tie),
        "pair": str(odds.pair),
    }
    pay_tables: dict[str, dict[str, float]] = {}
    for bet in table.side_bets:
        for outcome, f in side_bet_probabilities(odds, bet.name).items():
            probabilities[f"{bet.name}_{outcome}"] = float(f)
            exact[f"{bet.name}_{outcome}"] = str(f)
        pay_tables[bet.name] = dict(bet.pays)
    return {
        "decks": decks,
        "table": table.table_type,
        "probabilities": probabilities,
        "house_edge": {k: float(v) for k, v in house_edges(odds, table).items()},
        "exact": exact,
        "side_bets": pay_tables,
    }

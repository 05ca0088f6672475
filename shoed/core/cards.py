"""Cards in the two-character notation of firmware-protocol.md section 5 (``TD``, ``AS``)."""

from __future__ import annotations

from firmware_protocol.messages import RANKS, SUITS

from .errors import CardNotationError

ALL_CARDS: tuple[str, ...] = tuple(r + s for s in SUITS for r in RANKS)


def parse_card(text: object) -> str:
    """Return the canonical card string, or raise :class:`CardNotationError` naming the fault.

    Lower case is accepted and normalised (``"td"`` -> ``"TD"``); ``10`` is not a rank.
    """
    if not isinstance(text, str):
        raise CardNotationError(f"expected a card string like 'TD', got {type(text).__name__}")
    card = text.strip().upper()
    if len(card) != 2:
        raise CardNotationError(
            f"expected two characters, rank then suit (like 'TD'), got {text!r}"
        )
    rank, suit = card[0], card[1]
    if rank not in RANKS:
        raise CardNotationError(f"expected a rank in {RANKS}, got {rank!r} in {text!r}")
    if suit not in SUITS:
        raise CardNotationError(f"expected a suit in {SUITS}, got {suit!r} in {text!r}")
    return card


def rank_of(card: str) -> str:
    return card[0]


def value_of_rank(rank: str) -> int:
    """Baccarat point value: A = 1, 2..9 face, T/J/Q/K = 0."""
    index = RANKS.index(rank)
    return index + 1 if index < 9 else 0


#: value_of_rank of every rank, looked up (value() runs several times per card)
_RANK_VALUES: dict[str, int] = {rank: value_of_rank(rank) for rank in RANKS}


def value(card: str) -> int:
    found = _RANK_VALUES.get(card[0])
    return value_of_rank(card[0]) if found is None else found  # not a rank: its error


def commencement_count(card: str) -> int:
    """How many further cards the commencement card burns: 10/J/Q/K count 10, A 1."""
    index = RANKS.index(card[0])
    return min(index + 1, 10)


def total(cards: list[str] | tuple[str, ...]) -> int:
    return sum(value(c) for c in cards) % 10

"""The exception tree of shoed's pure cores; messages name expected and actual values."""

from __future__ import annotations


class ShoedError(Exception):
    """Base of shoed's own errors."""


class CardNotationError(ShoedError, ValueError):
    """A card string that is not rank + suit in section-5 notation."""


class RulesError(ShoedError, ValueError):
    """A hand that the drawing rules cannot accept (too many cards, ...)."""

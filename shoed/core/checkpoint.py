"""Checkpoints of the engine's state: something to roll back to, paid for mostly on
failure.

The engine has one before every input (a refused command or an engine bug puts it back);
the shell keeps the first of a batch to undo what the journal could not store. Two kinds:

- :func:`take`: the state pickled now, loaded on failure (before a command; commands are
  rare, and a refused one rolls back often);
- :class:`Replayed`, before a device input (the hot path, one per card): a :class:`Trail`
  (the state pickled at some earlier point, and the inputs handled since) and how many
  of those inputs it covers. Loading it unpickles the base and handles those inputs
  again in a scratch engine: the engine is deterministic (the same inputs from the same
  state give the same state, as the journal's own recovery relies on), so this is the
  state before the input, and taking it costs a list append instead of a pickle of the
  whole state (0.27 ms per card, half the engine's time, docs/performance.md). The
  engine starts a new trail every REBASE_EVERY inputs, after a card's event has left
  (``prepare_checkpoint``), so a roll-back replays at most that many.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from typing import cast

from .inputs import Input
from .state import CommencementState, EngineState

#: Loads the state a checkpoint was taken of (a new object each call).
Checkpoint = Callable[[], EngineState]

_EMPTY_COMMENCEMENT = CommencementState()  # a placeholder while a checkpoint is pickled

#: The most inputs a Replayed checkpoint handles again (a new trail after this many).
REBASE_EVERY = 64


class Trail:
    """A base (the engine's state, pickled) and the inputs the engine handled since, in
    order. Only appended to; a new trail replaces it (old checkpoints keep theirs)."""

    __slots__ = ("base", "inputs")

    def __init__(self, base: bytes, inputs: list[Input] | None = None) -> None:
        self.base = base
        self.inputs: list[Input] = inputs if inputs is not None else []

    @classmethod
    def of(cls, state: EngineState) -> Trail:
        """A new trail from `state` (pickled now)."""
        return cls(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))


class Replayed:
    """The state after the first `covers` inputs of `trail`: the base, those handled again
    by `replay` (a scratch engine's loop)."""

    __slots__ = ("covers", "replay", "trail")

    def __init__(self, trail: Trail, covers: int,
                 replay: Callable[[EngineState, Sequence[Input]], EngineState]) -> None:
        self.trail = trail
        self.covers = covers
        self.replay = replay

    def __call__(self) -> EngineState:
        state = cast(EngineState, pickle.loads(self.trail.base))
        return self.replay(state, self.trail.inputs[:self.covers])

    def trail_to_here(self) -> Trail:
        """A trail that ends where this checkpoint is (after a roll-back to it)."""
        return Trail(self.trail.base, self.trail.inputs[:self.covers])


def take(state: EngineState, full: bool) -> Checkpoint:
    """A checkpoint of `state`. For device inputs (the hot path per card, `full` False)
    two parts are kept by reference rather than serialised, because device inputs never
    change them in place: the finished-hand `records` (only appended to) and, once the
    shoe is past it, the commencement (changed only while the phase is "commencement";
    a new shoe is a new object)."""
    if full:
        blob = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        return lambda: cast(EngineState, pickle.loads(blob))
    records = state.records
    shoe = state.shoe
    commencement = shoe.commencement if shoe and shoe.phase != "commencement" else None
    state.records = []
    if shoe is not None and commencement is not None:
        shoe.commencement = _EMPTY_COMMENCEMENT
    try:
        blob = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        state.records = records
        if shoe is not None and commencement is not None:
            shoe.commencement = commencement
    kept = list(records)

    def load() -> EngineState:
        loaded = cast(EngineState, pickle.loads(blob))
        loaded.records = kept
        if loaded.shoe is not None and commencement is not None:
            loaded.shoe.commencement = commencement
        return loaded

    return load

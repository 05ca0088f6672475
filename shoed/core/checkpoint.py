"""Checkpoints of the engine's state: something to roll back to, paid for mostly on
failure (pickle bytes, loaded only then).

The engine takes one before every input (a refused command or an engine bug puts it
back); the shell keeps the first of a batch to undo what the journal could not store.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import cast

from .state import CommencementState, EngineState

#: Loads the state a checkpoint was taken of (a new object each call).
Checkpoint = Callable[[], EngineState]

_EMPTY_COMMENCEMENT = CommencementState()  # a placeholder while a checkpoint is pickled


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

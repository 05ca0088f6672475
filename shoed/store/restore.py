"""A journal opened and its engine rebuilt: the start's one job before the daemon runs.

The engine comes back from the journal's latest snapshot and the inputs recorded after
it; the events those inputs make again and the journal lacks (the effect write they
never got, decisions.md 135) are written back with the same seq and event_id. Then the
engine's seq must be where the journal's events end; where it is not, events are missing
(damage: refused, or set aside with ``--new-journal``) or the newest inputs were dealt
by another engine (an upgrade after a crash, a changed ``[rules]``: refused, with what
to do), because going on would leave a hole in ``seq`` or put two events on one.
"""

from __future__ import annotations

import hashlib
import pathlib
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import shoed.core.engine as engine_module
from shoed.config import Settings
from shoed.core.config import EngineConfig
from shoed.core.engine import Engine
from shoed.core.events import event_json
from shoed.core.inputs import INPUT_ADAPTER
from shoed.store.check import record_damage
from shoed.store.journal import Journal
from shoed.store.statedir import JournalDamaged, StorageError

#: The journal's meta key of the engine that dealt its newest inputs (engine_fingerprint).
ENGINE_META = "engine"


def engine_fingerprint(config: EngineConfig) -> str:
    """Which engine deals: a hash of the core's source and the engine's config. Inputs
    replayed by another (an upgrade, a changed [rules]) may give other events."""
    digest = hashlib.sha256()
    for path in sorted(pathlib.Path(engine_module.__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    digest.update(repr(config).encode())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class Restored:
    journal: Journal
    engine: Engine
    after: int  # the input id of the snapshot the engine came from (0: none)
    replayed: int  # inputs dealt again after it
    events_recovered: int  # events written back that the journal lacked


def restore(settings: Settings, config: EngineConfig, log: Any) -> Restored:
    """Open the journal and rebuild the engine from its latest snapshot and the inputs
    recorded after it (their missing events are written back)."""
    journal = Journal(settings.state.dir, new_journal=settings.state.new_journal)
    if journal.moved_aside is not None:
        log.warning("journal_moved_aside", damage=journal.damage,
                    moved_to=str(journal.moved_aside), instance=journal.instance_id)
    snapshot = journal.latest_snapshot()
    if snapshot is None:
        engine, after = Engine(config, instance_id=journal.instance_id), 0
    else:
        after, state = snapshot
        engine = Engine.restore(config, state)
    replayed = 0
    recovered = journal.event_range()[1]
    dealt_by, engine_now = journal.meta(ENGINE_META), engine_fingerprint(config)
    with journal.transaction():
        for _, body in journal.inputs_after(after):
            for event in engine.handle(INPUT_ADAPTER.validate_json(body)).events:
                journal.add_event(event.seq, event.event_id, event.type, event_json(event))
            replayed += 1
        journal.set_meta(ENGINE_META, engine_now)
    last_event = journal.event_range()[1]
    other_engine = dealt_by is not None and dealt_by != engine_now and replayed > 0
    if other_engine:
        log.warning("journal_replayed_by_another_engine", replayed_inputs=replayed,
                    dealt_by=dealt_by, engine=engine_now)
    if last_event and engine.seq != last_event:
        # A snapshot is written with every event before it, and the inputs after it give
        # back the events they made: events are missing (rows deleted or lost), or another
        # engine dealt those inputs (an upgrade after a crash, a changed [rules]). Going
        # on would leave a hole, or two events on one seq (outside review).
        log.error("journal_replay_mismatch", engine_seq=engine.seq, journal_seq=last_event,
                  other_engine=other_engine)
        problem = (f"its newest {replayed} input(s) were dealt by another shoed version "
                   f"or [rules] config (engine {dealt_by}, this one {engine_now}); "
                   f"replayed here they lead to seq {engine.seq}, where its events end "
                   f"at seq {last_event}") if other_engine else (
            f"events missing: the journal's inputs lead to seq {engine.seq}, its "
            f"events end at seq {last_event}")
        if settings.state.new_journal:  # the operator's --new-journal: moved aside
            moved = journal.set_aside(problem)
            log.warning("journal_moved_aside", damage=[problem], moved_to=str(moved))
            return restore(settings, config, log)
        if other_engine:  # not damage: the engine that dealt them can stop it cleanly
            journal.close(clean=False)
            raise StorageError(
                f"journal {journal.path}: {problem}. Start the shoed and config that "
                f"dealt them until it stops cleanly (its stop writes a snapshot of every "
                f"input), then this one; or `shoed run --new-journal` sets the journal "
                f"aside")
        with suppress(OSError):
            record_damage(journal.directory, problem)
        journal.close(clean=False)
        raise JournalDamaged(journal.path, [problem])
    return Restored(journal, engine, after, replayed, last_event - recovered)

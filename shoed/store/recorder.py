"""The durable step, and the storage-failure mode, in one place.

Three kinds of writes, by what they protect:

* the record (fsynced): a device frame's inputs and the link's dedup state, one entry of
  the record log, before its ACK (:meth:`Recorder.record`; shoed/store/records.py), copied
  into the database by the next transaction; a command with its events and answer,
  before the answer (:meth:`Recorder.commit`);
* the effect (fsynced after the publish): the events a recorded device input produced,
  publish marks and snapshots (:meth:`Recorder.write_effects`). All of it can be derived
  again from the record: :meth:`Recorder.open` (shoed/store/restore.py) replays recorded
  inputs and inserts the events that are missing (same seq, same event_id). So the effect
  is written after the events have been handed to the broker, off the card-to-event path;
* a command's transaction also carries any effect still unwritten.

When the journal cannot be written, nothing is ACKed or answered, the engine is rolled
back (memory never runs ahead of the record), the gate is locked, and every later step
first tries to journal the `storage_failed` alarm's raise and clear (:meth:`retry`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from firmware_protocol import DedupState
from shoed.aio import in_background_thread
from shoed.config import Settings
from shoed.core.config import EngineConfig
from shoed.core.engine import Engine, Output
from shoed.core.events import event_json
from shoed.core.inputs import Input, JournalCorrupt, StorageStatus
from shoed.device.inputs import stamp
from shoed.status import TableStatus
from shoed.store.journal import Journal
from shoed.store.outbox import Outbox
from shoed.store.restore import restore
from shoed.store.statedir import StorageError

EFFECT_WRITE_DELAY_S = 0.2  # the longest an effect waits in memory when the broker is away
# After a PUBACK the effect is written at once when the last effect write is at least
# this old, else by a later PUBACK or the effect timer (EFFECT_WRITE_DELAY_S after the
# apply; this long after a PUBACK that left only its mark to write). At a table's pace (a
# card a second or slower) every PUBACK still writes its own effect; a burst of cards
# shares one write (decisions.md 135). The cost: after a kill -9, the events of the last
# EFFECT_WRITE_DELAY_S at most are published again, with their event_id (mqtt-api.md
# section 2: at least once).
EFFECT_COALESCE_S = 0.1
PRUNE_EVERY_S = 3600.0
# A prune deletes at most this many events at once (~2 ms with its checkpoint; an hour of
# a busy table is ~420 events), and at most PRUNE_BATCHES of them per housekeeping tick,
# PRUNE_PAUSE_S apart: a day's backlog (~10 000) is gone in one tick, and a card waits
# for one batch at most (docs/performance.md).
PRUNE_BATCH = 100
PRUNE_BATCHES = 120
PRUNE_PAUSE_S = 0.01

# Called after a device frame's record is durable and before its ACK. Empty in the
# product; the kill tests' harness installs a crash here.
RECORD_HOOKS: list[Callable[[], None]] = []

Answer = Callable[[Output], dict[str, Any]]
#: Where a command's answer is remembered: (sender, request_id, fingerprint).
AnswerKey = tuple[str, str, str]




def dedup_json(dedup: DedupState) -> str:
    """``json.dumps([boot_id, last_seq])`` written out (both ints or None): it is made
    before every ACK, and json.dumps of two numbers was 1 % of the daemon's Python."""
    boot, last = dedup.boot_id, dedup.last_seq
    return (f"[{'null' if boot is None else int(boot)}, "
            f"{'null' if last is None else int(last)}]")


class Recorder:
    def __init__(self, journal: Journal, engine: Engine, status: TableStatus,
                 snapshot_every: int, log: Any) -> None:
        self.journal = journal
        self.engine = engine
        self.uptime = journal.uptime
        self.outbox = Outbox(journal)
        self.outbox.flush = self.write_effects
        self.outbox.flush_soon = self.effects_acked
        self.status = status
        self.snapshot_every = snapshot_every
        self.log = log
        self.on_output: Callable[[Output], None] = lambda out: None
        self.on_storage_failed: Callable[[], None] = lambda: None
        self.failures = 0
        self._failed_at: float | None = None
        self._inputs_since_snapshot = 0
        self._last_applied_input = 0
        self._effects_timer: asyncio.TimerHandle | None = None
        self._effects_at = -EFFECT_COALESCE_S  # monotonic time of the last effect written
        self._last_prune: float | None = None
        self._pruning = False  # the last prune stopped at its batch limit: more to drop

    @classmethod
    def open(cls, settings: Settings, config: EngineConfig, status: TableStatus,
             log: Any) -> Recorder:
        """Open the journal and rebuild the engine from it (shoed/store/restore.py)."""
        restored = restore(settings, config, log)
        journal, engine = restored.journal, restored.engine
        recorder = cls(journal, engine, status, settings.state.snapshot_every, log)
        dedup = recorder.dedup()
        log.info("journal_restored", path=str(journal.path), snapshot_input=restored.after,
                 replayed_inputs=restored.replayed, records_recovered=journal.recovered_records,
                 events_recovered=restored.events_recovered,
                 seq=engine.seq, outbox=journal.outbox_depth(), dedup_boot_id=dedup.boot_id,
                 dedup_last_seq=dedup.last_seq, shoe_state=engine.public_state()["shoe_state"])
        return recorder

    @property
    def state(self) -> Any:
        return self.engine.state

    def dedup(self) -> DedupState:
        """The link's duplicate detection as last recorded."""
        boot, last = json.loads(self.journal.dedup() or "[null, null]")
        return DedupState(boot, last)

    def _add_inputs(self, inputs: list[Input], dedup: DedupState | None) -> list[int]:
        """The inputs' rows, the frame's dedup state on the last (or in meta when the
        frame brought none)."""
        journal = self.journal
        kept = None if dedup is None else dedup_json(dedup)
        if kept is not None and not inputs:
            # A frame without inputs is recorded through the record log (record()); a
            # dedup state written here alone could be gone over at the next start by a
            # heartbeat's entry read again from the log (decisions.md 137).
            raise ValueError("a dedup state is committed only with the frame's inputs")
        last = len(inputs) - 1
        return [journal.add_input(inp.at, inp.model_dump_json(), kept if i == last else None)
                for i, inp in enumerate(inputs)]

    # -- a device frame: record, (ACK), apply ----------------------------------------------

    def record(self, inputs: list[Input], dedup: DedupState) -> list[tuple[int, Input]] | None:
        """The frame's inputs and the new dedup state in one fdatasynced write (the record
        log); the recorded inputs with their ids, or None when storage failed (no ACK
        then). The effect write (or any transaction) copies them into the database."""
        ids = self.record_bodies([(inp.at, inp.model_dump_json()) for inp in inputs], dedup)
        return None if ids is None else list(zip(ids, inputs, strict=True))

    def record_bodies(self, bodies: list[tuple[float, str]], dedup: DedupState
                      ) -> list[int] | None:
        """:meth:`record` of inputs given as (at, their JSON): their ids, or None when
        storage failed (no ACK then). The caller applies their models, in order, next."""
        if not self.status.storage_ok and not self.retry():
            return None
        try:
            ids = self.journal.record(bodies, dedup_json(dedup))
        except StorageError as error:
            self._failed(str(error))
            return None
        for hook in RECORD_HOOKS:
            hook()
        return ids

    def apply(self, recorded: list[tuple[int, Input]]) -> list[Output]:
        """The game effect of recorded inputs: engine, events to the publisher at once,
        then the gate's and the indicator's requests (Engine.settle_device); their outbox
        rows follow (write_effects)."""
        outputs = [self._apply(input_id, inp, device_later=True) for input_id, inp in recorded]
        for out in outputs:
            self._hand_over(out)
        if (self.outbox.unwritten or self.journal.pending) and self._effects_timer is None:
            self._effects_timer = asyncio.get_running_loop().call_later(
                EFFECT_WRITE_DELAY_S, self.write_effects)
        return outputs

    # -- everything else: one transaction, then apply ---------------------------------------

    def commit(self, inputs: list[Input], dedup: DedupState | None = None,
               answer: Answer | None = None,
               answer_key: AnswerKey | None = None) -> list[Output] | None:
        """Apply `inputs` and make them durable in one transaction (with a command's
        answer, made by `answer`); None if storage failed (the engine is rolled back)."""
        if not self.status.storage_ok and not self.retry():
            return None
        try:
            outputs = self._durable_apply(inputs, dedup, answer, answer_key)
        except StorageError as error:
            self._failed(str(error))
            return None
        for out in outputs:
            self._hand_over(out)
        return outputs

    def _durable_apply(self, inputs: list[Input], dedup: DedupState | None,
                       answer: Answer | None, answer_key: AnswerKey | None) -> list[Output]:
        engine, journal, outbox = self.engine, self.journal, self.outbox
        mark = outbox.mark()
        before = (self._inputs_since_snapshot, self._last_applied_input)
        rollback = None
        outputs: list[Output] = []
        try:
            with journal.transaction():
                for input_id, inp in zip(self._add_inputs(inputs, dedup), inputs, strict=True):
                    outputs.append(self._apply(input_id, inp))
                    rollback = rollback or engine.last_rollback
                    if answer is not None:
                        body = answer(outputs[-1])
                        sender, request_id, fingerprint = answer_key or (
                            "anonymous", str(body["request_id"]), "")
                        journal.add_response(sender, request_id, fingerprint, body)
                written = self._effects_in_transaction()
        except StorageError:
            if rollback is not None:
                engine.roll_back(rollback)
            outbox.rollback(mark)
            self._inputs_since_snapshot, self._last_applied_input = before
            raise
        self._effects_written(*written)
        return outputs

    def _apply(self, input_id: int, inp: Input, device_later: bool = False) -> Output:
        out = self.engine.handle(inp, device_later)
        add = self.outbox.add
        for event in out.events:
            add(event.seq, event.event_id, event.type, event_json(event))
        self._last_applied_input = input_id
        self._inputs_since_snapshot += 1
        return out

    def _hand_over(self, out: Output) -> None:
        if out.events:
            self.outbox.ready()  # the idle publisher sends the first event from here
        self.engine.settle_device()  # the gate and indicator of apply()'s last input
        if out.events or out.device:
            self.on_output(out)

    # -- the effect -----------------------------------------------------------------------

    def _effects_in_transaction(self) -> tuple[int, int, bool]:
        rows, marked = self.outbox.write_in_transaction()
        snapshot = (self._inputs_since_snapshot >= self.snapshot_every
                    and self._last_applied_input > 0)
        if snapshot:
            self.journal.save_snapshot(self._last_applied_input, self.engine.snapshot())
        return rows, marked, snapshot

    def _effects_written(self, rows: int, marked: int, snapshot: bool) -> None:
        self.outbox.written(rows, marked)
        self._effects_at = time.monotonic()  # whichever transaction carried it
        if snapshot:
            self._inputs_since_snapshot = 0

    def effects_acked(self) -> None:
        """PUBACKs came: write the effect now, unless the last write is younger than
        EFFECT_COALESCE_S (then a later PUBACK or the effect timer writes it)."""
        if time.monotonic() - self._effects_at >= EFFECT_COALESCE_S:
            self.write_effects()
        elif self._effects_timer is None and self.outbox.dirty:
            self._effects_timer = asyncio.get_running_loop().call_later(
                EFFECT_COALESCE_S, self.write_effects)

    def _cancel_effects_timer(self) -> None:
        if self._effects_timer is not None:
            self._effects_timer.cancel()
            self._effects_timer = None

    def write_effects(self) -> bool:
        """Write the pending effect now (one fsynced transaction). False when storage is
        failing; the effect then stays in memory until storage is back."""
        self._cancel_effects_timer()
        if not self.outbox.dirty and not self.journal.pending:
            return True
        if not self.status.storage_ok and not self.retry():
            return False  # the retry's own transaction wrote the effect when it succeeded
        try:
            # fsynced here, after the publish, where nothing waits: left unsynced, its
            # frames could be counted by the wal-index before they are on disk, and a
            # power cut would then look like a damaged log (Journal.transaction).
            with self.journal.transaction():
                written = self._effects_in_transaction()
            self._effects_written(*written)
            self.journal.checkpoint_if_due()  # after the publish: nothing waits on it
        except StorageError as error:
            self._failed(str(error))
            return False
        return True

    # -- storage failure --------------------------------------------------------------------

    def _failed(self, message: str) -> None:
        if self.status.storage_ok:
            self.failures += 1
            self._failed_at = time.time()
            self.log.error("storage_failed", error=message,
                           action="no ACK to the shoe, commands refused, gate locked")
        self.status.set(storage_ok=False, storage_error=message)
        self.on_storage_failed()

    def retry(self) -> bool:
        """Storage was failing: journal the alarm's raise and clear now; True if it could."""
        at = self._failed_at or time.time()
        try:
            outputs = self._durable_apply([
                StorageStatus(at=at, ok=False, message=self.status.storage_error or ""),
                StorageStatus(at=time.time(), ok=True, message="storage back")], None, None, None)
        except StorageError:
            return False
        self.log.warning("storage_recovered")
        self.status.set(storage_ok=True, storage_error=None)
        for out in outputs:
            self._hand_over(out)
        return True

    # -- housekeeping, stop -----------------------------------------------------------------

    def housekeeping(self, retention_days: int, answers_s: float = 86400.0) -> bool:
        """WAL checkpoint when due (commands alone also grow it), a storage retry when
        failing (with the gate locked the shoe may send nothing for a while). True when
        the hourly prune is due (:meth:`prune`; the shell runs it, in batches)."""
        if not self.status.storage_ok:
            self.retry()
            return False
        try:
            self.journal.checkpoint_if_due()
            self.journal.save_uptime()  # a kill -9 loses at most one interval of it
        except StorageError as error:
            self.log.warning("housekeeping_failed", error=str(error))
            return False
        return (self._pruning or self._last_prune is None
                or time.monotonic() - self._last_prune > PRUNE_EVERY_S)

    async def prune(self, retention_days: int, answers_s: float = 86400.0) -> int:
        """The retention prune (both clocks), PRUNE_BATCH events at a time with the loop
        free in between, at most PRUNE_BATCHES of them; what is left goes on at the next
        call. Returns the events dropped."""
        self._last_prune = started = time.monotonic()
        dropped, longest = 0, 0.0
        for _ in range(PRUNE_BATCHES):
            if not self.status.storage_ok:
                break  # failed meanwhile (the pause): the storage retry comes first
            batch_started = time.monotonic()
            try:
                batch = self.journal.prune(retention_days, answers_s=answers_s,
                                           limit=PRUNE_BATCH)
                if batch:
                    # A batch touches ~150 pages the dealing does not: copied into the
                    # database now, ~1 ms; left for the periodic checkpoint, a day's
                    # backlog made that one copy hold the loop ~40 ms.
                    self.journal.checkpoint_if_due(every=0)
            except StorageError as error:
                self.log.warning("housekeeping_failed", error=str(error))
                break
            dropped += batch
            longest = max(longest, time.monotonic() - batch_started)
            self._pruning = batch == PRUNE_BATCH
            if not self._pruning:
                break
            await asyncio.sleep(PRUNE_PAUSE_S)
        self.log.info("journal_pruned", events=dropped, more=self._pruning,
                      seconds=round(time.monotonic() - started, 3),
                      longest_batch_s=round(longest, 4),
                      uptime=round(self.uptime.now()))
        return dropped

    async def integrity_check(self) -> None:
        """SQLite's full integrity check once after READY, in a thread on a read-only
        connection of its own, at the idle priority: it never holds up READY or a card
        (docs/reliability.md).
        A problem is logged and recorded beside the journal (the next start refuses it),
        shown in the status and `STATUS=`, and held as alarm `journal_corrupt` in the
        stream: the table deals on, and the pit knows before that start."""
        found = await in_background_thread(self.journal.integrity_check, "integrity_check")
        if found:
            what = "; ".join(found)[:300]
            self.log.error("journal_corrupt", path=str(self.journal.path), problems=found,
                           action="dealing goes on; the next start refuses this journal")
            self.status.set(journal_corrupt=what)
            message = (f"the journal {self.journal.path} failed SQLite's integrity check "
                       f"({what}); the daemon goes on, and its next start refuses the "
                       f"journal: plan `shoed run --new-journal`")
            if self.commit([JournalCorrupt(**stamp(self.uptime), message=message)]) is None:
                self.log.warning("journal_corrupt_not_journalled",
                                 error=self.status.storage_error)

    def close(self) -> None:
        """The pending effect and a snapshot covering every applied input, then close
        (the effect timer cancelled: nothing writes to the closed journal after)."""
        self._cancel_effects_timer()
        if self.status.storage_ok:
            try:
                with self.journal.transaction():
                    written = self._effects_in_transaction()
                    last = self.journal.last_input_id()
                    if last:
                        self.journal.save_snapshot(last, self.engine.snapshot())
                self._effects_written(*written)
            except StorageError as error:
                self.log.warning("final_snapshot_failed", error=str(error))
        self.journal.close()

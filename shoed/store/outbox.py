"""The outbox: every event from the moment it is applied until the broker's PUBACK.

An event is in one of these places, in seq order:

    applied ──> unwritten (memory) ──> row in the journal ──> published mark on disk
        └─────> fresh (memory, for the publisher) ──> acked (PUBACK, `acked_seq`)

The publisher takes the fresh events when they follow the last published one without a
gap (the common case: no backlog, no journal read), nothing when every event it knows of
has its PUBACK (no journal read either), otherwise the oldest unpublished from the
journal followed by those still in memory. `acked(seq)` records a PUBACK; the rows
and the marks are written by the recorder's effect write, after the publish, where no
card waits. A crash before that write loses nothing: the record regenerates the events
(same seq and event_id) and the broker gets them again (consumers dedupe by event_id).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from shoed.store.journal import Journal
from shoed.store.statedir import StorageError

OUTBOX_BATCH = 256  # events read from the journal at once when catching up
FRESH_KEPT = 1024  # beyond this a backlog is read from the journal instead

Row = tuple[int, str]  # (seq, body)


class Outbox:
    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.unwritten: list[tuple[int, str, str, str]] = []  # (seq, event_id, type, body)
        self.fresh: list[Row] = []
        self.acked_seq = 0  # the newest event with a PUBACK (all before it have one)
        self.marked_seq = 0  # the newest event marked published on disk
        self.last_published = -1  # unknown until the outbox has been read once
        self.newest_seq = 0  # the newest event known, on disk or in memory
        self.published = 0  # PUBACKs in this run
        self.last_publish: float | None = None
        self.flush: Callable[[], bool] = lambda: True  # the recorder's effect write
        self.flush_soon: Callable[[], None] = lambda: None  # ... after PUBACKs (coalesced)
        self.on_ready: Callable[[], None] = lambda: None  # the publisher's wake-up

    # -- the recorder's side ------------------------------------------------------------

    def add(self, seq: int, event_id: str, type_: str, body: str) -> None:
        """An event just applied (in memory): for the journal's rows and the publisher."""
        self.unwritten.append((seq, event_id, type_, body))
        self.fresh.append((seq, body))
        self.newest_seq = seq

    def ready(self) -> None:
        """Events were added: wake the publisher."""
        del self.fresh[:-FRESH_KEPT]
        self.on_ready()

    def mark(self) -> tuple[int, int, int]:
        """Where memory stands now, for :meth:`rollback` (a failed durable step)."""
        return len(self.unwritten), len(self.fresh), self.newest_seq

    def rollback(self, mark: tuple[int, int, int]) -> None:
        del self.unwritten[mark[0]:]
        del self.fresh[mark[1]:]  # not handed over: the publisher runs only after the step
        self.newest_seq = mark[2]

    @property
    def dirty(self) -> bool:
        """Rows or marks are still to be written."""
        return bool(self.unwritten) or self.acked_seq > self.marked_seq

    def write_in_transaction(self) -> tuple[int, int]:
        """Inside a journal transaction: the unwritten rows (marked published when their
        PUBACK came first) and the publish marks. Returns what :meth:`written` forgets."""
        acked = self.acked_seq
        for seq, event_id, type_, body in self.unwritten:
            self.journal.add_event(seq, event_id, type_, body, published=seq <= acked)
        if acked > self.marked_seq:
            self.journal.mark_published(acked)
        return len(self.unwritten), acked

    def written(self, rows: int, marked: int) -> None:
        """After the commit of :meth:`write_in_transaction`."""
        del self.unwritten[:rows]
        self.marked_seq = max(self.marked_seq, marked)

    # -- the publisher's side -------------------------------------------------------------

    def take(self, limit: int = OUTBOX_BATCH) -> list[Row]:
        """The next events to publish, in seq order, oldest first (maybe none)."""
        fresh, self.fresh = self.fresh, []
        if fresh and fresh[0][0] == self.last_published + 1 and all(
                b[0] == a[0] + 1 for a, b in itertools.pairwise(fresh)):
            return fresh
        if not fresh and self.newest_seq <= self.last_published:
            return []  # everything known has its PUBACK: no journal read, no write
        self.flush()
        try:
            rows = self.journal.unpublished(limit)
            self.newest_seq = max(self.newest_seq, self.journal.event_range()[1])
        except StorageError:
            # What is on disk is unknown: sending the events in memory could put them
            # ahead of older unpublished ones (and their marks would cover those). Nothing
            # goes out until the journal can be read again (the publisher looks again).
            return []
        if len(rows) < limit:
            after = rows[-1][0] if rows else self.acked_seq
            rows += [(seq, body) for seq, _, _, body in self.unwritten if seq > after]
        return rows[:limit]

    def acked(self, seq: int) -> None:
        """Every event up to `seq` has its PUBACK (the publisher sends in order)."""
        self.published += max(0, seq - max(self.last_published, self.acked_seq))
        self.acked_seq = max(self.acked_seq, seq)
        self.last_published = max(self.last_published, seq)
        self.last_publish = time.time()
        self.flush_soon()

    def depth(self) -> int:
        """Events without a PUBACK, on disk or still in memory (-1: the journal cannot
        be read)."""
        acked = self.acked_seq
        try:
            on_disk = self.journal.outbox_depth(after_seq=acked)
        except StorageError:
            return -1
        return on_disk + sum(1 for row in self.unwritten if row[0] > acked)

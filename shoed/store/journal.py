"""The durable journal: SQLite in WAL mode with synchronous=FULL (fsync on every commit).

What it keeps: the inputs (so the engine can be replayed from the latest snapshot), the
events they produced (the outbox), the link's duplicate-detection state, command
answers, snapshots. The daemon ACKs the shoe only after the frame's inputs and the
dedup state are committed (fsynced), and answers a command only after its input, events
and answer are. Events derived from a recorded frame are written later, after their
publish, in a transaction of their own (they can be derived again). Events leave the
outbox (``published = 1``) only after the broker's PUBACK; published events stay for
`retention_days` for `replay`.
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import sqlite3
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from shoed.core.errors import ShoedError

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inputs (id INTEGER PRIMARY KEY, at REAL NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY, event_id TEXT NOT NULL UNIQUE, type TEXT NOT NULL,
    created REAL NOT NULL, body TEXT NOT NULL, published INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS events_unpublished ON events(published, seq);
CREATE TABLE IF NOT EXISTS snapshots (input_id INTEGER PRIMARY KEY, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS responses (
    request_id TEXT PRIMARY KEY, created REAL NOT NULL, body TEXT NOT NULL);
"""


# A commit adds a few 1 KiB pages to the WAL: this keeps it to a few MB, as SQLite's own
# default (a checkpoint at 1000 pages) would.
CHECKPOINT_EVERY_COMMITS = 1000


class StorageError(ShoedError):
    """The journal cannot be read or written; nothing may be acknowledged."""


def prepare_state_dir(path: pathlib.Path) -> None:
    """Create the state directory 0750, and refuse one that others may write to."""
    try:
        path.mkdir(mode=0o750, parents=True, exist_ok=True)
        mode = path.stat().st_mode
    except OSError as error:
        raise StorageError(f"state.dir {path}: {error.strerror}") from error
    if mode & stat.S_IWOTH:
        raise StorageError(f"state.dir {path} is world-writable (mode {stat.filemode(mode)}); "
                           f"refusing to keep the journal there: chmod o-w it")
    if os.statvfs(path).f_flag & os.ST_RDONLY:
        raise StorageError(f"state.dir {path} is on a read-only filesystem: nothing could be "
                           f"journalled, so nothing would be ACKed")
    if not os.access(path, os.W_OK | os.X_OK):
        raise StorageError(f"state.dir {path} is not writable by uid {os.geteuid()}")


class Journal:
    """The on-disk record. All methods raise StorageError on any storage failure."""

    def __init__(self, directory: pathlib.Path) -> None:
        prepare_state_dir(directory)
        self.path = directory / "journal.sqlite3"
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            os.chmod(self.path, 0o640)
            # 1 KiB pages (for a new journal; an existing one keeps its own): a card's
            # record is a few hundred bytes, and each page it touches is written to the
            # WAL and fsynced before the ACK. Measured: 0.48 ms per record against 0.66 ms
            # with 4 KiB pages (docs/performance.md).
            self._db.execute("PRAGMA page_size=1024")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            # No checkpoint inside a commit (SQLite's default every 1000 pages would copy
            # the WAL into the database inside whichever commit crosses it, a card's
            # record before its ACK among them): the daemon calls checkpoint_if_due() at
            # a moment when nothing waits.
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            self._db.execute("PRAGMA foreign_keys=ON")
            integrity = self._db.execute("PRAGMA quick_check").fetchone()[0]
            if integrity != "ok":
                raise StorageError(f"journal {self.path} is corrupt: {integrity}")
            self._db.executescript(SCHEMA)
        except sqlite3.Error as error:
            raise StorageError(f"journal {self.path}: {error}") from error
        self._in_tx = False
        self._commits_since_checkpoint = 0
        self.instance_id = self.meta("instance_id") or self._new_instance()

    def _new_instance(self) -> str:
        instance = secrets.token_hex(4)
        with self.transaction():
            self.set_meta("instance_id", instance)
        return instance

    def close(self) -> None:
        with suppress(sqlite3.Error):
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One atomic write, fsynced. Raises StorageError (and rolls back) on failure."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            self._in_tx = True
            yield
            self._db.execute("COMMIT")
            self._commits_since_checkpoint += 1
        except sqlite3.Error as error:
            self._rollback()
            raise StorageError(f"journal write failed: {error}") from error
        except BaseException:
            self._rollback()
            raise
        finally:
            self._in_tx = False

    def checkpoint_if_due(self, every: int = CHECKPOINT_EVERY_COMMITS) -> bool:
        """Copy the write-ahead log into the database once `every` commits have gone into
        it since the last time; True if a checkpoint ran. Raises StorageError on failure.

        PASSIVE, not TRUNCATE: the next commit writes the WAL from its start again, over
        blocks the file already has (a file growing anew after every checkpoint would
        make each commit's fsync also write the file's new size).
        """
        if self._commits_since_checkpoint < every or self._in_tx:
            return False
        self._run("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        self._commits_since_checkpoint = 0
        return True

    def _rollback(self) -> None:
        with suppress(sqlite3.Error):
            self._db.execute("ROLLBACK")

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, params)
        except sqlite3.Error as error:
            raise StorageError(f"journal: {error}") from error

    # -- meta ------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        row = self._run("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self._run("INSERT INTO meta(key, value) VALUES(?, ?) "
                  "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))

    # -- inputs, snapshots ---------------------------------------------------------------

    def add_input(self, at: float, body: str) -> int:
        cursor = self._run("INSERT INTO inputs(at, body) VALUES(?, ?)", (at, body))
        return int(cursor.lastrowid or 0)

    def save_snapshot(self, input_id: int, state: str) -> None:
        self._run("INSERT OR REPLACE INTO snapshots(input_id, state) VALUES(?, ?)",
                  (input_id, state))
        # Inputs before the previous snapshot are no longer needed to rebuild the state.
        row = self._run("SELECT input_id FROM snapshots WHERE input_id < ? "
                        "ORDER BY input_id DESC LIMIT 1", (input_id,)).fetchone()
        if row is not None:
            self._run("DELETE FROM snapshots WHERE input_id < ?", (row[0],))
            self._run("DELETE FROM inputs WHERE id <= ?", (row[0],))

    def latest_snapshot(self) -> tuple[int, str] | None:
        row = self._run("SELECT input_id, state FROM snapshots ORDER BY input_id DESC LIMIT 1"
                        ).fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def inputs_after(self, input_id: int) -> Iterator[tuple[int, str]]:
        cursor = self._run("SELECT id, body FROM inputs WHERE id > ? ORDER BY id", (input_id,))
        for row in cursor:
            yield int(row[0]), str(row[1])

    def last_input_id(self) -> int:
        row = self._run("SELECT MAX(id) FROM inputs").fetchone()
        return int(row[0] or 0)

    # -- events (the outbox) ----------------------------------------------------------------

    def add_event(self, seq: int, event_id: str, type_: str, body: str,
                  published: bool = False) -> None:
        """Put an event into the outbox (`published` when its PUBACK came before the row
        was written). OR IGNORE: replaying recorded inputs regenerates the same events
        (same seq and event_id); those already in the outbox stay as they are."""
        self._run("INSERT OR IGNORE INTO events(seq, event_id, type, created, body, published) "
                  "VALUES(?, ?, ?, ?, ?, ?)",
                  (seq, event_id, type_, time.time(), body, int(published)))

    def unpublished(self, limit: int = 256) -> list[tuple[int, str]]:
        rows = self._run("SELECT seq, body FROM events WHERE published = 0 ORDER BY seq LIMIT ?",
                         (limit,)).fetchall()
        return [(int(r[0]), str(r[1])) for r in rows]

    def outbox_depth(self, after_seq: int = 0) -> int:
        """Unpublished events, not counting those up to `after_seq` (acknowledged by the
        broker and not yet marked)."""
        return int(self._run("SELECT COUNT(*) FROM events WHERE published = 0 AND seq > ?",
                             (after_seq,)).fetchone()[0])

    def mark_published(self, up_to_seq: int) -> None:
        """Every event up to `up_to_seq` got its PUBACK (they are published in order).

        Written after the publish, with the outbox rows: a crash before that commit only
        means those events are published again, which consumers dedupe by event_id.
        """
        self._run("UPDATE events SET published = 1 WHERE published = 0 AND seq <= ?",
                  (up_to_seq,))

    def events_between(self, first: int, last: int | None, limit: int = 10_000) -> list[str]:
        last = last if last is not None else 2**62
        rows = self._run("SELECT body FROM events WHERE seq BETWEEN ? AND ? ORDER BY seq LIMIT ?",
                         (first, last, limit)).fetchall()
        return [str(r[0]) for r in rows]

    def event_range(self) -> tuple[int, int]:
        row = self._run("SELECT MIN(seq), MAX(seq) FROM events").fetchone()
        return int(row[0] or 0), int(row[1] or 0)

    def prune(self, retention_days: int, now: float) -> int:
        """Drop published events and command answers past retention (answers: >= 24 h)."""
        horizon = now - retention_days * 86400
        with self.transaction():
            cursor = self._run("DELETE FROM events WHERE published = 1 AND created < ? AND seq < "
                               "(SELECT MAX(seq) FROM events)", (horizon,))
            self._run("DELETE FROM responses WHERE created < ?",
                      (now - max(retention_days * 86400, 86400),))
        return int(cursor.rowcount)

    # -- command answers ----------------------------------------------------------------

    def response(self, request_id: str) -> dict[str, Any] | None:
        row = self._run("SELECT body FROM responses WHERE request_id = ?",
                        (request_id,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def add_response(self, request_id: str, body: dict[str, Any]) -> None:
        self._run("INSERT OR IGNORE INTO responses(request_id, created, body) VALUES(?, ?, ?)",
                  (request_id, time.time(), json.dumps(body)))

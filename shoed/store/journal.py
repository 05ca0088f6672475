"""The durable journal: SQLite in WAL mode with synchronous=FULL (fsync on every commit).

What it keeps: the inputs (so the engine can be replayed from the latest snapshot), the
events they produced (the outbox), the link's duplicate-detection state, command
answers, snapshots. The daemon ACKs the shoe only after the frame's inputs and the
dedup state are durable: one fdatasynced entry of the record log (`record`,
shoed/store/records.py), which the next transaction copies into the database before
anything else; it answers a command only after its input, events and answer are
committed (fsynced). Events derived from a recorded frame are written later, after their
publish, in a transaction of their own (they can be derived again). Events leave the
outbox (``published = 1``) only after the broker's PUBACK; published events stay for
`retention_days` for `replay`.

One daemon per journal: an exclusive `flock` on `journal.lock` in the state directory,
held for the journal's whole life, its holder's pid and start time written in it. A
journal that is damaged or foreign is refused (JournalDamaged, naming the file and the
problem) and never silently replaced by a new one; only `new_journal=True` (the
operator's `--new-journal`) moves the damaged files aside and starts a new journal with
a new instance id. What must be remembered across restarts is aged on the wall clock and
on an uptime kept here (shoed/store/uptime.py), and forgotten only when old by both.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import pathlib
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from .check import (
    DB_NAME,
    ID_NAME,
    LOCK_NAME,
    PREVIOUS_NAME,
    frames_lost,
    inspect_files,
    move_aside,
    read_wal_index,
    record_damage,
)
from .records import (
    NEWEST_INPUT_SQL,
    RECORDS_NAME,
    Entry,
    RecordLog,
    RecordLogError,
    not_in_database,
)
from .rowcheck import ROW_PROBLEMS, row_problems, text_crc
from .statedir import (
    JournalDamaged,
    JournalInUse,
    StorageError,
    failure_cause,
    lock_state_dir,
    prepare_state_dir,
    write_id,
)
from .uptime import Uptime

CACHE_KIB = 256  # SQLite's page cache per connection (its default: 2 000 KiB)

# The journal's schema, in `PRAGMA user_version`. 1: the first release (which left
# user_version at 0); 2: `created_up`, the uptime at which an event or answer was written;
# 3: answers keyed by (sender, request_id), with the command's fingerprint; 4: the link's
# dedup state on the input row of the frame that moved it (`inputs.dedup`), and the
# outbox index partial (only unpublished events are in it); 5: the record log
# (`journal.records`, shoed/store/records.py) in front of the database, which an older
# shoed would not read (so it refuses the journal rather than lose what is only there);
# 6: `crc` on every row's text (inputs, events, snapshots, answers): CRC-32 of its UTF-8,
# NULL on rows written before it (rowcheck.py).
SCHEMA_VERSION = 6

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS inputs (id INTEGER PRIMARY KEY, at REAL NOT NULL, body TEXT NOT NULL,
    dedup TEXT, crc INTEGER);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY, event_id TEXT NOT NULL UNIQUE, type TEXT NOT NULL,
    created REAL NOT NULL, body TEXT NOT NULL, published INTEGER NOT NULL DEFAULT 0,
    created_up REAL NOT NULL DEFAULT 0, crc INTEGER);
CREATE INDEX IF NOT EXISTS events_unpublished ON events(seq) WHERE published = 0;
CREATE TABLE IF NOT EXISTS snapshots (input_id INTEGER PRIMARY KEY, state TEXT NOT NULL,
    crc INTEGER);
CREATE TABLE IF NOT EXISTS responses (
    sender TEXT NOT NULL, request_id TEXT NOT NULL, fingerprint TEXT NOT NULL,
    created REAL NOT NULL, body TEXT NOT NULL, created_up REAL NOT NULL DEFAULT 0,
    crc INTEGER, PRIMARY KEY (sender, request_id)) WITHOUT ROWID;
"""
# From schema 1: rows written before it count as written at uptime 0, i.e. as old as
# they can be by that clock; the wall clock alone then decides, as it did.
MIGRATE_FROM_1 = """
ALTER TABLE events ADD COLUMN created_up REAL NOT NULL DEFAULT 0;
ALTER TABLE responses ADD COLUMN created_up REAL NOT NULL DEFAULT 0;
"""
# From schema 2: every answer so far came from the bare `{root}/cmd` (sender anonymous);
# their fingerprint is unknown (''), so a repeat gets the original answer, as it did.
MIGRATE_FROM_2 = """
CREATE TABLE responses_v3 (
    sender TEXT NOT NULL, request_id TEXT NOT NULL, fingerprint TEXT NOT NULL,
    created REAL NOT NULL, body TEXT NOT NULL, created_up REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (sender, request_id)) WITHOUT ROWID;
INSERT INTO responses_v3(sender, request_id, fingerprint, created, body, created_up)
    SELECT 'anonymous', request_id, '', created, body, created_up FROM responses;
DROP TABLE responses;
ALTER TABLE responses_v3 RENAME TO responses;
"""
# From schema 3: the dedup state so far is in meta (read as older than any input row's);
# the index is rebuilt with the unpublished events alone (one pass over the table at the
# first start, ~0.2 s for 300 000 events; docs/performance.md).
MIGRATE_FROM_3 = """
ALTER TABLE inputs ADD COLUMN dedup TEXT;
DROP INDEX IF EXISTS events_unpublished;
CREATE INDEX events_unpublished ON events(seq) WHERE published = 0;
"""
# From schema 5: the rows so far have no checksum (NULL: not checked); new rows have one.
MIGRATE_FROM_5 = """
ALTER TABLE inputs ADD COLUMN crc INTEGER;
ALTER TABLE events ADD COLUMN crc INTEGER;
ALTER TABLE snapshots ADD COLUMN crc INTEGER;
ALTER TABLE responses ADD COLUMN crc INTEGER;
"""

# A commit adds a few 1 KiB pages to the WAL: this keeps it to a few MB, as SQLite's own
# default (a checkpoint at 1000 pages) would.
CHECKPOINT_EVERY_COMMITS = 1000
# The uptime is written with the next commit once this old, and by save_uptime().
UPTIME_SAVE_EVERY_S = 5.0
REQUEST_MEMORY_S = 86400.0  # request_ids answered again for at least 24 h


def _previous(text: str | None) -> dict[str, Any] | None:
    """`previous_instance` as `replay` answers name it, {"instance", "last_seq",
    "more_possible"}, from the text kept in meta (which also says where it was moved,
    `moved_to`), or None."""
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("instance"), str):
        return None
    last = value.get("last_seq")
    last = last if isinstance(last, int) and not isinstance(last, bool) else None
    # more_possible: events after last_seq may have been published (decisions.md 213).
    # Unknown, so true, when the file is older than the field or last_seq is not known.
    more = value.get("more_possible")
    return {"instance": value["instance"], "last_seq": last,
            "more_possible": more if isinstance(more, bool) and last is not None else True}


@dataclass(frozen=True)
class Validated:
    """What validate() found in a journal that passed."""

    meta: dict[str, str]
    tables: set[str]
    version: int
    clean: bool  # its last stop closed it
    quick_checked: bool  # SQLite's check ran (quick, or full when asked)


def validate(path: pathlib.Path, full: bool = False) -> Validated:
    """Every check of an existing journal, on a read-only connection: closing it neither
    checkpoints nor deletes the log, so a refused journal is left as found. Raises
    JournalDamaged (or StorageError when it cannot be read at all). SQLite's quick_check
    runs when the last stop was not clean; `full`: its integrity_check, always."""
    directory = path.parent
    before = read_wal_index(path)  # the last writer's witness, before SQLite reads
    marker = directory / ID_NAME

    def damaged(*problems: str) -> JournalDamaged:
        return JournalDamaged(path, list(problems))

    try:
        db = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise StorageError(f"journal {path}: {failure_cause(error, directory)}") from error
    try:
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        # SQLite has now read the log (and rebuilt its index): did it keep it all?
        lost = frames_lost(path, before)
        if lost:
            record_damage(directory, lost)
            raise damaged(lost)
        if version > SCHEMA_VERSION:
            raise damaged(f"schema version {version} is newer than this shoed's "
                          f"({SCHEMA_VERSION}): the journal was written by a newer shoed; "
                          f"run that version, or start a new journal")
        tables = {str(r[0]) for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and not {"meta", "events", "inputs", "responses"} <= tables:
            raise damaged(f"an SQLite database but not a shoed journal (tables: "
                          f"{', '.join(sorted(tables))})")
        meta = ({str(k): str(v) for k, v in db.execute("SELECT key, value FROM meta")}
                if tables else {})
        instance = meta.get("instance_id")
        if marker.exists():
            recorded = marker.read_text().strip()
            if recorded != instance:
                raise damaged(
                    f"this directory held journal instance {recorded!r} ({marker}), but "
                    f"the journal there now is "
                    + (f"instance {instance!r}: a foreign journal" if instance
                       else "a new, empty one: the journal was replaced"))
        # (A log gone with its index after a crash cannot be told from SQLite's own
        # close, which checkpoints and deletes both: a process that ends without
        # close() still closes its connection. inspect_files() sees a log gone alone.)
        clean = meta.get("clean_stop")
        checked = bool(tables) and (full or clean != "1")
        if checked:
            # Not closed by its last writer (a crash, kill -9, power loss): SQLite's
            # quick check before anything is trusted (docs/reliability.md: its time).
            check = "integrity_check" if full else "quick_check"
            integrity = [str(r[0]) for r in db.execute(f"PRAGMA {check}(20)")]
            if integrity != ["ok"]:
                raise damaged(f"corrupt (SQLite's {check}): " + "; ".join(integrity))
        return Validated(meta, tables, version, clean == "1", checked)
    except sqlite3.OperationalError as error:
        raise StorageError(f"journal {path}: {failure_cause(error, directory)}") from error
    except sqlite3.DatabaseError as error:  # not a database, malformed, ...
        raise damaged(f"corrupt, or not a journal: {error}") from error
    except OSError as error:
        raise StorageError(f"journal {path}: {failure_cause(error, directory)}") from error
    finally:
        db.close()


class Journal:
    """The on-disk record. All methods raise StorageError on any storage failure.

    Opening it takes the state directory's lock and checks the journal (JournalDamaged
    if it is damaged, missing or foreign, unless `new_journal`: then the damaged files
    are moved aside, `moved_aside` says where and `damage` what was wrong, and a new
    journal is started). `wall` and `monotonic` are the clocks (injected by tests).
    """

    def __init__(self, directory: pathlib.Path, *, new_journal: bool = False,
                 wall: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        prepare_state_dir(directory)
        self.directory = directory
        self.path = directory / DB_NAME
        self._wall = wall
        self._monotonic = monotonic
        self._in_tx = False
        self._commits_since_checkpoint = 0
        self._db: sqlite3.Connection | None = None
        self._checking: sqlite3.Connection | None = None  # integrity_check's own
        self._uptime: Uptime | None = None
        self._uptime_saved_at = 0.0
        self._records: RecordLog | None = None
        self._pending: list[Entry] = []  # recorded in the log, not yet in the database
        self._next_input_id = 1
        self.moved_aside: pathlib.Path | None = None
        # the journal this one replaced, when it was moved aside here (_take_previous)
        self.previous_instance: dict[str, Any] | None = None
        self.damage: list[str] = []
        self.was_clean = False  # the last stop closed the journal (clean_stop = 1)
        self.quick_checked = False  # SQLite's quick_check ran at this open
        self.recovered_records = 0  # record log entries the database lacked at this open
        self._db_lock: int | None = None  # the flock on the database file (_lock_db)
        self._lock_fd: int | None = lock_state_dir(directory)
        try:
            try:
                self._open()
            except JournalDamaged as error:
                if not new_journal:
                    raise
                self.damage = error.problems
                self._set_aside(error)
                self._open()
            with self.transaction():  # with the record log's entries the database lacked
                self.set_meta("clean_stop", "0")
                self._uptime_after_inputs()
                self._save_uptime()
            self._reuse_records()  # what the file held is in the database now
        except BaseException:
            self._close_db()
            self._unlock()
            raise

    @property
    def uptime(self) -> Uptime:
        """The uptime accumulated across runs (shoed/store/uptime.py): engine inputs carry
        `mono=journal.uptime.now()`."""
        assert self._uptime is not None
        return self._uptime

    def _damaged(self, *problems: str) -> JournalDamaged:
        return JournalDamaged(self.path, list(problems))

    def _set_aside(self, error: Exception) -> None:
        """Move the journal's files aside (the operator's --new-journal), the database's
        flock held until they are moved: nobody opens them meanwhile."""
        held, self._db_lock = self._db_lock, None
        self._close_db()
        try:
            self.moved_aside = move_aside(self.directory)
        except OSError as move_error:
            raise StorageError(f"journal {self.path} is damaged and could not be moved "
                               f"aside: {move_error}") from error
        finally:
            if held is not None:
                os.close(held)

    def set_aside(self, problem: str) -> pathlib.Path | None:
        """A journal found damaged after it was opened (Recorder.open): the damage
        recorded, its files moved aside (as --new-journal does at the open), both locks
        released. Returns where they went."""
        with suppress(OSError):
            record_damage(self.directory, problem)
        self._set_aside(self._damaged(problem))
        self._unlock()
        return self.moved_aside

    def _release_db_lock(self) -> None:
        if self._db_lock is not None:
            os.close(self._db_lock)  # the flock goes with it
            self._db_lock = None

    def _lock_db(self) -> None:
        """An exclusive flock on the database file itself, held while it is open: the
        state directory's lock file can be removed or replaced while a daemon runs
        (outside review: a second daemon then opened the same journal). SQLite's own
        locks are POSIX locks, which flock does not touch."""
        if self._db_lock is not None or not self.path.exists():
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as error:
            raise StorageError(f"journal {self.path}: {error.strerror}") from error
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise JournalInUse(f"journal {self.path} is open in another shoed (the lock "
                               f"file {self.directory / LOCK_NAME} was removed or replaced "
                               f"while it ran): only one daemon may run per journal"
                               ) from None
        self._db_lock = fd

    def _open(self) -> None:
        # Before anything reads it or finds it damaged: another daemon may be writing it,
        # and a journal found damaged may be moved aside (outside review).
        self._lock_db()
        problems = inspect_files(self.path)
        if problems:
            raise self._damaged(*problems)
        existed = self.path.exists()
        if existed and self.path.stat().st_size == 0:
            raise self._damaged(f"{self.path} is empty (0 bytes): truncated")
        marker = self.directory / ID_NAME
        meta: dict[str, str] = {}
        tables: set[str] = set()
        version = SCHEMA_VERSION
        if existed:
            meta, tables, version = self._validate()
        elif marker.exists():
            raise self._damaged(f"the database is missing but {marker} says this directory "
                                f"held a journal: it was deleted or moved")
        try:
            self._db = db = sqlite3.connect(self.path, isolation_level=None,
                                            check_same_thread=False)
            self._lock_db()  # a new journal: its file is there now
            os.chmod(self.path, 0o640)
            # 1 KiB pages (for a new journal; an existing one keeps its own): a card's
            # record is a few hundred bytes, and each page it touches is written to the
            # WAL and fsynced before the ACK. Measured: 0.48 ms per record against 0.66 ms
            # with 4 KiB pages (docs/performance.md).
            db.execute("PRAGMA page_size=1024")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            # No checkpoint inside a commit (SQLite's default every 1000 pages would copy
            # the WAL into the database inside whichever commit crosses it, a card's
            # record before its ACK among them): the daemon calls checkpoint_if_due() at
            # a moment when nothing waits.
            db.execute("PRAGMA wal_autocheckpoint=0")
            db.execute("PRAGMA foreign_keys=ON")
            # A small page cache: the journal is written at its end and read back only
            # by a replay or a catch-up (SQLite's default 2 MB cache is most of what RSS
            # grows by over a day's dealing; docs/performance.md).
            db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            if not tables:
                db.executescript(SCHEMA)
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            elif version < SCHEMA_VERSION:
                steps = ((MIGRATE_FROM_1 if version < 2 else "")
                         + (MIGRATE_FROM_2 if version < 3 else "")
                         + (MIGRATE_FROM_3 if version < 4 else "")
                         + (MIGRATE_FROM_5 if version < 6 else ""))
                db.executescript(f"BEGIN; {steps} "
                                 f"PRAGMA user_version={SCHEMA_VERSION}; COMMIT;")
        except (sqlite3.Error, OSError) as error:
            raise StorageError(f"journal {self.path}: "
                               f"{failure_cause(error, self.directory)}") from error
        try:
            base = max(0.0, float(meta.get("uptime", "0")))
        except ValueError:
            base = 0.0
        self._uptime = Uptime(base, self._monotonic)
        self._uptime_saved_at = self._monotonic()
        self.instance_id = meta.get("instance_id") or self._new_instance()
        self.previous_instance = _previous(meta.get("previous_instance")) if tables \
            else self._take_previous()
        if not marker.exists():
            write_id(self.directory, self.instance_id)
        self._open_records(meta)

    def _open_records(self, meta: dict[str, str]) -> None:
        """Open the record log and take in what the database lacks of it (a stop that was
        not clean, after an ACK): those entries are written by the first transaction,
        the one that follows in __init__."""
        path = self.directory / RECORDS_NAME
        if meta.get("records") != "1":
            # No record was ever written to it (`records` is committed before the first):
            # whatever is there (a start that died while making it) holds nothing.
            with suppress(FileNotFoundError):
                path.unlink()
        elif not self.was_clean and (not path.exists() or path.stat().st_size == 0):
            raise self._damaged(
                f"the record log {path} is missing or empty after a stop that was not "
                f"clean: frames the shoe was told were recorded may be gone")
        try:
            self._records = RecordLog(path, self.instance_id)
            os.chmod(path, 0o640)
        except RecordLogError as error:
            raise self._damaged(str(error)) from error
        except OSError as error:
            raise StorageError(f"record log {path}: "
                               f"{failure_cause(error, path.parent)}") from error
        row = self._run(NEWEST_INPUT_SQL).fetchone()
        newest = max(int(row[0] or 0), int(row[1] or 0))
        self._pending = not_in_database(self._records.entries, newest)
        self._next_input_id = max([newest] + [e.last_id for e in self._pending]) + 1
        self.recovered_records = len(self._pending)
        if meta.get("records") != "1":
            with self.transaction():
                self.set_meta("records", "1")

    def _validate(self) -> tuple[dict[str, str], set[str], int]:
        found = validate(self.path)
        self.was_clean, self.quick_checked = found.clean, found.quick_checked
        return found.meta, found.tables, found.version

    def _new_instance(self) -> str:
        instance = secrets.token_hex(4)
        with self.transaction():
            self.set_meta("instance_id", instance)
        return instance

    def _take_previous(self) -> dict[str, Any] | None:
        """A new journal after one moved aside: what that one held (move_aside() left it
        beside), kept in meta for as long as this journal lives (`previous_instance` in
        the answers of `replay`: a consumer behind on the old journal learns what it
        missed, decisions.md 209). Returns it, or None."""
        path = self.directory / PREVIOUS_NAME
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise StorageError(f"journal: {failure_cause(error, self.directory)}") from error
        previous = _previous(text)
        if previous is not None:
            with self.transaction():
                self.set_meta("previous_instance", text)
        with suppress(FileNotFoundError):
            path.unlink()
        return previous

    def _close_db(self) -> None:
        if self._records is not None:
            self._records.close()
            self._records = None
        self._release_db_lock()
        if self._db is not None:
            with suppress(sqlite3.Error):
                self._db.close()
            self._db = None

    def _unlock(self) -> None:
        """Both locks go (as the kernel drops them when the process dies)."""
        self._release_db_lock()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # the flock goes with it
            self._lock_fd = None

    def close(self, clean: bool = True) -> None:
        """Close the journal and release the state directory's lock. `clean`: record a
        clean stop (the next start then skips the quick check) and the uptime."""
        if clean and self._db is not None and not self._in_tx:
            with suppress(StorageError), self.transaction():
                self.set_meta("uptime", repr(self.uptime.now()))
                self.set_meta("clean_stop", "1")
        self._close_db()
        checking = self._checking
        if checking is not None:  # a background integrity check: stop it now
            with suppress(sqlite3.Error):
                checking.interrupt()
        self._unlock()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One atomic write, fsynced. Raises StorageError (and rolls back) on failure.

        Carries the uptime with it when the saved one is UPTIME_SAVE_EVERY_S old.

        Every commit is fsynced, also those that could be derived again: the wal-index
        (`-shm`) then never counts a frame that is not on disk, which is what lets
        check.frames_lost() tell a damaged log from a power cut (docs/performance.md,
        "tried and not kept").

        The record log's entries not yet in the database go in first; once it commits,
        the log's space is reused."""
        next_input_id = self._next_input_id
        flushed = len(self._pending)
        try:
            self._conn().execute("BEGIN IMMEDIATE")
            self._in_tx = True
            if flushed:
                self._write_pending()
            yield
            if (self._uptime is not None
                    and self._monotonic() - self._uptime_saved_at >= UPTIME_SAVE_EVERY_S):
                self._save_uptime()
            self._conn().execute("COMMIT")
            self._commits_since_checkpoint += 1
        except sqlite3.Error as error:
            self._rollback()
            self._next_input_id = next_input_id
            raise StorageError(f"journal write failed: "
                               f"{failure_cause(error, self.directory)}") from error
        except BaseException:
            self._rollback()
            self._next_input_id = next_input_id
            raise
        finally:
            self._in_tx = False
        if flushed:
            del self._pending[:flushed]
            if not self._pending:
                self._reuse_records()

    def _reuse_records(self) -> None:
        """After a commit that holds every entry: the log is written from its start again.
        A failure to zero its first header is not the commit's (that is durable): at
        worst a start reads entries again that the database has, and skips them by id;
        the next record's own write reports a failing disk."""
        if self._records is not None:
            with suppress(OSError):
                self._records.reuse()

    def _write_pending(self) -> None:
        """The record log's entries into the database: input rows with their ids, the
        dedup state on each frame's last (in meta for a frame without inputs, the last)."""
        rows: list[tuple[int, float, str, str | None, int]] = []
        for entry in self._pending:
            last = len(entry.inputs) - 1
            rows += [(input_id, at, body, entry.dedup if k == last else None, text_crc(body))
                     for k, (input_id, at, body) in enumerate(entry.inputs)]
        # Inside transaction(), which turns an sqlite3.Error into StorageError.
        self._conn().executemany(
            "INSERT INTO inputs(id, at, body, dedup, crc) VALUES(?, ?, ?, ?, ?)", rows)
        tail = self._pending[-1]
        if not tail.inputs:
            self.set_dedup(tail.dedup, after=tail.after)

    @property
    def pending(self) -> int:
        """Entries of the record log the database does not hold yet."""
        return len(self._pending)

    def record(self, inputs: list[tuple[float, str]], dedup: str) -> list[int]:
        """A device frame's record, before its ACK: its inputs ((at, body), in order) and
        the link's dedup state, as one entry of the record log, written and fdatasynced;
        their ids. The next transaction copies it into the database. Raises
        StorageError (nothing recorded) when it cannot be written."""
        if self._in_tx or self._records is None:
            raise StorageError("journal: a record cannot be written inside a transaction "
                               "or with the journal closed")
        first = self._next_input_id
        rows = tuple((first + k, at, body) for k, (at, body) in enumerate(inputs))
        try:
            self._records.append(rows, first - 1, dedup)
        except OSError as error:
            raise StorageError(f"record log {self._records.path}: "
                               f"{failure_cause(error, self._records.path.parent)}"
                               ) from error
        self._next_input_id = first + len(rows)
        self._pending.append(Entry(rows, first - 1, dedup))
        return [row[0] for row in rows]

    def _uptime_after_inputs(self) -> None:
        """A kill -9 loses the uptime not yet saved (up to UPTIME_SAVE_EVERY_S), but the
        inputs recorded meanwhile carry their reading of it (`mono`): the clock goes on
        from the newest one, so that a duration begun before the kill and ended after it
        (the 3 s pull timeout) is not stretched by what was lost. Called inside the open's
        transaction, which has taken in the record log's entries and saves the uptime."""
        row = self._run("SELECT body FROM inputs ORDER BY id DESC LIMIT 1").fetchone()
        try:
            mono = json.loads(row[0]).get("mono") if row is not None else None
        except (ValueError, AttributeError):  # not an input's JSON: nothing to go on
            return
        if isinstance(mono, int | float) and math.isfinite(mono) and mono > self.uptime.now():
            self._uptime = Uptime(float(mono), self._monotonic)

    def _save_uptime(self) -> None:
        if self._uptime is not None:
            self.set_meta("uptime", repr(self._uptime.now()))
            self._uptime_saved_at = self._monotonic()

    def save_uptime(self) -> bool:
        """Write the uptime (fsynced) if the saved one is UPTIME_SAVE_EVERY_S old; the
        shell calls it every few seconds, so that a kill -9 loses at most that much of
        it. True if it wrote."""
        if self._in_tx or self._monotonic() - self._uptime_saved_at < UPTIME_SAVE_EVERY_S:
            return False
        with self.transaction():
            self._save_uptime()
        return True

    def integrity_check(self) -> list[str]:
        """SQLite's full integrity check on a connection of its own, read-only: safe to
        run in a thread while the daemon writes (the shell runs it in the background
        after READY). Returns the problems (empty: ok); a problem found is recorded in
        `journal.damaged`, so that the next start refuses the journal."""
        try:
            conn = sqlite3.connect(self.path.resolve().as_uri() + "?mode=ro", uri=True,
                                   check_same_thread=False)
        except sqlite3.Error as error:
            return [f"cannot open for the check: {error}"]
        self._checking = conn
        try:
            conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            found = [str(r[0]) for r in conn.execute("PRAGMA integrity_check(20)")]
            if found == ["ok"]:
                rows = row_problems(conn)
                found = [rows] if rows is not None else found
        except sqlite3.OperationalError as error:
            if self._db is None:  # interrupted by close(): nothing was found
                return []
            found = [str(error)]
        except sqlite3.DatabaseError as error:
            found = [str(error)]
        finally:
            self._checking = None
            conn.close()
        if found == ["ok"]:
            return []
        with suppress(OSError):
            record_damage(self.directory, ("" if found[0].startswith(ROW_PROBLEMS)
                                           else "corrupt (SQLite's integrity_check): ")
                          + "; ".join(found))
        return found

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

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise sqlite3.ProgrammingError("the journal is closed")
        return self._db

    def _rollback(self) -> None:
        with suppress(sqlite3.Error):
            self._conn().execute("ROLLBACK")

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        try:
            return self._conn().execute(sql, params)
        except sqlite3.Error as error:
            raise StorageError(f"journal: {failure_cause(error, self.directory)}") from error

    # -- meta ------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        row = self._run("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self._run("INSERT INTO meta(key, value) VALUES(?, ?) "
                  "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, value))

    # -- inputs, snapshots ---------------------------------------------------------------

    def add_input(self, at: float, body: str, dedup: str | None = None) -> int:
        """An input (in a transaction), after every recorded one; `dedup`: the link's
        dedup state after the frame it came from (on the frame's last input), in the
        same row: one page fewer than with it in meta (docs/performance.md)."""
        input_id = self._next_input_id
        self._run("INSERT INTO inputs(id, at, body, dedup, crc) VALUES(?, ?, ?, ?, ?)",
                  (input_id, at, body, dedup, text_crc(body)))
        self._next_input_id = input_id + 1
        return input_id

    def set_dedup(self, dedup: str, after: int | None = None) -> None:
        """The dedup state when a frame brought no input: in meta, with the id of the input
        it follows (`after`, by default the newest; an input row after it is newer)."""
        self.set_meta("dedup", json.dumps([self.last_input_id() if after is None else after,
                                           dedup]))

    def _newest_dedup_row(self) -> tuple[int, str] | None:
        """The newest input row carrying a dedup state: (id, state)."""
        row = self._run("SELECT id, dedup FROM inputs WHERE dedup IS NOT NULL "
                        "ORDER BY id DESC LIMIT 1").fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def dedup(self) -> str | None:
        """The newest dedup state recorded: the record log's not yet in the database, an
        input row's, or meta's when that is newer."""
        if self._pending:
            return self._pending[-1].dedup
        row = self._newest_dedup_row()
        kept = self.meta("dedup")
        if kept is not None:
            value = json.loads(kept)
            # schema 3 and before: the state itself ([boot_id, last_seq]), older than
            # any input row's; since 4: [input id it follows, state].
            after, state = (value[0], value[1]) if len(value) == 2 and isinstance(
                value[1], str) else (-1, kept)
            if row is None or int(after) >= row[0]:
                return str(state)
        return None if row is None else row[1]

    def save_snapshot(self, input_id: int, state: str) -> None:
        self._run("INSERT OR REPLACE INTO snapshots(input_id, state, crc) VALUES(?, ?, ?)",
                  (input_id, state, text_crc(state)))
        # Inputs before the previous snapshot are no longer needed to rebuild the state.
        row = self._run("SELECT input_id FROM snapshots WHERE input_id < ? "
                        "ORDER BY input_id DESC LIMIT 1", (input_id,)).fetchone()
        if row is not None:
            newest = self._newest_dedup_row()
            if newest is not None and newest[0] <= row[0]:  # it goes: keep it in meta
                kept = self.dedup()
                if kept is not None:
                    self.set_meta("dedup", json.dumps([newest[0], kept]))
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
        """The newest input's id (in the record log or the database)."""
        return self._next_input_id - 1

    # -- events (the outbox) ----------------------------------------------------------------

    def add_event(self, seq: int, event_id: str, type_: str, body: str,
                  published: bool = False) -> None:
        """Put an event into the outbox (`published` when its PUBACK came before the row
        was written). OR IGNORE: replaying recorded inputs regenerates the same events
        (same seq and event_id); those already in the outbox stay as they are."""
        self._run("INSERT OR IGNORE INTO events(seq, event_id, type, created, body, published, "
                  "created_up, crc) VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                  (seq, event_id, type_, self._wall(), body, int(published),
                   self.uptime.now(), text_crc(body)))

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

    def event_rows_between(self, first: int, last: int, limit: int) -> list[tuple[int, str]]:
        rows = self._run("SELECT seq, body FROM events WHERE seq BETWEEN ? AND ? ORDER BY seq "
                         "LIMIT ?", (first, last, limit)).fetchall()
        return [(int(r[0]), str(r[1])) for r in rows]

    def event_range(self) -> tuple[int, int]:
        # Two subqueries: each is one b-tree lookup (MIN and MAX together scan the table:
        # 14 ms for 100 000 events against 0.02 ms).
        row = self._run("SELECT (SELECT MIN(seq) FROM events), (SELECT MAX(seq) FROM events)"
                        ).fetchone()
        return int(row[0] or 0), int(row[1] or 0)

    def prune(self, retention_days: int, now: float | None = None,
              answers_s: float = REQUEST_MEMORY_S, limit: int | None = None) -> int:
        """Drop published events past retention, and command answers past retention or
        `answers_s` (`[commands] request_id_memory_h`, at least 24 h), whichever is longer;
        the newest event always stays. `limit`: at most that many events, the oldest,
        and as many answers (the daemon prunes in such batches, so that no card waits
        for a long delete).

        Old means old by both clocks: the wall clock (`now`, by default the journal's)
        and the uptime accumulated across runs. A step of the wall clock either way
        never forgets anything too early; time the daemon was not running does not age
        anything by the uptime (kept longer, never shorter).

        Only a run of the oldest is dropped: the first event that must stay keeps all
        after it (a wall clock stepped back, or the uptime resumed from its last save
        after a crash, can make a later event look older than one before it). So the
        events kept are always one gapless run of seqs, and a `replay` page is counted
        from its ends (the desk's `_replay`)."""
        wall = self._wall() if now is None else now
        up = self.uptime.now()
        keep = retention_days * 86400.0
        answers = max(keep, answers_s, REQUEST_MEMORY_S)
        with self.transaction():
            first, last = self.event_range()
            # Only the batch's window is looked at (a backlog is not scanned again for
            # every batch): the first event in it that must stay, else the window's end.
            end = last + 1 if limit is None else min(first + limit, last + 1)
            stays = self._run(
                "SELECT MIN(seq) FROM events WHERE seq >= ? AND seq < ? AND "
                "NOT (published = 1 AND created < ? AND created_up < ?)",
                (first, end, wall - keep, up - keep)).fetchone()[0]
            bound = min(end if stays is None else int(stays), last)  # the newest stays
            cursor = self._run("DELETE FROM events WHERE seq < ?", (bound,))
            self._run("DELETE FROM responses WHERE (sender, request_id) IN (SELECT sender, "
                      "request_id FROM responses WHERE created < ? AND created_up < ? "
                      "LIMIT ?)", (wall - answers, up - answers, -1 if limit is None else limit))
        return int(cursor.rowcount)

    # -- command answers ----------------------------------------------------------------

    def response(self, sender: str, request_id: str) -> tuple[str, dict[str, Any]] | None:
        """The remembered answer to (sender, request_id) and the fingerprint of the command
        it answered ('' when unknown: written before fingerprints were kept)."""
        row = self._run("SELECT fingerprint, body FROM responses WHERE sender = ? AND "
                        "request_id = ?", (sender, request_id)).fetchone()
        return None if row is None else (str(row[0]), dict(json.loads(row[1])))

    def add_response(self, sender: str, request_id: str, fingerprint: str,
                     body: dict[str, Any]) -> None:
        text = json.dumps(body)
        self._run("INSERT OR IGNORE INTO responses(sender, request_id, fingerprint, created, "
                  "body, created_up, crc) VALUES(?, ?, ?, ?, ?, ?, ?)",
                  (sender, request_id, fingerprint, self._wall(), text, self.uptime.now(),
                   text_crc(text)))

"""What can be told about a journal from its files alone, before SQLite touches them.

SQLite is forgiving where a casino must not be: it opens a missing database as a new empty
one (next to the write-ahead log of the one that was deleted), and it silently drops the
tail of a write-ahead log that was truncated or damaged (the transactions in it, committed
and fsynced, each one perhaps a card that was ACKed, are gone without a word). The first
connection to open a journal also rebuilds its `-shm` index from the log, which erases the
only witness of how much the last writer had committed. So these checks read the files
themselves, first:

* the database missing while its `-wal`, its `-shm` or the state directory's
  `journal.id` (written when the journal was created) shows that it existed;
* the `-shm` index of the last writer (left by any stop that was not clean) against the
  log: the log's salt must be the one the writer used, and the log must hold every frame
  the writer had committed, its last one a commit frame of the same salt;
* `journal.damaged`, written when damage was found that the files can no longer show
  (SQLite's recovery has run): the refusal stays until the operator acts.

`check_journal` is `shoed check-journal PATH`: these checks, then SQLite's full
integrity check, read-only.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
import sqlite3
import struct
from dataclasses import dataclass

from .records import NEWEST_INPUT_SQL, RECORDS_NAME, Entry, RecordLogError, not_in_database
from .records import inspect as inspect_records

DB_NAME = "journal.sqlite3"
ID_NAME = "journal.id"  # the instance id of the journal this directory holds
DAMAGED_NAME = "journal.damaged"  # a refusal that must outlive SQLite's recovery
# What a journal moved aside held (its instance, its last event's seq, whether more may
# have followed), for the journal that replaces it: written by move_aside(), taken into
# the new journal's meta.
PREVIOUS_NAME = "journal.previous"
LOCK_NAME = "journal.lock"

WAL_MAGIC = (0x377F0682, 0x377F0683)
WAL_HEADER = 32
FRAME_HEADER = 24
SHM_VERSION = 3007000


@dataclass(frozen=True)
class WalIndex:
    """The `-shm` header of the last writer: what it had committed to the log."""

    max_frame: int
    page_size: int
    salt: bytes


def wal_path(db: pathlib.Path) -> pathlib.Path:
    return db.with_name(db.name + "-wal")


def shm_path(db: pathlib.Path) -> pathlib.Path:
    return db.with_name(db.name + "-shm")


def read_wal_index(db: pathlib.Path) -> WalIndex | None:
    """The header of the `-shm` file (SQLite's wal-index), or None if there is none that
    can be trusted (missing, short, its two copies differ, not initialised)."""
    try:
        with open(shm_path(db), "rb") as f:
            data = f.read(96)
    except OSError:
        return None
    if len(data) < 96 or data[:48] != data[48:96]:
        return None
    version, _, _, is_init, _, page, max_frame, _ = struct.unpack("=IIIBBHII", data[:24])
    if version != SHM_VERSION or not is_init:
        return None
    return WalIndex(max_frame, 65536 if page == 1 else page, data[32:40])


def _size(path: pathlib.Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def inspect_files(db: pathlib.Path) -> list[str]:
    """Problems the journal's files show by themselves (empty: none seen). Reads only."""
    directory = db.parent
    problems: list[str] = []
    damaged = directory / DAMAGED_NAME
    if damaged.exists():
        try:
            text = damaged.read_text(errors="replace").strip()
        except OSError as error:
            text = f"({error.strerror})"
        problems.append(f"found damaged before and not yet dealt with ({damaged}): {text}")
    wal, shm, marker = wal_path(db), shm_path(db), directory / ID_NAME
    wal_size, shm_size = _size(wal), _size(shm)
    if not db.exists() and not db.is_symlink():
        if wal_size is not None:
            problems.append(f"the database {db} is missing but its write-ahead log {wal} "
                            f"({wal_size} bytes) is there: the journal was deleted or moved")
        elif shm_size is not None:
            problems.append(f"the database {db} is missing but its index {shm} is there: "
                            f"the journal was deleted or moved")
        elif marker.exists():
            problems.append(f"the database {db} is missing but {marker} says this directory "
                            f"held journal instance {_read_id(marker)!r}: it was deleted "
                            f"or moved")
        return problems
    if db.is_dir():
        problems.append(f"{db} is a directory, not a journal")
        return problems
    index = read_wal_index(db)
    if index is None or index.max_frame == 0:
        return problems
    # A stop that was not clean left the last writer's index: the log must match it.
    if wal_size is None:
        problems.append(f"the write-ahead log {wal} is missing, yet the last writer had "
                        f"committed {index.max_frame} frame(s) to it: committed "
                        f"transactions are gone")
        return problems
    frame = FRAME_HEADER + index.page_size
    needed = WAL_HEADER + index.max_frame * frame
    try:
        with open(wal, "rb") as f:
            header = f.read(WAL_HEADER)
            f.seek(WAL_HEADER + (index.max_frame - 1) * frame)
            last = f.read(FRAME_HEADER)
    except OSError as error:
        problems.append(f"the write-ahead log {wal} cannot be read: {error.strerror}")
        return problems
    if len(header) < WAL_HEADER or struct.unpack(">I", header[:4])[0] not in WAL_MAGIC:
        problems.append(f"the write-ahead log {wal} has no valid header ({wal_size} bytes): "
                        f"it was truncated or overwritten; the last writer had committed "
                        f"{index.max_frame} frame(s) to it")
    elif header[16:24] != index.salt:
        problems.append(f"the write-ahead log {wal} is not the one the last writer used "
                        f"(its salt differs): replaced or overwritten")
    elif wal_size < needed:
        problems.append(f"the write-ahead log {wal} is truncated: {wal_size} bytes, but the "
                        f"last writer had committed {index.max_frame} frame(s) "
                        f"({needed} bytes): committed transactions would be lost")
    elif (len(last) < FRAME_HEADER or last[8:16] != index.salt
          or struct.unpack(">I", last[4:8])[0] == 0):
        problems.append(f"the write-ahead log {wal} is damaged: frame {index.max_frame}, "
                        f"the last writer's last commit, is not there")
    return problems


def _holder(directory: pathlib.Path) -> int | None:
    """The pid written in `journal.lock` if that process is alive (a hint only: the
    lock itself is not taken, so a daemon starting now is never refused)."""
    try:
        pid = int(json.loads((directory / LOCK_NAME).read_text())["pid"])
        os.kill(pid, 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid


def _read_id(marker: pathlib.Path) -> str:
    try:
        return marker.read_text().strip()
    except OSError:
        return "?"


def frames_lost(db: pathlib.Path, before: WalIndex | None) -> str | None:
    """After SQLite has opened the journal and read it (its recovery rebuilt the index
    from the log): the problem if it kept fewer frames than the last writer had
    committed, i.e. frames in the middle of the log failed their checksums."""
    if before is None or before.max_frame == 0:
        return None
    after = read_wal_index(db)
    if after is None or after.salt != before.salt or after.max_frame >= before.max_frame:
        return None
    return (f"the write-ahead log {wal_path(db)} is damaged: SQLite could read "
            f"{after.max_frame} of the {before.max_frame} frame(s) the last writer had "
            f"committed; committed transactions would be lost")


def record_damage(directory: pathlib.Path, problem: str) -> None:
    """Write `journal.damaged` (fsynced): the refusal outlives what SQLite repaired."""
    path = directory / DAMAGED_NAME
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    with open(path, "a") as f:
        f.write(f"{stamp} {problem}\n")
        f.flush()
        os.fsync(f.fileno())


def move_aside(directory: pathlib.Path) -> pathlib.Path | None:
    """Move the journal's files (database, log, index, record log, id, damage record) into a new
    `damaged-<UTC time>` directory beside them; never delete. Returns where (None if
    there was nothing to move)."""
    names = [DB_NAME, DB_NAME + "-wal", DB_NAME + "-shm", RECORDS_NAME, ID_NAME,
             DAMAGED_NAME]
    present = [n for n in names if (directory / n).exists() or (directory / n).is_symlink()]
    if not present:
        return None
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    target = directory / f"damaged-{stamp}"
    target.mkdir(mode=0o750)
    for name in present:
        os.rename(directory / name, target / name)
    previous = directory / PREVIOUS_NAME
    previous.write_text(json.dumps({**journal_end(target), "moved_to": str(target)}))
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return target


def _newest_input(conn: sqlite3.Connection) -> int:
    """The newest input id the journal's database has held (records.NEWEST_INPUT_SQL)."""
    return max(int(v or 0) for v in conn.execute(NEWEST_INPUT_SQL).fetchone())


def _records_waiting(directory: pathlib.Path, instance: str | None, newest: int
                     ) -> list[Entry]:
    """The entries of the record log in `directory` (read only) that a database whose
    newest input id is `newest` lacks; RecordLogError when it is not `instance`'s."""
    return not_in_database(inspect_records(directory / RECORDS_NAME, instance), newest)


def journal_end(directory: pathlib.Path) -> dict[str, object]:
    """The instance of the journal in `directory`, its last event's seq and whether more
    may have followed, as far as its files can be read (None where they cannot: a damaged
    journal may not be). The seq is of the events in its database; after a crash, events
    made from its record log's inputs may have been published and not written there
    (decisions.md 137): `more_possible` is true then, and when the record log cannot be
    read (decisions.md 213)."""
    instance: str | None = None
    with_id = directory / ID_NAME
    if with_id.exists() and _read_id(with_id) not in ("", "?"):
        instance = _read_id(with_id)
    last: int | None = None
    newest: int | None = None
    db = directory / DB_NAME
    if db.exists():
        try:
            conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
            try:
                row = conn.execute("SELECT value FROM meta WHERE key = 'instance_id'"
                                   ).fetchone()
                instance = str(row[0]) if row else instance
                last = int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM events"
                                        ).fetchone()[0])
                newest = _newest_input(conn)
            finally:
                conn.close()
        except (sqlite3.Error, ValueError, TypeError):
            pass
    more = True  # nothing can be said after an unknown last seq, nor of a foreign log
    if last is not None and newest is not None:
        try:
            more = any(entry.inputs for entry in _records_waiting(directory, instance, newest))
        except RecordLogError:
            more = True
    return {"instance": instance, "last_seq": last, "more_possible": more}


def check_journal(path: pathlib.Path) -> tuple[bool, list[str]]:
    """`shoed check-journal PATH` (the journal file or its state directory): (ok, lines).

    Every check a start makes, and SQLite's full integrity check, on a read-only
    connection. Writes nothing but `journal.damaged` when it finds damage that the files
    would no longer show afterwards. Safe while the daemon runs.
    """
    from .journal import validate
    from .rowcheck import row_problems
    from .statedir import StorageError

    db = path / DB_NAME if path.is_dir() else path
    if not os.access(db.parent, os.R_OK | os.X_OK):
        raise PermissionError(13, "Permission denied: this user may not read the state "
                              "directory", str(db.parent))
    problems = inspect_files(db)
    if problems:
        return False, problems
    if not db.exists():
        return False, [f"{db}: no journal there"]
    if db.stat().st_size == 0:
        return False, [f"{db} is empty (0 bytes): truncated"]
    try:
        found = validate(db, full=True)
    except StorageError as error:
        return False, [str(error)]
    if not found.tables:
        return False, [f"{db} is an empty database, not a journal"]
    try:
        conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            rows = row_problems(conn)
            low, high = conn.execute("SELECT MIN(seq), MAX(seq) FROM events").fetchone()
            unpublished = conn.execute("SELECT COUNT(*) FROM events WHERE published = 0"
                                       ).fetchone()[0]
            newest = _newest_input(conn)
        finally:
            conn.close()
    except sqlite3.Error as error:
        return False, [f"{db}: {error}"]
    if rows is not None:
        return False, [f"{db}: {rows}"]
    meta = found.meta
    try:
        waiting = _records_waiting(db.parent, meta.get("instance_id", ""), newest)
    except RecordLogError as error:
        return False, [str(error)]
    running = _holder(db.parent)
    last_stop = ("not clean" if not found.clean else "clean") + (
        f" (in use now by pid {running})" if running else "")
    return True, [f"{db}: OK (SQLite's integrity_check: ok, every row's checksum: ok)",
                  f"instance {meta.get('instance_id')}", f"schema version {found.version}",
                  f"events seq {low or 0}..{high or 0}, {unpublished} not yet published",
                  f"record log: {len(waiting)} frame(s), "
                  f"{sum(len(e.inputs) for e in waiting)} input(s) not yet in the database",
                  f"last stop {last_stop}",
                  f"uptime {float(meta.get('uptime', 0)):.0f} s"]

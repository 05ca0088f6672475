"""The state directory and what guards the journal in it: its preparation (0750, not
world-writable, writable, not read-only), the one-daemon lock (`journal.lock`), the
journal's id marker, and the storage errors with what a failed read or write means (a
full disk named as such). No SQL here: shoed/store/journal.py opens the journal."""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import os
import pathlib
import socket
import sqlite3
import stat
from contextlib import suppress

from shoed.core.errors import ShoedError

from .check import ID_NAME, LOCK_NAME

# Less room than this (for this user) makes an I/O error of SQLite's a full disk: SQLite
# says "disk I/O error" where its -shm cannot grow, and SQLITE_FULL ("database or disk is
# full") only where the database or its log cannot.
FULL_BELOW_BYTES = 1 << 20


class StorageError(ShoedError):
    """The journal cannot be read or written; nothing may be acknowledged."""


class JournalDamaged(StorageError):
    """The journal is damaged, missing or foreign: the daemon must not start afresh."""

    def __init__(self, path: pathlib.Path, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__(
            f"journal {path}: {'; '.join(problems)}. Refusing to start: a new journal "
            f"would start seq again at 1. `shoed check-journal {path.parent}` says what "
            f"is wrong; `shoed run --new-journal` (or state.new_journal = true) moves the "
            f"damaged files aside, deleting nothing, and starts a new journal with a new "
            f"instance id")


class JournalInUse(StorageError):
    """Another daemon holds this state directory's journal."""


def prepare_state_dir(path: pathlib.Path) -> None:
    """Create the state directory 0750, and refuse one that others may write to."""
    _refuse_virtual(path)
    try:
        path.mkdir(mode=0o750, parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as error:
        # mkdir says "File exists" (or "Not a directory" below a file): name what is there
        raise StorageError(_not_a_directory(path)) from error
    except OSError as error:
        raise StorageError(f"state.dir {path}: {error.strerror}") from error
    _check_directory(path)


def check_state_dir(path: pathlib.Path) -> None:
    """prepare_state_dir's checks, creating nothing (`shoed check-config`): a directory
    that is there as the start keeps it; else the nearest one above, that the start
    creates it in."""
    _refuse_virtual(path)
    try:
        if path.is_dir():
            return _check_directory(path)
        there = next(p for p in (path, *path.parents) if os.path.lexists(p))
        if there == path or not there.is_dir():
            raise StorageError(_not_a_directory(path))
    except OSError as error:
        raise StorageError(f"state.dir {path}: {error.strerror}") from error
    _check_directory(there, made_in=path)


def _refuse_virtual(path: pathlib.Path) -> None:
    if path.resolve().parts[1:2] in (("proc",), ("sys",)):
        raise StorageError(f"state.dir {path} is in the kernel's /proc or /sys: no file "
                           f"can be kept there")


def _check_directory(path: pathlib.Path, made_in: pathlib.Path | None = None) -> None:
    """Refuse the directory `path` that others may write to, on a read-only filesystem
    or not writable by this user (`made_in`: the state.dir it would hold, not made yet)."""
    what = f"state.dir {path}" if made_in is None else f"state.dir {made_in}: {path}"
    try:
        mode = path.stat().st_mode
        read_only = os.statvfs(path).f_flag & os.ST_RDONLY
    except OSError as error:
        raise StorageError(f"{what}: {error.strerror}") from error
    if mode & stat.S_IWOTH and made_in is None:
        raise StorageError(f"{what} is world-writable (mode {stat.filemode(mode)}); "
                           f"refusing to keep the journal there: chmod o-w it")
    if read_only:
        raise StorageError(f"{what} is on a read-only filesystem: nothing could be "
                           f"journalled, so nothing would be ACKed")
    if not os.access(path, os.W_OK | os.X_OK):
        raise StorageError(f"{what} is not writable by uid {os.geteuid()}")


def free_bytes(directory: pathlib.Path) -> int | None:
    """The room left for this process on `directory`'s filesystem (root may use the
    blocks reserved for it), or None when it cannot be asked (or the filesystem gives
    no size: some FUSE and network filesystems report 0 blocks of 0)."""
    try:
        found = os.statvfs(directory)
    except OSError:
        return None
    if not found.f_blocks:
        return None
    return (found.f_bfree if os.geteuid() == 0 else found.f_bavail) * found.f_frsize


#: SQLite's I/O errors a full disk causes: writing, syncing, growing a file, and making
#: or growing the WAL's shared memory (-shm). A read error (a bad sector) is never one.
_WRITE_IOERRS = frozenset({
    sqlite3.SQLITE_IOERR_WRITE, sqlite3.SQLITE_IOERR_FSYNC, sqlite3.SQLITE_IOERR_DIR_FSYNC,
    sqlite3.SQLITE_IOERR_TRUNCATE, sqlite3.SQLITE_IOERR_SHMOPEN,
    sqlite3.SQLITE_IOERR_SHMSIZE, sqlite3.SQLITE_IOERR_SHMMAP})


def failure_cause(error: sqlite3.Error | OSError, directory: pathlib.Path) -> str:
    """What a failed read or write of the journal in `directory` says: SQLite's or the
    system's own words, unless the disk is full. That is certain for SQLITE_FULL and
    ENOSPC; SQLite's "disk I/O error" of a write (its -shm cannot grow, at a start on a
    full disk) counts as one when less than FULL_BELOW_BYTES are left. Its words are
    kept."""
    free = None
    if isinstance(error, OSError):
        full = error.errno == errno.ENOSPC
        words = error.strerror or str(error)
    else:
        code = getattr(error, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        free = free_bytes(directory) if code in _WRITE_IOERRS else None
        full = primary == sqlite3.SQLITE_FULL or (free is not None and free < FULL_BELOW_BYTES)
        words = f"SQLite said: {error}"
    if not full:
        return str(error)
    if free is None:  # not asked yet (or not known: asked again, once)
        free = free_bytes(directory)
    room = f"{free} bytes free for " if free is not None else ""
    return f"the disk is full ({room}state.dir {directory}; {words})"


def _not_a_directory(path: pathlib.Path) -> str:
    """Why state.dir `path` cannot be made: it, or a directory above it, is not one."""
    for part in (*reversed(path.parents), path):
        with suppress(OSError):
            if part.is_symlink() and not part.exists():
                where = "state.dir" if part == path else f"state.dir {path}:"
                return (f"{where} {part} is a symbolic link to {os.readlink(part)}, "
                        f"which is not there")
            if part.exists() and not part.is_dir():
                if part == path:
                    kind = "a file" if path.is_file() else "something else"
                    return f"state.dir {path} is not a directory ({kind} is there)"
                return f"state.dir {path}: {part} is not a directory"
    return f"state.dir {path} is not a directory"


def lock_state_dir(path: pathlib.Path) -> int:
    """Take the exclusive lock on `path/journal.lock` (kept until the fd is closed; the
    kernel drops it when the process dies, kill -9 included) and write who holds it.
    Raises JournalInUse naming the holder."""
    lock = path / LOCK_NAME
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
    except OSError as error:
        raise StorageError(f"{lock}: {error.strerror}") from error
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        with suppress(ValueError):
            info = json.loads(holder)
            holder = (f"pid {info.get('pid')} on {info.get('host')}, started "
                      f"{info.get('started')}")
        raise JournalInUse(f"state.dir {path} is in use by another shoed ({holder}; it "
                           f"holds {lock}): only one daemon may run per journal") from None
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                  "started": started}).encode() + b"\n", 0)
    except OSError as error:  # e.g. ENOSPC: a full disk on the very first start
        os.close(fd)
        raise StorageError(f"{lock}: cannot be written: {error.strerror}") from error
    return fd


def write_id(directory: pathlib.Path, instance: str) -> None:
    """`journal.id`, written atomically: what says later that this directory held it."""
    tmp = directory / (ID_NAME + ".tmp")
    with open(tmp, "w") as f:
        f.write(instance + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / ID_NAME)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

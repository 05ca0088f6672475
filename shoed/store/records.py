"""The record log: a device frame's record made durable before its ACK, with one write.

A frame's inputs and the link's new dedup state go here first, as one entry written with
one ``pwrite`` and one ``fdatasync`` (spec firmware-protocol.md section 3: "durably
recorded on disk in one atomic write"); the ACK follows. The next journal transaction
(the coalesced effect write, at most ``EFFECT_WRITE_DELAY_S`` later, or any other) copies
the entries into the database, fsynced, and only then is the log's space reused. A start
copies whatever entries the database lacks (a kill -9 or a power cut after an ACK) before
anything else reads the journal. SQLite stays the journal: this file holds at most the
last fraction of a second of records, and nothing else reads it (docs/decisions.md 137).

Why: an SQLite transaction for a card's record cost 0.66 ms before its ACK (BEGIN, the
row, the WAL frames, the commit's fsync); one write and one ``fdatasync`` into a file
whose blocks are already allocated costs what the floor pays (docs/performance.md,
"Sixth pass").

Layout (little-endian). The header, 32 bytes: ``SHOEDREC``, the format version (u32), the
journal's instance id (20 bytes, NUL-padded). Then entries, back to back from offset 32::

    u32 body length | u32 CRC-32 of everything after it | u64 generation | u32 index | body

and the body: ``u16`` inputs, each ``i64 id | f64 at | u32 length | JSON``; then
``i64 after`` (the newest input id when the entry was written) and ``u32 length | dedup``.

Entries are written in place from offset 32 again once the database holds them, under a
new generation; a reader takes entries from offset 32 while their CRC holds, the first of
index 0 and each next of the same generation and the next index. What follows (a torn
write, the older entries of an earlier generation) is not read: nothing after the last
whole entry was ever ACKed. A torn entry is one frame, so a frame is recorded whole or
not at all.
"""

from __future__ import annotations

import errno
import os
import pathlib
import secrets
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

RECORDS_NAME = "journal.records"
MAGIC = b"SHOEDREC"
VERSION = 1
HEADER = struct.Struct("<8sI20s")
ENTRY = struct.Struct("<IIQI")  # length, crc, generation, index
INPUT = struct.Struct("<qdI")  # id, at, length
TAIL = struct.Struct("<qI")  # after, dedup length
COUNT = struct.Struct("<H")
# Blocks allocated (written with zeros) when the file is made: an fdatasync of a write
# inside them has no file size or extent to record. A fraction of a second of a busy
# table's records is a few kB; a longer backlog (storage failing) grows the file.
PREALLOCATE = 64 * 1024
MAX_ENTRY = 16 * 1024 * 1024
# The newest input id a journal's database has held (a snapshot's deletes never take the
# newest inputs): entries after it are the ones to take in.
NEWEST_INPUT_SQL = ("SELECT (SELECT MAX(id) FROM inputs), "
                    "(SELECT MAX(input_id) FROM snapshots)")


class RecordLogError(Exception):
    """The record log cannot be used: a foreign or unreadable file (what, in the text)."""


@dataclass(frozen=True)
class Entry:
    """One frame's record: its inputs ((id, at, body), in order) and the dedup state."""

    inputs: tuple[tuple[int, float, str], ...]
    after: int
    dedup: str

    @property
    def last_id(self) -> int:
        return self.inputs[-1][0] if self.inputs else self.after


def encode_body(inputs: Sequence[tuple[int, float, str]], after: int, dedup: str) -> bytes:
    parts = [COUNT.pack(len(inputs))]
    for input_id, at, body in inputs:
        data = body.encode()
        parts.append(INPUT.pack(input_id, at, len(data)))
        parts.append(data)
    kept = dedup.encode()
    parts.append(TAIL.pack(after, len(kept)))
    parts.append(kept)
    return b"".join(parts)


def decode_body(body: bytes) -> Entry:
    """An entry's body (its CRC already checked); ValueError or struct.error if it is
    not one."""
    (count,) = COUNT.unpack_from(body, 0)
    at_offset = COUNT.size
    inputs = []
    for _ in range(count):
        input_id, at, length = INPUT.unpack_from(body, at_offset)
        at_offset += INPUT.size
        inputs.append((input_id, at, body[at_offset:at_offset + length].decode()))
        at_offset += length
    after, length = TAIL.unpack_from(body, at_offset)
    at_offset += TAIL.size
    dedup = body[at_offset:at_offset + length].decode()
    if at_offset + length != len(body):
        raise ValueError("entry length does not match its contents")
    return Entry(tuple(inputs), after, dedup)


def read_entries(data: bytes) -> list[Entry]:
    """The whole entries of one generation from the file's bytes (the header already
    checked), in order."""
    entries: list[Entry] = []
    offset, generation = HEADER.size, None
    while offset + ENTRY.size <= len(data):
        length, crc, gen, index = ENTRY.unpack_from(data, offset)
        end = offset + ENTRY.size + length
        if length == 0 or length > MAX_ENTRY or end > len(data):
            break
        if zlib.crc32(data[offset + 8:end]) != crc:
            break
        if index != len(entries) or (generation is not None and gen != generation):
            break
        try:
            entries.append(decode_body(data[offset + ENTRY.size:end]))
        except (ValueError, struct.error, UnicodeDecodeError):
            break
        generation = gen
        offset = end
    return entries


class RecordLog:
    """The open record log of one journal (`instance` its id). Raises OSError from the
    file, RecordLogError for a file that is not this journal's."""

    def __init__(self, path: pathlib.Path, instance: str) -> None:
        self.path = path
        self.instance = instance
        self.entries: list[Entry] = []  # what the file held when opened
        made = not path.exists()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        try:
            if made or os.fstat(self._fd).st_size == 0:
                self._make()
            else:
                self.entries = self._read()
        except BaseException:
            os.close(self._fd)
            raise
        self._generation = secrets.randbits(63)
        self._index = 0
        self._offset = HEADER.size

    def _header(self) -> bytes:
        return HEADER.pack(MAGIC, VERSION, self.instance.encode()[:20])

    def _make(self) -> None:
        """A new file: its header and allocated blocks, fsynced, and the directory."""
        _write_all(self._fd, self._header() + bytes(PREALLOCATE - HEADER.size), 0)
        os.fsync(self._fd)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def _read(self) -> list[Entry]:
        return parse(self.path, os.pread(self._fd, os.fstat(self._fd).st_size, 0),
                     self.instance)

    def append(self, inputs: Sequence[tuple[int, float, str]], after: int, dedup: str) -> None:
        """One frame's entry, written and fdatasynced (OSError if it could not be)."""
        body = encode_body(inputs, after, dedup)
        tail = struct.pack("<QI", self._generation, self._index) + body
        entry = struct.pack("<II", len(body), zlib.crc32(tail)) + tail
        _write_all(self._fd, entry, self._offset)
        os.fdatasync(self._fd)
        self._offset += len(entry)
        self._index += 1

    def reuse(self) -> None:
        """The database holds every entry in the file: the next is written at the start
        again, under a new generation. The first entry's header is zeroed now (not
        synced: after a kill -9 a start reads nothing; after a power cut it may read
        entries the database has, which it skips by id), so that entries already taken
        in are not taken in again. OSError if that cannot be written (the rest is done)."""
        self._generation = (self._generation + 1) & (2**64 - 1)
        self._index = 0
        self._offset = HEADER.size
        os.pwrite(self._fd, bytes(ENTRY.size), HEADER.size)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _write_all(fd: int, data: bytes, offset: int) -> None:
    """pwrite all of `data` or raise OSError: a short write (a full disk, past the
    allocated blocks) must not pass for a record."""
    written = os.pwrite(fd, data, offset)
    if written != len(data):
        raise OSError(errno.ENOSPC, f"short write: {written} of {len(data)} bytes")


def parse(path: pathlib.Path, data: bytes, instance: str | None) -> list[Entry]:
    """The entries of a record log's bytes, after its header's checks (RecordLogError
    naming `path` and what is wrong; `instance`: the journal it must belong to)."""
    if len(data) < HEADER.size:
        raise RecordLogError(f"{path} is {len(data)} bytes, shorter than its header")
    magic, version, owner_id = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise RecordLogError(f"{path} is not a shoed record log")
    if version != VERSION:
        raise RecordLogError(f"{path} is record log version {version}; this shoed reads "
                             f"version {VERSION}")
    owner = owner_id.rstrip(b"\0").decode(errors="replace")
    if instance is not None and owner != instance:
        raise RecordLogError(f"{path} belongs to journal instance {owner!r}, not "
                             f"{instance!r}: a foreign file")
    return read_entries(data)


def not_in_database(entries: list[Entry], newest: int) -> list[Entry]:
    """The entries a database whose newest input id is `newest` (NEWEST_INPUT_SQL) does not
    hold: a frame's inputs after it; a frame without inputs (a heartbeat) written after
    it. Entries are copied all together, so one input id tells."""
    return [entry for entry in entries
            if (entry.inputs[0][0] > newest if entry.inputs else entry.after >= newest)]


def inspect(path: pathlib.Path, instance: str | None) -> list[Entry]:
    """For `shoed check-journal`: the entries of a record log, read only ([] when there is
    none). RecordLogError if it is not one, or not `instance`'s."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as error:
        raise RecordLogError(f"{path}: {error.strerror}") from error
    return parse(path, data, instance)

"""The record log in front of the database (shoed/store/records.py): a device frame's
record made durable with one write before its ACK, copied into the database by the next
transaction, and taken back in by a start after a stop that was not clean."""

from __future__ import annotations

import json
import os
import pathlib
import struct
import subprocess
import sys
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rig import peek

from shoed.store import records
from shoed.store.check import check_journal
from shoed.store.journal import Journal
from shoed.store.records import HEADER, RECORDS_NAME, RecordLog, read_entries
from shoed.store.statedir import JournalDamaged, StorageError

ROOT = pathlib.Path(__file__).resolve().parent.parent


def abandon(journal: Journal) -> None:
    """Stop as a kill -9 would: no closing transaction (no clean-stop mark), the files
    left as they are."""
    journal.close(clean=False)


def inputs_of(journal: Journal) -> list[tuple[int, str, str | None]]:
    return [(int(r[0]), str(r[1]), r[2]) for r in peek(
        journal.path, "SELECT id, body, dedup FROM inputs ORDER BY id")]


def test_a_record_is_fdatasynced_before_it_returns_and_is_not_in_the_database_yet(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = Journal(tmp_path / "state")
    synced: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real(fd))[1])
    ids = journal.record([(1.0, '{"a": 1}'), (1.0, '{"b": 2}')], "[7, 1]")
    assert ids == [1, 2] and len(synced) == 1  # one write, one fdatasync, for the frame
    assert inputs_of(journal) == [] and journal.pending == 1
    assert journal.dedup() == "[7, 1]" and journal.last_input_id() == 2
    with journal.transaction():  # any transaction copies it in first
        journal.set_meta("x", "y")
    assert inputs_of(journal) == [(1, '{"a": 1}', None), (2, '{"b": 2}', "[7, 1]")]
    assert journal.pending == 0 and journal.dedup() == "[7, 1]"


def test_a_killed_writer_loses_no_record_and_the_next_start_takes_them_in(
        tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    script = (
        "import os, pathlib, sys\n"
        "from shoed.store.journal import Journal\n"
        "j = Journal(pathlib.Path(sys.argv[1]))\n"
        "for i in range(5):\n"
        "    j.record([(float(i), '{\"card\": %d}' % i)], '[9, %d]' % i)\n"
        "with j.transaction():\n"  # the first five reach the database
        "    pass\n"
        "for i in range(5, 8):\n"
        "    j.record([(float(i), '{\"card\": %d}' % i)], '[9, %d]' % i)\n"
        "j.record([], '[9, 8]')\n"  # a heartbeat: the dedup state alone
        "os._exit(0)\n")  # as kill -9 leaves it: three frames and a heartbeat in the log
    subprocess.run([sys.executable, "-c", script, str(state)], check=True, cwd=ROOT)
    journal = Journal(state)
    assert journal.recovered_records == 4
    assert [(i, json.loads(b)["card"]) for i, b, _ in inputs_of(journal)] == [
        (i + 1, i) for i in range(8)]
    assert journal.dedup() == "[9, 8]" and journal.last_input_id() == 8
    assert journal.record([(9.0, "{}")], "[9, 9]") == [9]  # ids go on after them
    journal.close()
    again = Journal(state)  # a clean stop: nothing more to take in
    assert again.recovered_records == 0 and again.last_input_id() == 9
    assert again.dedup() == "[9, 9]"


def test_a_torn_last_entry_is_not_read_and_what_came_before_it_is(
        tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    journal = Journal(state)
    journal.record([(1.0, '{"n": 1}')], "[1, 1]")
    journal.record([(2.0, '{"n": 2}')], "[1, 2]")
    abandon(journal)
    path = state / RECORDS_NAME
    data = bytearray(path.read_bytes())
    first = read_entries(bytes(data))
    assert len(first) == 2
    # Tear the second entry: its last bytes never reached the disk (its ACK never left).
    second_end = HEADER.size + 2 * records.ENTRY.size + sum(
        len(records.encode_body(e.inputs, e.after, e.dedup)) for e in first)
    data[second_end - 3:second_end] = b"\0\0\0"
    path.write_bytes(bytes(data))
    journal = Journal(state)
    assert [b for _, b, _ in inputs_of(journal)] == ['{"n": 1}']
    assert journal.dedup() == "[1, 1]"  # the torn frame was not accepted: it comes again


def test_entries_of_an_earlier_generation_are_not_read_again(tmp_path: pathlib.Path) -> None:
    """Once the database holds them, entries are written over from the start; a shorter
    new entry leaves older ones after it, which a start must not take for new ones."""
    state = tmp_path / "state"
    journal = Journal(state)
    for i in range(3):
        journal.record([(float(i), '{"long": "' + "x" * 200 + '"}')], f"[1, {i}]")
    with journal.transaction():
        pass
    journal.record([(9.0, "{}")], "[1, 9]")  # over the first of them
    abandon(journal)
    log = RecordLog(state / RECORDS_NAME, journal.instance_id)
    assert [e.inputs[0][2] for e in log.entries] == ["{}"]
    log.close()
    journal = Journal(state)
    assert [i for i, _, _ in inputs_of(journal)] == [1, 2, 3, 4]
    assert journal.dedup() == "[1, 9]"


def test_an_older_generation_at_an_entry_boundary_is_not_read(tmp_path: pathlib.Path) -> None:
    """A new entry as long as the old one it overwrote: the next offset is exactly the old
    second entry's, whole and of index 1; its generation tells it from a new one."""
    state = tmp_path / "state"
    journal = Journal(state)
    body = '{"n": "' + "x" * 50 + '"}'
    journal.record([(1.0, body)], "[1, 1]")
    journal.record([(2.0, body)], "[1, 2]")
    with journal.transaction():
        pass
    journal.record([(3.0, body)], "[1, 3]")  # the same length as the first
    abandon(journal)
    log = RecordLog(state / RECORDS_NAME, journal.instance_id)
    assert [(e.inputs[0][0], e.dedup) for e in log.entries] == [(3, "[1, 3]")]
    log.close()


def test_entries_taken_in_are_not_taken_in_again(tmp_path: pathlib.Path) -> None:
    """Once the database holds the log's entries, a start does not read them again: a
    heartbeat's dedup state from the log must not go back over a newer one."""
    state = tmp_path / "state"
    journal = Journal(state)
    journal.record([(1.0, "{}")], "[1, 1]")
    journal.record([], "[1, 2]")  # a heartbeat
    with journal.transaction():
        pass
    with journal.transaction():
        journal.set_dedup("[2, 1]")  # newer, in the database only
    abandon(journal)
    journal = Journal(state)
    assert journal.recovered_records == 0 and journal.dedup() == "[2, 1]"
    abandon(journal)  # and a start that took some in leaves none behind either
    assert Journal(state).dedup() == "[2, 1]"


def test_a_transaction_that_fails_keeps_the_records_for_the_next(
        tmp_path: pathlib.Path) -> None:
    journal = Journal(tmp_path / "state")
    journal.record([(1.0, "{}")], "[1, 1]")
    with pytest.raises(StorageError), journal.transaction():
        journal.set_meta("x", "1")
        raise StorageError("a statement of the transaction failed")  # rolled back
    assert journal.pending == 1 and inputs_of(journal) == [] and journal.meta("x") is None
    with journal.transaction():
        assert journal.add_input(2.0, "{}") == 2  # a command's input, after the record
    assert [i for i, _, _ in inputs_of(journal)] == [1, 2]


def test_a_record_that_cannot_be_written_is_a_storage_error_and_records_nothing(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = Journal(tmp_path / "state")

    def fail(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdatasync", fail)
    with pytest.raises(StorageError, match=r"record log .*: the disk is full \(\d+ bytes "
                       r"free for state\.dir .*; No space left on device\)"):
        journal.record([(1.0, "{}")], "[1, 1]")
    monkeypatch.undo()
    assert journal.pending == 0 and journal.last_input_id() == 0
    assert journal.record([(1.0, "{}")], "[1, 1]") == [1]


def test_a_short_write_is_a_storage_error_and_the_next_record_goes_where_it_began(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk that takes half an entry (past the allocated blocks): no ACK, and nothing
    after it is written beyond the torn bytes (a start would stop reading there)."""
    state = tmp_path / "state"
    journal = Journal(state)
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, at: real(fd, data[:len(data) // 2], at))
    with pytest.raises(StorageError, match="short write"):
        journal.record([(1.0, "{}")], "[1, 1]")
    monkeypatch.undo()
    assert journal.record([(2.0, '{"n": 2}')], "[1, 2]") == [1]
    abandon(journal)
    journal = Journal(state)
    assert [b for _, b, _ in inputs_of(journal)] == ['{"n": 2}']
    assert journal.dedup() == "[1, 2]"


def test_a_record_log_no_record_was_written_to_is_made_again(tmp_path: pathlib.Path) -> None:
    """A start that died while making the log (before the journal said it has one)
    left a file that holds nothing: it is made again, not refused."""
    state = tmp_path / "state"
    journal = Journal(state)
    with journal.transaction():
        journal.set_meta("records", "0")  # as before the first start had committed it
    abandon(journal)
    (state / RECORDS_NAME).write_bytes(b"SHOEDREC\x01")  # half a header
    journal = Journal(state)
    assert journal.record([(1.0, "{}")], "[1, 1]") == [1]
    assert journal.meta("records") == "1"


def test_a_foreign_or_missing_record_log_is_refused_and_moved_aside_on_request(
        tmp_path: pathlib.Path) -> None:
    state, other = tmp_path / "state", tmp_path / "other"
    Journal(other).close()
    journal = Journal(state)
    journal.record([(1.0, "{}")], "[1, 1]")
    abandon(journal)
    (state / RECORDS_NAME).unlink()
    with pytest.raises(JournalDamaged, match=r"record log .* missing or empty after a stop "
                                             r"that was not clean"):
        Journal(state)
    (state / RECORDS_NAME).write_bytes(b"")  # emptied: refused the same way
    with pytest.raises(JournalDamaged, match=r"missing or empty"):
        Journal(state)
    (state / RECORDS_NAME).unlink()
    (other / RECORDS_NAME).rename(state / RECORDS_NAME)
    with pytest.raises(JournalDamaged, match="belongs to journal instance"):
        Journal(state)
    fresh = Journal(state, new_journal=True)
    assert fresh.moved_aside is not None
    assert (fresh.moved_aside / RECORDS_NAME).exists()  # kept, never deleted
    assert fresh.instance_id != journal.instance_id


def test_check_journal_counts_the_records_not_yet_in_the_database(
        tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    journal = Journal(state)
    journal.record([(1.0, "{}")], "[1, 1]")
    journal.record([(2.0, "{}"), (2.0, "{}")], "[1, 2]")
    abandon(journal)
    ok, lines = check_journal(state)
    assert ok and "record log: 2 frame(s), 3 input(s) not yet in the database" in lines


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["frame", "pair", "heartbeat", "commit", "command", "kill"]),
                min_size=1, max_size=30))
def test_whatever_the_order_of_records_commits_and_kills_every_record_stays(
        tmp_path_factory: pytest.TempPathFactory, steps: list[str]) -> None:
    """Every recorded input is in the database after the next start, once, in order, and
    the dedup state is the newest recorded."""
    state = tmp_path_factory.mktemp("j") / "state"
    journal = Journal(state)
    expected: list[str] = []
    dedup = None
    for n, step in enumerate(steps):
        if step in ("frame", "pair", "heartbeat"):
            bodies = {"frame": [f"f{n}"], "pair": [f"p{n}a", f"p{n}b"], "heartbeat": []}[step]
            dedup = f"[1, {n}]"
            journal.record([(float(n), b) for b in bodies], dedup)
            expected += bodies
        elif step == "commit":
            with journal.transaction():
                pass
        elif step == "command":
            with journal.transaction():
                journal.add_input(float(n), f"c{n}")
            expected.append(f"c{n}")
        else:
            abandon(journal)
            journal = Journal(state)
    abandon(journal)
    journal = Journal(state)
    rows = inputs_of(journal)
    assert [b for _, b, _ in rows] == expected
    assert [i for i, _, _ in rows] == list(range(1, len(expected) + 1))
    assert journal.dedup() == dedup
    journal.close()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.text(max_size=40)), min_size=1, max_size=6),
       st.integers(0, 10_000), st.integers(0, 255))
def test_a_damaged_log_reads_as_a_prefix_of_what_was_written_and_never_raises(
        frames: list[tuple[int, str]], where: int, flip: int) -> None:
    """Whatever byte of the entries is changed, the reader returns some first entries as
    written (a change it cannot see by CRC is one of the 2**32 it misses) and stops."""
    entries, data, next_id = [], bytearray(HEADER.size), 1
    for n, (count, text) in enumerate(frames):
        inputs = tuple((next_id + k, float(n), text) for k in range(count))
        next_id += count
        body = records.encode_body(inputs, next_id - 1 - count, f"[1, {n}]")
        tail = struct.pack("<QI", 7, n) + body
        data += struct.pack("<II", len(body), zlib.crc32(tail)) + tail
        entries.append(records.Entry(inputs, next_id - 1 - count, f"[1, {n}]"))
    assert read_entries(bytes(data)) == entries
    at = HEADER.size + where % (len(data) - HEADER.size)
    data[at] ^= flip or 1
    got = read_entries(bytes(data))
    assert got == entries[:len(got)] and len(got) < len(entries)

"""Every row's text carries a checksum (schema 6): a byte changed on disk is found.

SQLite's own checks are structural. A byte changed inside an event's body on disk (bit
rot the disk did not report, an edit by hand) passed `integrity_check`, and the daemon
would have replayed it to the casino as it read (outside review). Each row of `inputs`,
`events`, `snapshots` and `responses` now carries the CRC-32 of its text, written with
it; `shoed check-journal` and the check after READY compare them, and what they find
makes the next start refuse the journal, as any other damage (test_journal_damage.py).
Real SQLite files, changed on disk or with SQL.
"""

from __future__ import annotations

import json
import pathlib
import sqlite3
import zlib

import pytest
from test_journal_damage import refused

from shoed.store.check import check_journal
from shoed.store.journal import SCHEMA_VERSION, Journal

TABLES = {"events": ("seq", "body"), "inputs": ("id", "body"),
          "snapshots": ("input_id", "state"), "responses": ("request_id", "body")}


def db(state: pathlib.Path) -> pathlib.Path:
    return state / "journal.sqlite3"


def dealt(state: pathlib.Path, events: int = 40) -> str:
    """A journal with rows in every checksummed table, written the ways the daemon writes
    them (a record copied from the record log, an input in a transaction, events, a
    snapshot, an answer), stopped cleanly; its instance id."""
    journal = Journal(state)
    journal.record([(1.0, '{"kind": "card", "k": 1}'), (1.5, '{"kind": "card", "k": 2}')],
                   "dedup-1")
    with journal.transaction():
        journal.add_input(2.0, '{"kind": "command", "k": 3}')
        for i in range(1, events + 1):
            journal.add_event(i, f"T-{journal.instance_id}-{i}", "card",
                              json.dumps({"n": 1_000_000 + i}))
        journal.save_snapshot(3, json.dumps({"engine": "state", "seq": events}))
        journal.add_response("pit", "r-1", "f", {"request_id": "r-1", "ok": True})
    instance = journal.instance_id
    journal.close()
    return instance


def refused_naming(state: pathlib.Path, *words: str) -> None:
    refused(state, "rows changed", *words)  # by a start and by check-journal


def test_every_row_written_carries_the_checksum_of_its_text(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    dealt(state)
    with sqlite3.connect(db(state)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
        for table, (_, column) in TABLES.items():
            rows = conn.execute(f"SELECT {column}, crc FROM {table}").fetchall()
            assert rows, table
            assert all(crc == zlib.crc32(text.encode()) for text, crc in rows), table
    ok, lines = check_journal(state)
    assert ok and "every row's checksum: ok" in lines[0], lines


def test_a_byte_flipped_inside_an_event_on_disk_is_found_and_the_journal_refused(
        tmp_path: pathlib.Path) -> None:
    """The bit rot itself: one digit of an event's body changed in the database file.
    SQLite's integrity_check still says ok; the checksum does not, in check-journal and
    in the check after READY, and the next start refuses the journal; --new-journal
    moves it aside."""
    state = tmp_path / "state"
    dealt(state)
    raw = db(state).read_bytes()
    at = raw.index(b'{"n": 1000017}')
    with open(db(state), "r+b") as f:
        f.seek(at + len(b'{"n": 10000'))
        f.write(b"9")  # 1000017 -> 1000097: valid JSON, the same length
    with sqlite3.connect(db(state)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT body FROM events WHERE seq = 17").fetchone()[0] == \
            '{"n": 1000097}'
    ok, lines = check_journal(state)
    assert not ok and "rows changed" in lines[0] and "events seq 17" in lines[0], lines
    journal = Journal(state)  # a clean stop: the start does not read every row
    found = journal.integrity_check()  # the check after READY
    journal.close()
    assert len(found) == 1 and "events seq 17" in found[0], found
    refused_naming(state, "events seq 17")
    fresh = Journal(state, new_journal=True)
    assert fresh.moved_aside is not None and fresh.event_range() == (0, 0)
    fresh.close()


@pytest.mark.parametrize("table", sorted(TABLES))
def test_a_changed_row_of_each_table_is_named(tmp_path: pathlib.Path, table: str) -> None:
    state = tmp_path / "state"
    dealt(state)
    key, column = TABLES[table]
    with sqlite3.connect(db(state)) as conn:
        first = conn.execute(f"SELECT {key} FROM {table} ORDER BY {key} LIMIT 1"
                             ).fetchone()[0]
        conn.execute(f"UPDATE {table} SET {column} = {column} || ' ' WHERE {key} = ?",
                     (first,))
    ok, lines = check_journal(state)
    assert not ok and f"{table} {key} {first}" in lines[0], lines
    journal = Journal(state)
    assert f"{table} {key} {first}" in journal.integrity_check()[0]
    journal.close()
    refused_naming(state, f"{table} {key} {first}")


def test_bytes_that_are_not_utf8_are_a_mismatch_not_an_error(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    dealt(state)
    with sqlite3.connect(db(state)) as conn:
        conn.execute("UPDATE events SET body = CAST(X'7B226E223A20FF7D' AS TEXT) "
                     "WHERE seq = 3")
    ok, lines = check_journal(state)
    assert not ok and "events seq 3" in lines[0], lines


def test_many_changed_rows_name_the_first_five_and_count_the_rest(
        tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    dealt(state)
    with sqlite3.connect(db(state)) as conn:
        conn.execute("UPDATE events SET body = body || ' ' WHERE seq > 30")
    ok, lines = check_journal(state)
    assert not ok and "events seq 31, 32, 33, 34, 35 and 5 more" in lines[0], lines


def test_a_schema_5_journal_is_migrated_its_old_rows_unchecked_its_new_rows_checked(
        tmp_path: pathlib.Path) -> None:
    """A journal of the schema before (no crc) opens: its rows keep NULL (nothing to
    compare), check-journal passes, and the rows written from then on carry one."""
    state = tmp_path / "state"
    instance = dealt(state)
    with sqlite3.connect(db(state)) as conn:
        for table in TABLES:
            conn.execute(f"ALTER TABLE {table} DROP COLUMN crc")
        conn.execute("PRAGMA user_version=5")
    journal = Journal(state)
    assert journal.instance_id == instance
    with journal.transaction():
        journal.add_event(41, f"T-{instance}-41", "card", '{"n": 41}')
    journal.close()
    with sqlite3.connect(db(state)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        crcs = dict(conn.execute("SELECT seq, crc FROM events").fetchall())
        # an old row changed stays unseen: it never had a checksum
        conn.execute("UPDATE events SET body = '{}' WHERE seq = 1")
    assert crcs[1] is None and crcs[41] == zlib.crc32(b'{"n": 41}')
    ok, lines = check_journal(state)
    assert ok, lines

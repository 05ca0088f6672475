"""The journal's own contract: what an effect write leaves on disk, page size, WAL bound."""

from __future__ import annotations

import json
import pathlib

from hypothesis import given
from hypothesis import strategies as st
from rig import peek

from firmware_protocol import DedupState
from shoed.store.journal import SCHEMA_VERSION, Journal
from shoed.store.recorder import dedup_json


def test_new_journal_uses_small_pages_and_no_checkpoint_inside_commits(
        tmp_path: pathlib.Path) -> None:
    journal = Journal(tmp_path / "state")
    assert journal._db.execute("PRAGMA page_size").fetchone()[0] == 1024
    assert journal._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    assert journal._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_wal_is_checkpointed_only_when_due_and_then_reused(tmp_path: pathlib.Path) -> None:
    journal = Journal(tmp_path / "state")
    wal = pathlib.Path(f"{journal.path}-wal")

    def commits(n: int) -> None:
        for i in range(n):
            with journal.transaction():
                journal.add_input(float(i), "x" * 500)

    assert journal.checkpoint_if_due(every=0)  # start counting from here
    commits(300)
    grown = wal.stat().st_size
    assert grown > 300 * 500  # no checkpoint ran inside the commits
    assert not journal.checkpoint_if_due(every=301)
    assert journal.checkpoint_if_due(every=300)
    assert not journal.checkpoint_if_due(every=300)  # counted afresh
    commits(100)
    assert wal.stat().st_size == grown  # written from its start again, not grown
    assert journal.last_input_id() == 400  # and nothing was lost on the way


def test_event_written_after_its_puback_is_not_published_again(tmp_path: pathlib.Path) -> None:
    journal = Journal(tmp_path / "state")
    with journal.transaction():
        journal.add_event(1, "T-i-1", "card", "{}", published=True)
        journal.add_event(2, "T-i-2", "card", "{}")
    assert journal.unpublished() == [(2, "{}")]
    assert journal.outbox_depth() == 1
    assert journal.outbox_depth(after_seq=2) == 0  # acknowledged, not yet marked
    with journal.transaction():
        journal.mark_published(2)
        journal.add_event(2, "T-i-2", "card", "{changed}")  # a replay: ignored
    assert journal.unpublished() == [] and journal.events_between(1, 2) == ["{}", "{}"]


def test_dedup_rides_on_the_frames_last_input_and_is_kept_in_meta_only_when_it_must(
        tmp_path: pathlib.Path) -> None:
    """Schema 4: the record before an ACK writes the dedup state on its input row; meta
    holds it when a frame brought no input, or when the row carrying it is pruned."""
    journal = Journal(tmp_path / "state")
    assert journal.dedup() is None
    with journal.transaction():
        journal.add_input(1.0, "{}")
        journal.add_input(1.0, "{}", dedup="[7, 1]")
    assert journal.dedup() == "[7, 1]" and journal.meta("dedup") is None
    with journal.transaction():
        journal.set_dedup("[7, 2]")  # a heartbeat: no input, meta
    assert journal.dedup() == "[7, 2]"
    with journal.transaction():
        journal.add_input(2.0, "{}")  # a command's input: no dedup, the meta stays newest
    assert journal.dedup() == "[7, 2]"
    with journal.transaction():
        journal.add_input(3.0, "{}", dedup="[8, 1]")  # the shoe rebooted
    assert journal.dedup() == "[8, 1]"
    # Snapshots prune the inputs before the previous one, the row with [8, 1] among them.
    with journal.transaction():
        journal.save_snapshot(4, "{}")
        for i in range(5, 9):
            journal.add_input(float(i), "{}")
        journal.save_snapshot(8, "{}")
    assert peek(journal.path, "SELECT MIN(id) FROM inputs") == [(5,)]
    assert journal.dedup() == "[8, 1]"
    journal.close()
    journal = Journal(tmp_path / "state")
    assert journal.dedup() == "[8, 1]"
    # A heartbeat's state (meta) newer than the last row with one, that row then pruned:
    # the heartbeat's stays the newest, across a restart.
    with journal.transaction():
        journal.add_input(9.0, "{}", dedup="[8, 2]")
        journal.set_dedup("[8, 3]")
        for i in range(10, 13):
            journal.add_input(float(i), "{}")
        journal.save_snapshot(12, "{}")
        journal.add_input(13.0, "{}")
        journal.save_snapshot(13, "{}")  # prunes the inputs up to 12, [8, 2]'s among them
    assert peek(journal.path, "SELECT COUNT(*) FROM inputs WHERE dedup IS NOT NULL") == [(0,)]
    assert journal.dedup() == "[8, 3]"
    journal.close()
    assert Journal(tmp_path / "state").dedup() == "[8, 3]"


def test_schema_3_journal_is_migrated_with_its_dedup_and_a_partial_outbox_index(
        tmp_path: pathlib.Path) -> None:
    import sqlite3

    state = tmp_path / "state"
    state.mkdir(mode=0o750)
    with sqlite3.connect(state / "journal.sqlite3") as conn:
        conn.executescript("""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
            CREATE TABLE inputs (id INTEGER PRIMARY KEY, at REAL NOT NULL, body TEXT NOT NULL);
            CREATE TABLE events (
                seq INTEGER PRIMARY KEY, event_id TEXT NOT NULL UNIQUE, type TEXT NOT NULL,
                created REAL NOT NULL, body TEXT NOT NULL, published INTEGER NOT NULL DEFAULT 0,
                created_up REAL NOT NULL DEFAULT 0);
            CREATE INDEX events_unpublished ON events(published, seq);
            CREATE TABLE snapshots (input_id INTEGER PRIMARY KEY, state TEXT NOT NULL);
            CREATE TABLE responses (
                sender TEXT NOT NULL, request_id TEXT NOT NULL, fingerprint TEXT NOT NULL,
                created REAL NOT NULL, body TEXT NOT NULL, created_up REAL NOT NULL DEFAULT 0,
                PRIMARY KEY (sender, request_id)) WITHOUT ROWID;
            INSERT INTO meta VALUES ('instance_id', 'old3'), ('dedup', '[4242, 17]');
            INSERT INTO inputs VALUES (1, 1.0, '{}');
            INSERT INTO events VALUES (1, 'T-old3-1', 'card', 1.0, '{"a": 1}', 1, 0),
                                      (2, 'T-old3-2', 'card', 1.0, '{"a": 2}', 0, 0);
            PRAGMA user_version=3;
        """)
    journal = Journal(state)
    assert peek(journal.path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert journal.instance_id == "old3" and journal.dedup() == "[4242, 17]"
    [(index,)] = peek(journal.path,
                      "SELECT sql FROM sqlite_master WHERE name = 'events_unpublished'")
    assert "WHERE published = 0" in index
    plan = " ".join(str(r[3]) for r in peek(
        journal.path,
        "EXPLAIN QUERY PLAN SELECT seq, body FROM events WHERE published = 0 ORDER BY seq"))
    assert "events_unpublished" in plan
    assert journal.unpublished() == [(2, '{"a": 2}')] and journal.outbox_depth() == 1
    with journal.transaction():
        journal.add_input(2.0, "{}", dedup="[4242, 18]")
        journal.mark_published(2)
    assert journal.dedup() == "[4242, 18]" and journal.unpublished() == []


@given(boot=st.none() | st.integers(0, 2**32 - 1), last=st.none() | st.integers(0, 65535))
def test_the_recorded_dedup_state_is_what_json_dumps_writes_and_reads_back(
        boot: int | None, last: int | None) -> None:
    written = dedup_json(DedupState(boot, last))
    assert written == json.dumps([boot, last])
    assert json.loads(written) == [boot, last]


def test_a_second_open_is_refused_even_with_the_lock_file_removed(tmp_path) -> None:
    """The database file's own flock: with `journal.lock` deleted (or replaced) while a
    daemon runs, a second daemon takes a new lock file, and must still be refused before
    it reads or writes the journal (outside review: it opened the same journal, then
    failed on `UNIQUE constraint failed: inputs.id`)."""
    import pytest

    from shoed.store.statedir import JournalInUse

    state = tmp_path / "state"
    first = Journal(state)
    try:
        (state / "journal.lock").unlink()
        with pytest.raises(JournalInUse, match=r"journal\.lock was removed or replaced"):
            Journal(state)
        with first.transaction():  # the first is untouched
            first.add_event(1, "T9-x-1", "card", "{}")
    finally:
        first.close()
    again = Journal(state)  # closed: the database's lock went with it
    assert again.event_range() == (1, 1)
    again.close()


def test_a_journal_found_damaged_while_a_daemon_runs_is_not_moved_aside_under_it(
        tmp_path) -> None:
    """With `journal.damaged` written while a daemon deals on (the check after READY, or
    an auditor's check-journal) and the lock file removed, a second daemon is refused as
    in use, also with --new-journal: it never moves the live journal's files aside (the
    database's lock comes before the damage checks; outside review)."""
    import pytest

    from shoed.store.check import record_damage
    from shoed.store.statedir import JournalInUse

    state = tmp_path / "state"
    first = Journal(state)
    try:
        record_damage(state, "corrupt (SQLite's integrity_check): example")
        (state / "journal.lock").unlink()
        for new_journal in (False, True):
            with pytest.raises(JournalInUse):
                Journal(state, new_journal=new_journal)
        assert not list(state.glob("damaged-*"))
    finally:
        first.close()
    moved = Journal(state, new_journal=True)  # alone now: the operator's choice holds
    assert moved.moved_aside is not None
    moved.close()

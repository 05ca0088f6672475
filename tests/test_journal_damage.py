"""A damaged, missing or foreign journal is refused, never silently replaced (issue 13 §5).

Real SQLite files; "a crash" is a child process that writes and dies with os._exit (no
close: its -wal and -shm stay, as after kill -9). Each damage is refused by `Journal`
with a message naming the file and the problem, by `shoed check-journal` (exit 2), and,
with `new_journal=True`, moved aside whole (nothing deleted) for a new journal with a new
instance id.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sqlite3
import subprocess
import sys

import pytest
from rig import peek

from shoed.store.check import check_journal, read_wal_index
from shoed.store.journal import SCHEMA_VERSION, Journal
from shoed.store.records import RecordLog
from shoed.store.statedir import JournalDamaged, StorageError

ROOT = pathlib.Path(__file__).resolve().parent.parent

CRASH = """
import os, pathlib, sys
from shoed.store.journal import Journal
j = Journal(pathlib.Path(sys.argv[1]))
for i in range(int(sys.argv[2])):
    with j.transaction():
        j.add_input(float(i), "x" * 300)
        j.add_event(i + 1, f"T-{j.instance_id}-{i + 1}", "card", '{"n": %d}' % i)
    if sys.argv[3] == "checkpoint" and i == int(sys.argv[2]) // 2:
        j.checkpoint_if_due(every=0)
print(j.instance_id, flush=True)
os._exit(0)  # no close: as kill -9 leaves it
"""


def crash(state: pathlib.Path, commits: int = 40, checkpoint: bool = False) -> str:
    """A journal whose writer died without closing it; returns its instance id."""
    done = subprocess.run([sys.executable, "-c", CRASH, str(state), str(commits),
                           "checkpoint" if checkpoint else "-"],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    return done.stdout.strip()


def clean(state: pathlib.Path, commits: int = 40) -> str:
    journal = Journal(state)
    for i in range(commits):
        with journal.transaction():
            journal.add_event(i + 1, f"T-{journal.instance_id}-{i + 1}", "card", "{}")
    instance = journal.instance_id
    journal.close()
    return instance


def refused(state: pathlib.Path, *words: str) -> str:
    with pytest.raises(JournalDamaged) as caught:
        Journal(state)
    message = str(caught.value)
    for word in words:
        assert word in message, message
    assert "--new-journal" in message and "check-journal" in message
    ok, lines = check_journal(state)
    assert not ok and lines, lines
    return message


def db(state: pathlib.Path) -> pathlib.Path:
    return state / "journal.sqlite3"


def wal(state: pathlib.Path) -> pathlib.Path:
    return state / "journal.sqlite3-wal"


# -- each damage, refused -----------------------------------------------------------------


def test_database_deleted_with_its_wal_left_is_refused(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    crash(state)
    db(state).unlink()
    refused(state, str(db(state)), "write-ahead log", "deleted or moved")
    assert not db(state).exists()  # nothing was created in its place


def test_database_deleted_after_a_clean_stop_is_refused(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    instance = clean(state)
    assert not wal(state).exists()  # a clean stop leaves only the database (and journal.id)
    db(state).unlink()
    refused(state, "journal.id", instance)


def test_journal_from_a_newer_schema_is_refused(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    clean(state)
    with sqlite3.connect(db(state)) as conn:
        conn.execute("PRAGMA user_version=7")
    refused(state, "schema version 7", "newer")


def test_truncated_wal_is_refused(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    crash(state)
    index = read_wal_index(db(state))
    assert index is not None and index.max_frame > 40  # the writer's witness
    size = wal(state).stat().st_size
    os.truncate(wal(state), size // 2)
    refused(state, str(wal(state)), "truncated")


@pytest.mark.parametrize("keep", [0, 10])
def test_wal_cut_to_nothing_or_its_header_damaged_is_refused(tmp_path: pathlib.Path,
                                                             keep: int) -> None:
    state = tmp_path / "state"
    crash(state)
    with open(wal(state), "r+b") as f:
        f.truncate(keep) if keep == 0 else f.write(b"\x00" * 32)
    refused(state, str(wal(state)))


def test_wal_deleted_after_a_crash_is_refused(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    crash(state)
    wal(state).unlink()
    refused(state, "write-ahead log", "missing")


def test_process_ending_without_close_is_not_damage(tmp_path: pathlib.Path) -> None:
    """A daemon that exits without Journal.close() (an exception, storage failed) still
    closes its SQLite connection at exit: SQLite checkpoints and deletes the log. That is
    no damage, and nothing is lost."""
    state = tmp_path / "state"
    code = ("import pathlib, sys; from shoed.store.journal import Journal; "
            "j = Journal(pathlib.Path(sys.argv[1]))\n"
            "with j.transaction(): j.add_event(1, 'T-x-1', 'card', '{}')\n"
            "raise SystemExit(3)")
    done = subprocess.run([sys.executable, "-c", code, str(state)], cwd=ROOT)
    assert done.returncode == 3
    assert not wal(state).exists()  # SQLite's own close
    journal = Journal(state)
    assert not journal.was_clean and journal.quick_checked
    assert journal.event_range() == (1, 1)
    journal.close()


def test_wal_frame_damaged_in_the_middle_is_refused_and_stays_refused(
        tmp_path: pathlib.Path) -> None:
    """SQLite drops every frame from the first bad checksum on, silently; the files still
    look whole (right size, last frame there). Only the writer's index tells."""
    state = tmp_path / "state"
    crash(state)
    index = read_wal_index(db(state))
    assert index is not None
    frame = 24 + index.page_size
    with open(wal(state), "r+b") as f:
        f.seek(32 + 5 * frame + 24 + 100)  # inside the 6th frame's page
        f.write(os.urandom(64))
    message = refused(state, "damaged", "committed transactions would be lost")
    assert (state / "journal.damaged").exists()
    # SQLite's recovery has rebuilt the index since: the record keeps the refusal.
    again = refused(state, "found damaged before")
    assert message.split(": ", 1)[1][:40] in again


def _leaf_pages(path: pathlib.Path, table: str) -> tuple[list[int], int]:
    """The leaf pages of `table` in the database file itself (not the log), and the page
    size."""
    with sqlite3.connect(f"file:{path}?immutable=1", uri=True) as conn:
        pages = [int(r[0]) for r in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno",
            (table,))]
        return pages, int(conn.execute("PRAGMA page_size").fetchone()[0])


def test_corrupted_page_after_a_crash_is_refused(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    crash(state, commits=300, checkpoint=True)
    pages, size = _leaf_pages(db(state), "inputs")
    with open(db(state), "r+b") as f:  # the first leaf: rows the log no longer holds
        f.seek((pages[0] - 1) * size)
        f.write(b"\xee" * 64)
    refused(state, "corrupt")


def test_corrupted_page_after_a_clean_stop_is_found_by_the_background_check(
        tmp_path: pathlib.Path) -> None:
    """After a clean stop the start skips the quick check; the full check that the daemon
    runs after READY finds the damage and the next start refuses the journal."""
    state = tmp_path / "state"
    clean(state, commits=300)
    pages, size = _leaf_pages(db(state), "events")
    with open(db(state), "r+b") as f:
        f.seek((pages[len(pages) // 2] - 1) * size)
        f.write(b"\xee" * 64)
    journal = Journal(state)
    assert not journal.quick_checked
    problems = journal.integrity_check()
    journal.close()
    assert problems, "the integrity check found nothing"
    refused(state, "integrity_check")


@pytest.mark.parametrize("damage", ["garbage", "half", "empty", "directory", "foreign",
                                    "other_sqlite"])
def test_garbage_truncated_empty_directory_or_foreign_journal_is_refused(
        tmp_path: pathlib.Path, damage: str) -> None:
    state = tmp_path / "state"
    clean(state, commits=300)
    path = db(state)
    if damage == "garbage":
        path.write_bytes(os.urandom(50_000))
    elif damage == "half":
        os.truncate(path, path.stat().st_size // 2)
    elif damage == "empty":
        os.truncate(path, 0)
    elif damage == "directory":
        path.unlink()
        path.mkdir()
    elif damage == "foreign":
        other = tmp_path / "other"
        clean(other)
        shutil.copy(db(other), path)
    else:
        path.unlink()
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE t (x)")
    with pytest.raises(StorageError) as caught:  # JournalDamaged or a plain refusal
        Journal(state)
    assert str(path) in str(caught.value)
    assert not check_journal(state)[0]
    if damage != "half":  # a half database may still read as a (smaller) one
        assert isinstance(caught.value, JournalDamaged), caught.value


# -- what is accepted -----------------------------------------------------------------------


def test_a_crash_is_not_damage_and_loses_nothing(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    instance = crash(state, commits=60)
    journal = Journal(state)
    assert journal.instance_id == instance and not journal.was_clean
    assert journal.quick_checked and journal.event_range() == (1, 60)
    journal.close()
    journal = Journal(state)
    assert journal.was_clean and not journal.quick_checked
    journal.close()
    ok, lines = check_journal(state)
    assert ok and f"instance {instance}" in lines and "events seq 1..60, 60 not yet " \
        "published" in lines, lines


def test_journal_of_the_first_schema_is_migrated(tmp_path: pathlib.Path) -> None:
    """A journal written before the schema had a version (user_version 0, no created_up,
    no journal.id) opens, keeps its instance and its events, and gains the new columns."""
    state = tmp_path / "state"
    state.mkdir(mode=0o750)
    with sqlite3.connect(db(state)) as conn:
        conn.executescript("""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
            CREATE TABLE inputs (id INTEGER PRIMARY KEY, at REAL NOT NULL, body TEXT NOT NULL);
            CREATE TABLE events (seq INTEGER PRIMARY KEY, event_id TEXT NOT NULL UNIQUE,
                type TEXT NOT NULL, created REAL NOT NULL, body TEXT NOT NULL,
                published INTEGER NOT NULL DEFAULT 0);
            CREATE TABLE snapshots (input_id INTEGER PRIMARY KEY, state TEXT NOT NULL);
            CREATE TABLE responses (request_id TEXT PRIMARY KEY, created REAL NOT NULL,
                body TEXT NOT NULL);
            INSERT INTO meta VALUES ('instance_id', 'old1');
            INSERT INTO events VALUES (1, 'T-old1-1', 'card', 1.0, '{}', 1);
            INSERT INTO responses VALUES ('r-1', 1.0, '{"request_id": "r-1", "ok": true}');
        """)
    journal = Journal(state)
    assert journal.instance_id == "old1" and journal.event_range() == (1, 1)
    assert peek(journal.path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    # Its answers were all from the bare topic: remembered for `anonymous`, no fingerprint.
    assert journal.response("anonymous", "r-1") == ("", {"request_id": "r-1", "ok": True})
    journal.close()
    assert (state / "journal.id").read_text().strip() == "old1"


# -- the operator's way out: --new-journal -----------------------------------------------------


def _files(directory: pathlib.Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in directory.iterdir() if p.is_file()}


@pytest.mark.parametrize("damage", ["db_deleted", "truncated_wal", "newer_schema",
                                    "frame_damaged"])
def test_new_journal_moves_the_damaged_files_aside_and_starts_a_new_instance(
        tmp_path: pathlib.Path, damage: str) -> None:
    state = tmp_path / "state"
    old = crash(state)
    if damage == "db_deleted":
        db(state).unlink()
    elif damage == "truncated_wal":
        os.truncate(wal(state), wal(state).stat().st_size // 3)
    elif damage == "newer_schema":
        Journal(state).close()
        with sqlite3.connect(db(state)) as conn:
            conn.execute("PRAGMA user_version=9")
    else:
        with open(wal(state), "r+b") as f:
            f.seek(32 + 3 * 1048 + 300)
            f.write(os.urandom(32))
    before = {k: v for k, v in _files(state).items() if k != "journal.lock"}
    journal = Journal(state, new_journal=True)
    try:
        assert journal.moved_aside is not None and journal.damage
        assert journal.instance_id != old and journal.event_range() == (0, 0)
        moved = _files(journal.moved_aside)
        for name, size in before.items():  # everything is kept, nothing deleted
            if name.endswith("-shm") or name == "journal.damaged":
                assert name in moved
            else:
                assert moved.get(name) == size, (name, moved)
    finally:
        journal.close()
    again = Journal(state)  # the new journal is a sound one
    assert again.instance_id == journal.instance_id and again.moved_aside is None
    again.close()


def test_new_journal_keeps_a_sound_journal(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    instance = crash(state)
    journal = Journal(state, new_journal=True)
    assert journal.instance_id == instance and journal.moved_aside is None
    assert journal.event_range() == (1, 40)
    journal.close()


def test_daemon_runs_the_full_check_after_ready_and_logs_what_it_finds(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    from rig import make_settings

    from shoed import logs
    from shoed.daemon import Daemon
    from shoed.status import TableStatus
    from shoed.store.recorder import Recorder

    state = tmp_path / "state"
    # Dealt through the engine (the daemon's start replays it and must find its events).
    subprocess.run([sys.executable, "bench/grow_journal.py", "--events", "300", "--state",
                    str(state)], check=True, capture_output=True, cwd=ROOT)
    pages, size = _leaf_pages(db(state), "events")
    with open(db(state), "r+b") as f:
        f.seek((pages[len(pages) // 2] - 1) * size)
        f.write(b"\xee" * 64)
    settings = make_settings(state, "mqtt://127.0.0.1:1")
    status = TableStatus("T9")
    recorder = Recorder.open(settings, Daemon(settings).engine_config, status,
                             logs.get("shoed"))  # a clean stop: no check before READY
    capsys.readouterr()
    asyncio.run(recorder.integrity_check())  # the task run() starts after READY
    # Not only logged (outside review: status and STATUS= said storage was fine, and the
    # stream had nothing, until the next start refused the journal): the status, the
    # STATUS= line and a held alarm in the stream say it; storage still works.
    assert status.journal_corrupt and status.storage_ok
    assert "JOURNAL CORRUPT" in status.line()
    assert any("journal corrupt" in w for w in status.payload()["warnings"])
    assert status.payload()["journal_corrupt"] == status.journal_corrupt
    (alarm,) = [a for a in recorder.engine.public_state()["alarms"]
                if a["code"] == "journal_corrupt"]
    assert alarm["ackable"] is False
    bodies = [json.loads(body) for _, body in recorder.outbox.fresh]  # to the publisher
    raised = [e for e in bodies if e["type"] == "alarm" and e["code"] == "journal_corrupt"]
    assert [e["active"] for e in raised] == [True] and "--new-journal" in raised[0]["message"]
    recorder.journal.close()
    out = capsys.readouterr().out
    assert '"journal_corrupt"' in out and '"level": "error"' in out, out
    refused(state, "integrity_check")


@pytest.mark.parametrize("deleted", ["middle", "tail"])
def test_events_deleted_from_the_journal_are_found_by_the_checks(
        tmp_path: pathlib.Path, deleted: str) -> None:
    """SQLite's checks are structural: rows deleted from `events` (a hole in the middle,
    or the newest ones) passed both, and the daemon started with a permanent hole
    (outside review). The events kept are one gapless run of seqs: `check-journal` and
    the check after READY now find the hole, and the next start refuses the journal."""
    import sqlite3

    state = tmp_path / "state"
    clean(state, commits=40)
    conn = sqlite3.connect(db(state))
    where = "seq BETWEEN 10 AND 20" if deleted == "middle" else "seq > 35"
    with conn:
        conn.execute(f"DELETE FROM events WHERE {where}")
    conn.close()
    ok, lines = check_journal(state)
    if deleted == "middle":
        assert not ok and "11 missing (the first at seq 10)" in lines[0], lines
        journal = Journal(state)  # a start does not count the events (READY waits not)
        assert journal.integrity_check() == [
            "events missing: seq 1..40 holds 29 events, 11 missing (the first at seq 10)"]
        journal.close()
        refused(state, "events missing")
    else:
        # The newest ones gone leave no hole to see here: the start's replay of the
        # inputs finds them missing (below, on a journal dealt through the engine).
        assert ok, lines


def test_a_start_whose_inputs_lead_past_the_journals_events_is_refused(
        tmp_path: pathlib.Path) -> None:
    """The newest events deleted after a clean stop: the inputs (from the last snapshot)
    lead to a seq the events do not reach. The start refuses to go on before it makes a
    permanent hole (outside review: it logged `journal_replay_mismatch` and went on);
    `--new-journal` moves the journal aside and starts a new one."""
    import sqlite3

    from rig import make_settings

    from shoed import logs
    from shoed.daemon import Daemon
    from shoed.status import TableStatus
    from shoed.store.recorder import Recorder

    state = tmp_path / "state"
    subprocess.run([sys.executable, "bench/grow_journal.py", "--events", "300", "--state",
                    str(state)], check=True, capture_output=True, cwd=ROOT)
    settings = make_settings(state, "mqtt://127.0.0.1:1")
    config = Daemon(settings).engine_config
    # A daemon's clean stop: its last snapshot covers every input.
    Recorder.open(settings, config, TableStatus("T9"), logs.get("shoed")).close()
    conn = sqlite3.connect(db(state))
    with conn:
        high = conn.execute("SELECT MAX(seq) FROM events").fetchone()[0]
        conn.execute("DELETE FROM events WHERE seq > ?", (high - 5,))
    conn.close()
    with pytest.raises(JournalDamaged, match=f"lead to seq {high}, its events end at "
                                             f"seq {high - 5}"):
        Recorder.open(settings, config, TableStatus("T9"), logs.get("shoed"))
    refused(state, "events missing")  # and again: recorded beside the journal
    fresh = settings.model_copy(update={"state": settings.state.model_copy(
        update={"new_journal": True})})
    recorder = Recorder.open(fresh, config, TableStatus("T9"), logs.get("shoed"))
    assert recorder.journal.moved_aside is not None and recorder.engine.seq == 0
    recorder.journal.close()


def test_inputs_replayed_by_another_engine_to_another_seq_are_refused_as_such_not_damage(
        tmp_path: pathlib.Path) -> None:
    """After a crash, the inputs after the last snapshot are replayed at the start. Dealt
    by another shoed version or [rules] config (the journal's meta names the engine that
    dealt them), they may end elsewhere: the start is refused naming that, and nothing
    is recorded as damage, so the shoed that dealt them can still stop it cleanly
    (outside review: an upgrade after a power cut was refused as "events missing")."""
    import sqlite3

    from rig import make_settings

    from shoed import logs
    from shoed.daemon import Daemon
    from shoed.status import TableStatus
    from shoed.store.recorder import Recorder
    from shoed.store.restore import ENGINE_META
    from shoed.store.statedir import StorageError

    state = tmp_path / "state"
    subprocess.run([sys.executable, "bench/grow_journal.py", "--events", "300", "--state",
                    str(state)], check=True, capture_output=True, cwd=ROOT)
    conn = sqlite3.connect(db(state))
    with conn:  # dealt by another engine, whose events went further
        high = conn.execute("SELECT MAX(seq) FROM events").fetchone()[0]
        conn.execute("INSERT INTO events (seq, event_id, type, created, body, published) "
                     "VALUES (?, 'x', 'card', 0, '{}', 1)", (high + 3,))
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, '0123456789ab')", (ENGINE_META,))
    conn.close()
    settings = make_settings(state, "mqtt://127.0.0.1:1")
    config = Daemon(settings).engine_config
    with pytest.raises(StorageError, match="another shoed version or \\[rules\\] config") \
            as caught:
        Recorder.open(settings, config, TableStatus("T9"), logs.get("shoed"))
    assert not isinstance(caught.value, JournalDamaged)
    assert not (state / "journal.damaged").exists()


@pytest.mark.parametrize(("damage", "records", "more"), [
    ("newer_schema", "none", False),
    # a crash left a frame's input in the record log, not in the database: its events
    # may have been published after the last seq the database holds (decisions.md 213)
    ("newer_schema", "unwritten", True),
    ("newer_schema", "written", False),  # an entry the database already holds
    ("newer_schema", "garbage", True),  # a record log that cannot be read: cannot tell
    ("db_deleted", "none", True),
])
def test_a_new_journal_keeps_where_the_one_it_replaced_ended_and_replay_says_it(
        tmp_path: pathlib.Path, damage: str, records: str, more: bool) -> None:
    """A consumer behind on a journal that --new-journal moves aside never gets its last
    events (they are not in the new one). The new journal keeps the old one's instance
    and its last event's seq (None when its database is gone), for as long as it lives,
    and every `replay` answer names them (`previous_instance`), so the consumer can tell
    what it missed (outside review, 2026-12-07: it skipped them without a word)."""
    from rig import make_settings

    from shoed import logs
    from shoed.daemon import Daemon
    from shoed.desk import CommandDesk
    from shoed.status import TableStatus
    from shoed.store.recorder import Recorder

    state = tmp_path / "state"
    subprocess.run([sys.executable, "bench/grow_journal.py", "--events", "300", "--state",
                    str(state)], check=True, capture_output=True, cwd=ROOT)
    with sqlite3.connect(db(state)) as conn:
        old = conn.execute("SELECT value FROM meta WHERE key = 'instance_id'").fetchone()[0]
        last = conn.execute("SELECT MAX(seq) FROM events").fetchone()[0]
        newest = conn.execute("SELECT MAX(id) FROM inputs").fetchone()[0]
    if records == "garbage":
        (state / "journal.records").write_bytes(b"not a record log")
    elif records != "none":
        log = RecordLog(state / "journal.records", old)
        taken = newest + 1 if records == "unwritten" else newest
        log.append([(taken, 1.0, '{"type": "tick"}')], taken, "{}")
        log.close()
    if damage == "newer_schema":
        with sqlite3.connect(db(state)) as conn:
            conn.execute("PRAGMA user_version=7")
    else:
        db(state).unlink()
    settings = make_settings(state, "mqtt://127.0.0.1:1")
    settings = settings.model_copy(update={"state": settings.state.model_copy(
        update={"new_journal": True})})
    config = Daemon(settings).engine_config
    recorder = Recorder.open(settings, config, TableStatus("T9"), logs.get("shoed"))
    journal = recorder.journal
    ended = last if damage == "newer_schema" else None
    assert journal.moved_aside is not None and journal.instance_id != old
    assert journal.previous_instance == {"instance": old, "last_seq": ended,
                                         "more_possible": more}
    assert json.loads(journal.meta("previous_instance") or "") == {
        "instance": old, "last_seq": ended, "more_possible": more,
        "moved_to": str(journal.moved_aside)}
    assert not (state / "journal.previous").exists()  # taken into the new journal
    desk = CommandDesk(recorder, logs.get("shoed"))
    out = desk.handle(json.dumps({"request_id": "p1", "command": "replay", "operator": "x",
                                  "from_seq": 1}))
    assert out.body is not None and out.body["error"]["code"] == "out_of_range"
    assert out.body["error"]["previous_instance"] == {"instance": old, "last_seq": ended,
                                                      "more_possible": more}
    journal.close()
    again = Journal(state)  # kept across starts
    assert again.previous_instance is not None and again.previous_instance["instance"] == old
    again.close()

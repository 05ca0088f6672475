"""The journal's own contract: what an effect write leaves on disk, page size, WAL bound."""

from __future__ import annotations

import pathlib

from shoed.store.journal import Journal


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

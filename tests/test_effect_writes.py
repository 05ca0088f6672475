"""The effect write after PUBACKs: at once when the last one is old, shared by a burst.

A recorded device input's events reach the journal's rows (and their publish marks) in
the recorder's effect write, after their PUBACK. At a table's pace each PUBACK writes its
own; cards closer together than EFFECT_COALESCE_S share one write, which a later PUBACK
or the effect timer makes (docs/decisions.md 135). The publisher's look at an outbox
with nothing new reads and writes nothing.
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest
from kit import asynctest
from rig import peek

from firmware_protocol import DedupState
from shoed.core.config import EngineConfig
from shoed.core.engine import Engine
from shoed.core.inputs import Notice
from shoed.device.inputs import stamp
from shoed.status import TableStatus
from shoed.store import recorder as rec
from shoed.store.journal import Journal


class Log:
    def info(self, event: str, **kw: object) -> None:
        pass

    warning = error = exception = info


def _open(tmp_path: pathlib.Path) -> tuple[rec.Recorder, list[int]]:
    journal = Journal(tmp_path / "state")
    recorder = rec.Recorder(journal, Engine(EngineConfig("T1"), instance_id="i"),
                            TableStatus("T1"), 1000, Log())
    commits: list[int] = []
    inner = journal.transaction

    def counted() -> Any:
        commits.append(1)
        return inner()

    journal.transaction = counted  # type: ignore[method-assign]
    return recorder, commits


def _card_like(recorder: rec.Recorder, seq: int) -> int:
    """One recorded device input (record, then apply, as a frame is): its last event."""
    inputs = [Notice(**stamp(recorder.uptime), code="bad_payload", message=f"frame {seq}")]
    recorded = recorder.record(inputs, DedupState(1, seq))  # type: ignore[arg-type]
    assert recorded is not None
    recorder.apply(recorded)
    return recorder.engine.seq


def _through(recorder: rec.Recorder, n: int) -> int:
    """One recorded input, taken by the publisher alone, then its PUBACK: its event."""
    seq = _card_like(recorder, n)
    assert [s for s, _ in recorder.outbox.take()] == [seq]
    recorder.outbox.acked(seq)
    return seq


async def _warm(recorder: rec.Recorder) -> int:
    """A first event through: the outbox's first look reads the journal (and writes the
    effect), then the PUBACK, whose mark the coalescing timer writes; then a pause as
    long as the coalescing."""
    seq = _through(recorder, 1)
    assert recorder.outbox.dirty  # the mark, after the write the take made
    await asyncio.sleep(rec.EFFECT_COALESCE_S + 0.02)
    assert not recorder.outbox.dirty
    await asyncio.sleep(rec.EFFECT_COALESCE_S + 0.02)
    return seq


def _published_rows(recorder: rec.Recorder) -> list[tuple[int, int]]:
    return [(int(s), int(p)) for s, p in
            peek(recorder.journal.path, "SELECT seq, published FROM events ORDER BY seq")]


@asynctest
async def test_a_burst_of_pubacks_shares_one_effect_write_and_the_timer_ends_it(
        tmp_path: pathlib.Path) -> None:
    recorder, commits = _open(tmp_path)
    outbox = recorder.outbox
    zero = await _warm(recorder)
    first = _card_like(recorder, 2)
    rows = outbox.take()
    assert [seq for seq, _ in rows] == [first]  # no gap: no journal read, no write
    commits.clear()
    outbox.acked(first)  # the last effect write is old: written now, marked published
    assert len(commits) == 1 and not outbox.dirty
    assert _published_rows(recorder) == [(zero, 1), (first, 1)]

    second = _card_like(recorder, 3)
    assert [seq for seq, _ in outbox.take()] == [second]
    commits.clear()
    outbox.acked(second)  # within EFFECT_COALESCE_S of the last write: not yet
    assert commits == [] and outbox.dirty
    assert _published_rows(recorder) == [(zero, 1), (first, 1)]
    assert outbox.depth() == 0  # the PUBACK counts at once, on disk or not

    third = _card_like(recorder, 4)
    outbox.take()
    commits.clear()  # its record
    outbox.acked(third)
    assert commits == [] and outbox.dirty

    # no later PUBACK: the timer armed at the apply writes it
    await asyncio.sleep(rec.EFFECT_WRITE_DELAY_S + 0.05)
    assert len(commits) == 1 and not outbox.dirty
    assert _published_rows(recorder) == [(zero, 1), (first, 1), (second, 1), (third, 1)]

    await asyncio.sleep(rec.EFFECT_COALESCE_S)
    fourth = _card_like(recorder, 5)
    outbox.take()
    commits.clear()
    outbox.acked(fourth)  # a table's pace: every PUBACK writes its own effect
    assert len(commits) == 1 and _published_rows(recorder)[-1] == (fourth, 1)
    recorder.close()


@asynctest
async def test_an_effect_left_waiting_is_written_by_the_next_pubacks_or_a_stop(
        tmp_path: pathlib.Path) -> None:
    recorder, _ = _open(tmp_path)
    outbox = recorder.outbox
    first = await _warm(recorder)
    _through(recorder, 2)  # written at once
    third = _through(recorder, 3)  # waits
    assert outbox.dirty
    recorder.close()  # a stop writes what waits, and no timer writes after it
    assert not outbox.dirty
    await asyncio.sleep(rec.EFFECT_WRITE_DELAY_S + 0.05)
    assert recorder.status.storage_ok  # nothing tried the closed journal
    journal = Journal(tmp_path / "state")
    assert journal.unpublished() == [] and journal.event_range() == (first, third)
    journal.close()


@asynctest
async def test_taking_from_an_outbox_with_nothing_new_reads_and_writes_nothing(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder, commits = _open(tmp_path)
    outbox = recorder.outbox
    assert outbox.take() == []  # the first look reads the journal (a backlog may be there)
    await _warm(recorder)
    _through(recorder, 2)
    _through(recorder, 3)  # its effect waits (the write above is recent)
    assert outbox.dirty

    def no_read(*args: object) -> Any:
        raise AssertionError("the journal was read")

    monkeypatch.setattr(recorder.journal, "unpublished", no_read)
    commits.clear()
    for _ in range(3):
        assert outbox.take() == []
    assert commits == []  # nor written: the effect still waits for its timer
    monkeypatch.undo()

    # A backlog the outbox does not hold in memory (a PUBACK missing: the connection
    # broke) is read from the journal again, after the pending effect is written.
    third = _card_like(recorder, 4)
    outbox.take()  # sent, never acknowledged
    assert [seq for seq, _ in outbox.take()] == [third]
    assert not outbox.dirty or outbox.unwritten == []
    recorder.close()


@asynctest
async def test_a_rolled_back_step_forgets_its_events_for_the_outbox_too(
        tmp_path: pathlib.Path) -> None:
    recorder, _ = _open(tmp_path)
    outbox = recorder.outbox
    seq = _through(recorder, 1)
    mark = outbox.mark()
    outbox.add(seq + 1, "x", "alarm", "{}")
    outbox.rollback(mark)
    assert outbox.newest_seq == seq and outbox.fresh == [] and outbox.take() == []
    recorder.close()


@asynctest
async def test_an_unreadable_journal_sends_nothing_rather_than_out_of_order(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Older events unpublished on disk and a newer one in memory, the journal unreadable:
    the newer one must not go first (its PUBACK's mark would cover the older ones)."""
    from shoed.store.statedir import StorageError

    recorder, _ = _open(tmp_path)
    outbox = recorder.outbox
    for n in (1, 2):
        _card_like(recorder, n)
    recorder.write_effects()  # events 1 and 2 on disk, unpublished
    outbox.fresh.clear()  # as after a start: the outbox has read nothing yet
    third = _card_like(recorder, 3)

    def unreadable(*args: object) -> Any:
        raise StorageError("journal: disk I/O error")

    monkeypatch.setattr(recorder.journal, "unpublished", unreadable)
    monkeypatch.setattr(recorder.journal, "transaction", unreadable)  # the effect too
    assert outbox.take() == []
    assert [row[0] for row in outbox.unwritten] == [third]
    monkeypatch.undo()
    recorder.status.set(storage_ok=True, storage_error=None)
    outbox.fresh.append((third, ""))  # still not following a published one
    assert [seq for seq, _ in outbox.take()] == [1, 2, 3]
    recorder.close()

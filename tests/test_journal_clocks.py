"""Memories that span restarts age on the wall clock AND on the uptime kept in the journal
(issue 13 §4): a step of the wall clock either way never forgets anything too early.

The journal's clocks are injected (`wall`, `monotonic`); "a reboot" starts the monotonic
clock again from a small value; "a kill -9" drops the journal without closing it.
"""

from __future__ import annotations

import json
import math
import pathlib

import pytest
from kit import asynctest

from shoed.store.journal import Journal
from shoed.store.uptime import Uptime

DAY = 86400.0
HOUR = 3600.0


class Clocks:
    def __init__(self) -> None:
        self.wall = 1_800_000_000.0
        self.mono = 12_345.0

    def pass_(self, seconds: float) -> None:
        """Real time passes: both clocks move."""
        self.wall += seconds
        self.mono += seconds

    def open(self, state: pathlib.Path) -> Journal:
        return Journal(state, wall=lambda: self.wall, monotonic=lambda: self.mono)


_LEAKED: list[object] = []


def kill(journal: Journal) -> None:
    """As kill -9 leaves it: nothing more is written, and SQLite does not close the
    connection either (a close would checkpoint); the kernel drops the lock."""
    _LEAKED.append(journal._db)
    journal._db = None
    journal._unlock()


def test_uptime_counts_from_its_start_and_never_goes_back() -> None:
    now = [100.0]
    uptime = Uptime(50.0, monotonic=lambda: now[0])
    assert uptime.now() == 50.0
    now[0] = 130.0
    assert uptime.now() == 80.0
    now[0] = 90.0  # a monotonic clock does not do this; the uptime would not follow
    assert uptime.now() == 50.0
    for bad in (-1.0, math.nan):
        with pytest.raises(ValueError):
            Uptime(bad)


def test_uptime_accumulates_across_runs_and_reboots(tmp_path: pathlib.Path) -> None:
    clocks = Clocks()
    journal = clocks.open(tmp_path / "state")
    assert journal.uptime.now() == 0.0
    clocks.pass_(100.0)
    journal.close()
    clocks.wall += 7 * DAY  # a week switched off: not counted
    clocks.mono = 3.0  # a reboot
    journal = clocks.open(tmp_path / "state")
    assert journal.uptime.now() == pytest.approx(100.0)
    clocks.pass_(50.0)
    assert journal.uptime.now() == pytest.approx(150.0)
    journal.close()


def test_kill9_loses_at_most_the_unsaved_part(tmp_path: pathlib.Path) -> None:
    clocks = Clocks()
    journal = clocks.open(tmp_path / "state")
    clocks.pass_(3.0)
    assert not journal.save_uptime()  # saved less than 5 s ago
    with journal.transaction():
        journal.add_input(1.0, "{}")  # not due yet: the commit does not carry it
    clocks.pass_(4.0)
    with journal.transaction():
        journal.add_input(2.0, "{}")  # 7 s: due, carried by the commit
    clocks.pass_(2.0)
    kill(journal)  # at 9 s
    clocks.mono = 1.0
    journal = clocks.open(tmp_path / "state")
    assert journal.uptime.now() == pytest.approx(7.0)  # lost 2 s, less than 5
    clocks.pass_(6.0)
    assert journal.save_uptime()  # the shell's periodic save, once due
    kill(journal)
    journal = clocks.open(tmp_path / "state")
    assert journal.uptime.now() == pytest.approx(13.0)
    journal.close()


def test_kill9_goes_on_from_the_newest_inputs_reading_of_the_uptime(
        tmp_path: pathlib.Path) -> None:
    """The inputs recorded after the last save carry `mono`: a pull begun before a kill -9
    and finished after it must not find its 3 s timeout stretched by the lost seconds."""
    clocks = Clocks()
    journal = clocks.open(tmp_path / "state")
    clocks.pass_(4.0)  # saved at 0 s, next due at 5 s
    journal.record([(1.0, json.dumps({"kind": "tick", "at": 1.0,
                                      "mono": journal.uptime.now()}))], "[1, 3]")
    clocks.pass_(0.1)
    kill(journal)  # at 4.1 s: the saved uptime says 0
    clocks.mono = 1.0
    journal = clocks.open(tmp_path / "state")
    assert journal.uptime.now() == pytest.approx(4.0)  # from the recorded input, not 0
    kill(journal)
    journal = clocks.open(tmp_path / "state")  # and it was saved so
    assert journal.uptime.now() == pytest.approx(4.0)
    journal.close()
    for body in ("{not json", "[]", json.dumps({"mono": None})):  # nothing to go on
        other = Clocks()
        j = other.open(tmp_path / f"other{len(body)}")
        with j.transaction():
            j.add_input(1.0, body)
        kill(j)
        reopened = other.open(tmp_path / f"other{len(body)}")
        assert reopened.uptime.now() == 0.0
        reopened.close()


@pytest.mark.parametrize("step", [HOUR, 25 * HOUR, 400 * DAY])
def test_request_id_survives_a_forward_step_of_the_wall_clock(tmp_path: pathlib.Path,
                                                               step: float) -> None:
    """Issue 13: after a forward step a retried request_id was applied twice."""
    clocks = Clocks()
    journal = clocks.open(tmp_path / "state")
    with journal.transaction():
        journal.add_response("anonymous", "req-1", "fp", {"request_id": "req-1", "ok": True})
    clocks.pass_(40.0)
    clocks.wall += step  # NTP steps the wall clock forward
    journal.prune(retention_days=1)
    assert journal.response("anonymous", "req-1") == ("fp", {"request_id": "req-1", "ok": True})
    # ... and across a restart the memory still holds, then ends when old by both.
    journal.close()
    clocks.mono = 5.0
    journal = clocks.open(tmp_path / "state")
    clocks.pass_(DAY - 60.0)  # uptime now just under 24 h since the answer
    journal.prune(retention_days=1)
    assert journal.response("anonymous", "req-1") is not None
    clocks.pass_(30.0)
    journal.prune(retention_days=1)
    assert journal.response("anonymous", "req-1") is None
    journal.close()


def test_request_id_survives_a_backward_step_of_the_wall_clock(tmp_path: pathlib.Path) -> None:
    clocks = Clocks()
    journal = clocks.open(tmp_path / "state")
    with journal.transaction():
        journal.add_response("anonymous", "req-1", "fp", {"ok": True})
    clocks.wall -= 2 * HOUR  # stepped back
    clocks.pass_(25 * HOUR)  # 25 h of uptime, 23 h by the wall clock
    journal.prune(retention_days=1)
    assert journal.response("anonymous", "req-1") is not None
    clocks.pass_(2 * HOUR)
    journal.prune(retention_days=1)
    assert journal.response("anonymous", "req-1") is None
    journal.close()


def _events(journal: Journal, first: int, last: int) -> None:
    with journal.transaction():
        for seq in range(first, last + 1):
            journal.add_event(seq, f"T-i-{seq}", "card", f'{{"seq": {seq}}}', published=True)


@pytest.mark.parametrize("step", [HOUR, 31 * DAY])
def test_replay_range_survives_a_forward_step(tmp_path: pathlib.Path, step: float) -> None:
    """Issue 13: events 40 s old were pruned from the replay range after a forward step."""
    clocks = Clocks()
    journal = clocks.open(tmp_path / "state")
    _events(journal, 1, 50)
    clocks.pass_(40.0)
    clocks.wall += step
    assert journal.prune(retention_days=1 if step < DAY else 30) == 0
    assert journal.event_range() == (1, 50)
    journal.close()


def test_replay_range_survives_a_backward_step_and_is_pruned_when_old_by_both(
        tmp_path: pathlib.Path) -> None:
    clocks = Clocks()
    journal = clocks.open(tmp_path / "state")
    _events(journal, 1, 10)
    clocks.pass_(DAY / 2)
    _events(journal, 11, 20)
    clocks.wall -= 6 * HOUR  # stepped back
    clocks.pass_(DAY)  # the first ten: 36 h of uptime, 30 h of wall time; the rest 24/18 h
    assert journal.prune(retention_days=1) == 10
    assert journal.event_range() == (11, 20)
    clocks.pass_(7 * HOUR)
    assert journal.prune(retention_days=1) == 9  # the newest event always stays
    assert journal.event_range() == (20, 20)
    journal.close()


def test_time_switched_off_does_not_age_anything_by_the_uptime(tmp_path: pathlib.Path) -> None:
    """Kept longer rather than shorter: a month switched off is not a month of uptime."""
    clocks = Clocks()
    journal = clocks.open(tmp_path / "state")
    _events(journal, 1, 5)
    journal.close()
    clocks.wall += 40 * DAY
    clocks.mono = 2.0
    journal = clocks.open(tmp_path / "state")
    assert journal.prune(retention_days=30) == 0
    clocks.pass_(30 * DAY + 1)
    assert journal.prune(retention_days=30) == 4
    journal.close()


def test_prune_in_batches_drops_the_oldest_first_and_keeps_one_gapless_run(
        tmp_path: pathlib.Path) -> None:
    clocks = Clocks()
    journal = clocks.open(tmp_path / "state")
    _events(journal, 1, 20)
    clocks.pass_(2 * DAY)
    _events(journal, 21, 25)  # young: they stay
    assert journal.prune(retention_days=1, limit=8) == 8
    assert journal.event_range() == (9, 25)
    assert journal.prune(retention_days=1, limit=8) == 8
    assert journal.prune(retention_days=1, limit=8) == 4  # the old ones are gone: it stops
    assert journal.event_range() == (21, 25)
    assert journal.prune(retention_days=1, limit=8) == 0
    journal.close()


@asynctest
async def test_the_daemons_prune_runs_in_batches_with_the_loop_free_between(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A day's backlog goes in batches of PRUNE_BATCH, at most PRUNE_BATCHES a call, with
    the loop free between them (a card waits for one batch at most)."""
    import asyncio

    from shoed.core.config import EngineConfig
    from shoed.core.engine import Engine
    from shoed.status import TableStatus
    from shoed.store import recorder as rec

    class Log:
        def __init__(self) -> None:
            self.lines: list[tuple[str, dict[str, object]]] = []

        def info(self, event: str, **kw: object) -> None:
            self.lines.append((event, kw))

        warning = error = info

    monkeypatch.setattr(rec, "PRUNE_BATCH", 10)
    monkeypatch.setattr(rec, "PRUNE_BATCHES", 3)
    clocks = Clocks()
    journal = clocks.open(tmp_path / "state")
    _events(journal, 1, 45)
    clocks.pass_(2 * DAY)
    log = Log()
    recorder = rec.Recorder(journal, Engine(EngineConfig("T1"), instance_id="i"),
                            TableStatus("T1"), 64, log)
    assert recorder.housekeeping(retention_days=1)  # never pruned: due
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count_turns())
    assert await recorder.prune(retention_days=1) == 30  # 3 batches of 10
    assert turns >= 2  # the loop ran between the batches
    assert journal.event_range() == (31, 45)
    event, fields = log.lines[-1]
    assert event == "journal_pruned" and fields["events"] == 30 and fields["more"] is True
    assert isinstance(fields["seconds"], float) and fields["seconds"] >= 2 * rec.PRUNE_PAUSE_S
    assert recorder.housekeeping(retention_days=1)  # more to drop: due again at once
    assert await recorder.prune(retention_days=1) == 14  # the newest event always stays
    assert not recorder.housekeeping(retention_days=1)  # done: the next in an hour
    counter.cancel()
    journal.close()


@asynctest
async def test_a_prune_cancelled_between_batches_leaves_one_run_and_the_next_start_goes_on(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon stops (its housekeeping task is cancelled) in the pause between two
    batches: what was dropped is dropped, the rest is one gapless run, and the journal
    opened again prunes what is left."""
    import asyncio

    from shoed.core.config import EngineConfig
    from shoed.core.engine import Engine
    from shoed.status import TableStatus
    from shoed.store import recorder as rec

    class Log:
        def info(self, event: str, **kw: object) -> None:
            pass

        warning = error = info

    monkeypatch.setattr(rec, "PRUNE_BATCH", 10)
    monkeypatch.setattr(rec, "PRUNE_PAUSE_S", 0.05)
    clocks = Clocks()
    state = tmp_path / "state"
    journal = clocks.open(state)
    _events(journal, 1, 45)
    clocks.pass_(2 * DAY)
    _events(journal, 46, 50)  # young: they stay
    recorder = rec.Recorder(journal, Engine(EngineConfig("T1"), instance_id="i"),
                            TableStatus("T1"), 64, Log())
    batches: list[int] = []
    inner = journal.prune

    def counted(*args: object, **kw: object) -> int:
        dropped = inner(*args, **kw)  # type: ignore[arg-type]
        batches.append(dropped)
        if len(batches) == 2:  # the cancel lands in the pause after this batch
            asyncio.get_running_loop().call_soon(pruning.cancel)
        return dropped

    monkeypatch.setattr(journal, "prune", counted)
    pruning = asyncio.create_task(recorder.prune(retention_days=1))
    with pytest.raises(asyncio.CancelledError):
        await pruning
    assert batches == [10, 10]
    assert journal.event_range() == (21, 50)
    journal.close()

    again = clocks.open(state)
    assert again.event_range() == (21, 50)  # the two batches were committed
    assert again.prune(retention_days=1) == 25
    assert again.event_range() == (46, 50)
    again.close()

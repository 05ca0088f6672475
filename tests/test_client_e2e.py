"""shoed.client against a real Mosquitto and real daemons (child processes): every event
of a table exactly once and in seq order across broker restarts, daemon kill -9s,
consumer kill -9s and a journal reset; commands and their typed errors."""

from __future__ import annotations

import asyncio
import itertools
import json
import pathlib
import signal
import subprocess
import sys
from typing import Any

import pytest
from kit import TableProcess, asynctest, journal_events, wait_shoe_ended
from rig import wait_for

from shoed.client import (
    CommandRefused,
    CommandTimeout,
    InvalidCommand,
    SQLiteCursorStore,
    TableConnection,
    TableFeed,
    instance_of,
)

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]


async def consume(feed: TableFeed, into: list[dict[str, Any]]) -> None:
    async with feed:
        async for event in feed:
            into.append(event)


def assert_exactly_once(got: list[dict[str, Any]], journal: list[dict[str, Any]]) -> None:
    ids = [e["event_id"] for e in got]
    assert len(ids) == len(set(ids)), "an event was yielded twice"
    assert ids == [e["event_id"] for e in journal], "not every event, or not in seq order"
    assert [e["seq"] for e in got] == list(range(1, len(got) + 1))


def test_instance_is_derived_from_event_id_when_absent() -> None:
    assert instance_of({"event_id": "T01-3fa2b9c1-17", "table_id": "T01"}) == "3fa2b9c1"
    assert instance_of({"event_id": "T01-i1-17", "table_id": "T01"}) == "1"
    assert instance_of({"event_id": "T-01-i7-2", "table_id": "T-01"}) == "7"
    assert instance_of({"event_id": "x", "instance": "i7", "table_id": "T01"}) == "7"


@asynctest
async def test_a_full_shoe_exactly_once_in_order(tmp_path: pathlib.Path, broker: Any) -> None:
    table = TableProcess(tmp_path, broker.url).start()
    got: list[dict[str, Any]] = []
    feed = TableFeed(broker.url, "T9", from_seq=1, grace_s=0.5)
    task = asyncio.create_task(consume(feed, got))
    try:
        await wait_shoe_ended(got)
        journal = await journal_events(broker.port, table.root)
        await wait_for(lambda: len(got) >= len(journal), 10, "the last events")
        assert_exactly_once(got, journal)
        assert sum(e["type"] == "hand_result" for e in got) >= 3
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        table.stop()


@asynctest
async def test_broker_restart_mid_shoe_gaps_filled_by_replay(tmp_path: pathlib.Path,
                                                              broker: Any) -> None:
    table = TableProcess(tmp_path, broker.url, pace=0.05).start()
    got: list[dict[str, Any]] = []
    feed = TableFeed(broker.url, "T9", from_seq=1, grace_s=0.5)
    task = asyncio.create_task(consume(feed, got))
    try:
        await wait_for(lambda: len(got) > 15, 90, "the first events")
        broker.stop(kill=True)  # no persistence: whatever it held is gone
        await asyncio.sleep(1.0)
        broker.start()
        await wait_shoe_ended(got)
        journal = await journal_events(broker.port, table.root)
        await wait_for(lambda: len(got) >= len(journal), 15, "the last events")
        assert_exactly_once(got, journal)
        assert feed.connects >= 2
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        table.stop()


@asynctest
async def test_daemon_kill_9_mid_shoe(tmp_path: pathlib.Path, broker: Any) -> None:
    table = TableProcess(tmp_path, broker.url, pace=0.05).start()
    got: list[dict[str, Any]] = []
    feed = TableFeed(broker.url, "T9", from_seq=1, grace_s=0.5)
    task = asyncio.create_task(consume(feed, got))
    try:
        for _ in range(2):
            seen = len(got)
            await wait_for(lambda s=seen: len(got) > s + 8, 90, "more events")
            table.kill_daemon()
            await asyncio.sleep(0.5)
            table.start_daemon()
        await wait_shoe_ended(got)
        journal = await journal_events(broker.port, table.root)
        await wait_for(lambda: len(got) >= len(journal), 15, "the last events")
        assert_exactly_once(got, journal)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        table.stop()


@asynctest
async def test_consumer_kill_9_redelivers_at_most_the_unhandled(tmp_path: pathlib.Path,
                                                                broker: Any) -> None:
    table = TableProcess(tmp_path, broker.url, pace=0.05).start()
    cursor = tmp_path / "tail.cursor"
    out_path = tmp_path / "tail.jsonl"

    def start_tail() -> subprocess.Popen[bytes]:
        out = open(out_path, "ab")  # noqa: SIM115 - the child owns it
        return subprocess.Popen(
            [sys.executable, "-m", "shoed.cli", "tail", "--url", broker.url, "--table", "T9",
             "--json", "--from-seq", "1", "--cursor", str(cursor), "--grace", "0.5"],
            stdout=out, stderr=open(tmp_path / "tail.err", "ab"))

    def lines() -> list[dict[str, Any]]:
        return [json.loads(x) for x in out_path.read_text().splitlines() if x.strip()] \
            if out_path.exists() else []

    tail = start_tail()
    kills = 0
    try:
        for _ in range(3):
            seen = len(lines())
            await wait_for(lambda s=seen: len(lines()) > s + 6, 90, "tail output")
            tail.send_signal(signal.SIGKILL)
            tail.wait()
            kills += 1
            await asyncio.sleep(0.3)
            tail = start_tail()
        await wait_for(lambda: any(e["type"] == "shoe_ended" for e in lines()), 90,
                       "the shoe to end")
        journal = await journal_events(broker.port, table.root)
        await wait_for(lambda: len({e["seq"] for e in lines()}) >= len(journal), 15, "all")
        got = lines()
        seqs = [e["seq"] for e in got]
        assert sorted(set(seqs)) == list(range(1, len(journal) + 1))  # nothing lost
        assert len(seqs) - len(set(seqs)) <= kills  # at most the one in hand per kill
        # In order, apart from that one re-delivered event after each kill:
        assert all(b == a + 1 or b <= a for a, b in itertools.pairwise(seqs))
    finally:
        tail.send_signal(signal.SIGKILL)
        tail.wait()
        table.stop()


@asynctest
async def test_journal_reset_is_a_new_stream_not_a_gap(tmp_path: pathlib.Path,
                                                       broker: Any) -> None:
    table = TableProcess(tmp_path, broker.url).start()
    store = SQLiteCursorStore(tmp_path / "feed.cursor")
    got: list[dict[str, Any]] = []
    feed = TableFeed(broker.url, "T9", from_seq=1, grace_s=0.5, cursor_store=store)
    task = asyncio.create_task(consume(feed, got))
    try:
        await wait_shoe_ended(got)
        first = await journal_events(broker.port, table.root)
        await wait_for(lambda: len(got) >= len(first), 10, "the first shoe")
        table.stop()
        table.reset_journal()
        table.start_simulator(seed=9)
        table.start_daemon()
        await wait_for(lambda: sum(e["type"] == "shoe_ended" for e in got) == 2, 90,
                       "the second shoe")
        second = await journal_events(broker.port, table.root)
        await wait_for(lambda: len(got) >= len(first) + len(second), 10, "the second shoe")
        old, new = instance_of(first[0]), instance_of(second[0])
        assert old != new
        assert [e["event_id"] for e in got] == [e["event_id"] for e in first + second]
        assert feed.stats["instances"] == 1
        # The state directory emptied by hand: the daemon cannot say where the old
        # journal ended, so the feed records a possible loss after its cursor, though
        # here it had every event (an operator who uses --new-journal gets the old
        # journal's end in the answers: test_client_gaps.py, test_journal_damage.py).
        await wait_for(lambda: bool(feed.lost), 10, "the answer naming no replaced journal")
        assert [(x.instance, x.first, x.last) for x in feed.lost] == [
            (old, first[-1]["seq"] + 1, None)]
        saved = await store.load("T9")
        assert saved is not None and saved.instance == new
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        table.stop()


@asynctest
async def test_commands_answers_typed_errors_and_retries(tmp_path: pathlib.Path,
                                                         broker: Any) -> None:
    table = TableProcess(tmp_path, broker.url).start()
    try:
        async with TableConnection(broker.url, "T9", operator="sup1",
                                   command_timeout_s=1.0) as conn:
            await conn.wait_connected(10)
            result = await conn.command("recall", hands=2)
            assert isinstance(result["hands"], list)
            with pytest.raises(CommandRefused) as refused:
                await conn.command("void_hand", hand_no=999, reason="test")
            assert refused.value.code == "unknown_hand"
            with pytest.raises(InvalidCommand) as invalid:
                await conn.command("no_such_command")
            assert invalid.value.code == "unknown_command"

            table.stop_daemon()
            with pytest.raises(CommandTimeout) as timed_out:
                await conn.command("recall", timeout_s=0.3, retries=2)
            assert timed_out.value.attempts == 3

            # Sent while the daemon is down; answered once it is back (same request_id).
            pending = asyncio.create_task(conn.request(
                "new_shoe", request_id="kept-id-1", force=True, timeout_s=1.0, retries=20))
            await asyncio.sleep(1.5)
            table.start_daemon()
            answer = await pending
            assert answer["ok"] and answer["request_id"] == "kept-id-1", answer
            again = await conn.request("new_shoe", request_id="kept-id-1", force=True)
            assert again["ok"] and again.get("result") == answer.get("result")
        events = await journal_events(broker.port, table.root)
        applied = [e for e in events if e["type"] == "supervisor_action"
                   and e["request_id"] == "kept-id-1"]
        assert len(applied) == 1
    finally:
        table.stop()


@asynctest
async def test_tail_prints_one_readable_line_per_event(tmp_path: pathlib.Path,
                                                       broker: Any) -> None:
    table = TableProcess(tmp_path, broker.url).start()
    out_path = tmp_path / "tail.txt"
    with open(out_path, "wb") as out:
        tail = subprocess.Popen([sys.executable, "-m", "shoed.cli", "tail", "--url",
                                 broker.url, "--table", "T9", "--from-seq", "1",
                                 "--grace", "0.5"], stdout=out, stderr=subprocess.STDOUT)
    try:
        await wait_for(lambda: "shoe ended" in out_path.read_text(), 90, "the shoe's end")
        journal = await journal_events(broker.port, table.root)
        await asyncio.sleep(0.5)
        lines = out_path.read_text().splitlines()
        assert len(lines) == len(journal)
        results = [line for line in lines if " RESULT " in line]
        assert len(results) == sum(e["type"] == "hand_result" for e in journal)
        assert lines[0].startswith("T9 ") and "shoe started" in lines[0]
    finally:
        tail.send_signal(signal.SIGTERM)
        tail.wait(timeout=10)
        table.stop()


@asynctest
async def test_tail_into_a_reader_that_stops_early_ends_quietly(tmp_path: pathlib.Path,
                                                                broker: Any) -> None:
    """`shoed tail | head -n 3`: once head has its lines and goes, tail's next write
    raises BrokenPipeError and tail ends, exit 0, with nothing on stderr. A message
    arriving while the feed closed used to start a gap-filling task after the last one
    was cancelled, and asyncio said "Task was destroyed but it is pending!" at exit."""
    table = TableProcess(tmp_path, broker.url, pace=0.05).start()
    got: list[dict[str, Any]] = []
    watching = asyncio.create_task(consume(TableFeed(broker.url, "T9", from_seq=1,
                                                     grace_s=0.5), got))

    def tail_into_head() -> tuple[int, bytes, str]:
        tail = subprocess.Popen(
            [sys.executable, "-m", "shoed.cli", "tail", "--url", broker.url, "--table", "T9",
             "--from-seq", "1", "--grace", "0.5"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        assert tail.stdout is not None and tail.stderr is not None
        head = subprocess.Popen(["head", "-n", "3"], stdin=tail.stdout,
                                stdout=subprocess.PIPE)
        tail.stdout.close()  # head alone reads it: its exit breaks tail's pipe
        out = head.communicate(timeout=30)[0]
        try:
            code = tail.wait(timeout=30)
        finally:
            tail.kill()
        return code, out, tail.stderr.read().decode()

    try:
        # More events than head takes, so that tail always has a next line to write.
        await wait_for(lambda: len(got) >= 12, 60, "events to tail")
        for _ in range(3):  # the close races with the messages arriving: a few times
            code, out, err = await asyncio.to_thread(tail_into_head)
            assert len(out.splitlines()) == 3 and out.startswith(b"T9 ")
            assert code == 0, err
            assert "Task was destroyed" not in err and "Traceback" not in err, err
            assert "Exception ignored" not in err, err
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        table.stop()


@asynctest
async def test_a_break_after_commit_does_not_deliver_that_event_again(
        tmp_path: pathlib.Path, broker: Any) -> None:
    """The cursor moves when the loop asks for the next event; a consumer that stops
    after handling one says so with commit(), and the next start goes on after it."""
    table = TableProcess(tmp_path, broker.url).start()
    store = SQLiteCursorStore(tmp_path / "feed.cursor")
    try:
        for run, commit in enumerate((True, False)):
            handled: list[int] = []
            async with TableFeed(broker.url, "T9", from_seq=1, grace_s=0.5,
                                 cursor_store=store) as feed:
                async for event in feed:
                    handled.append(event["seq"])
                    if len(handled) == 5:
                        if commit:
                            await feed.commit()
                        break
            assert handled == ([1, 2, 3, 4, 5] if run == 0 else [6, 7, 8, 9, 10])
        saved = await store.load("T9")
        assert saved is not None and saved.seq == 9  # the 10th was not committed
    finally:
        table.stop()

"""TableFeed's gap logic against a real broker and a scripted publisher that answers
`replay` like the daemon: late events are not re-requested, a real gap is replayed after
the grace delay (exactly the missing range), the retained state's seq reveals a lost
tail, duplicates are dropped, a new instance restarts at seq 1, replay pages follow
`next_from_seq`."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiomqtt
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kit import asynctest, stop_tasks
from rig import wait_for

from shoed.client import TableFeed
from shoed.client.cursor import Cursor, MemoryCursorStore

pytestmark = [pytest.mark.broker, pytest.mark.timeout(60)]
ROOT = "shoed/T8"


def event(seq: int, instance: str = "aaaa0001", kind: str = "card") -> dict[str, Any]:
    return {"schema_version": 1, "type": kind, "event_id": f"T8-{instance}-{seq}",
            "seq": seq, "ts": "2026-12-01T08:00:00.000+00:00", "table_id": "T8",
            "shoe_id": None, "hand_no": None}


class ScriptedDaemon:
    """Publishes what the test says; answers replay from its journal, `page` at a time."""

    def __init__(self, port: int, page: int = 1000) -> None:
        self.port, self.page = port, page
        self.journal: dict[str, list[dict[str, Any]]] = {}
        self.instance = "aaaa0001"
        # what the daemon says of the journal its current one replaced (replay answers)
        self.previous: dict[str, Any] | None = None
        self.requests: list[tuple[int, int | None]] = []
        self.client: aiomqtt.Client | None = None
        self.ready = asyncio.Event()

    async def run(self) -> None:
        async with aiomqtt.Client("127.0.0.1", self.port, identifier="scripted") as client:
            self.client = client
            await client.subscribe(f"{ROOT}/cmd", qos=1)
            self.ready.set()
            async for message in client.messages:
                await self._answer(json.loads(message.payload))  # type: ignore[arg-type]

    async def started(self, runner: asyncio.Task[None]) -> None:
        """Return once subscribed; its error if the connection failed (never a hang)."""
        waiting = asyncio.ensure_future(self.ready.wait())
        await asyncio.wait((waiting, runner), timeout=10,
                           return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if runner.done():
            runner.result()
        assert self.ready.is_set(), "the scripted daemon did not subscribe within 10 s"

    async def _answer(self, cmd: dict[str, Any]) -> None:
        assert self.client is not None and cmd["command"] == "replay"
        held = self.journal.get(self.instance, [])
        first, last = (held[0]["seq"], held[-1]["seq"]) if held else (0, 0)
        from_seq, to_seq = cmd["from_seq"], cmd.get("to_seq")
        self.requests.append((from_seq, to_seq))
        end = to_seq or last
        if not held or from_seq < first or from_seq > last:
            answer = {"ok": False, "error": {"code": "out_of_range", "message": (
                f"expected from_seq..to_seq within {first}..{last}, got {from_seq}..{to_seq}"),
                "instance": self.instance, **self._previous()}, "result": None}
        else:
            chosen = [e for e in held if from_seq <= e["seq"] <= end][: self.page]
            for e in chosen:
                await self.client.publish(f"{ROOT}/replay", json.dumps(e), qos=1)
            sent_to = chosen[-1]["seq"]
            answer = {"ok": True, "error": None, "result": {
                "from_seq": from_seq, "to_seq": sent_to, "count": len(chosen),
                "next_from_seq": sent_to + 1 if sent_to < end else None,
                "instance": self.instance, **self._previous()}}
        await self.client.publish(f"{ROOT}/cmd/response", json.dumps(
            {"request_id": cmd["request_id"], "command": "replay", **answer}), qos=1)

    def _previous(self) -> dict[str, Any]:
        return {"previous_instance": self.previous} if self.previous is not None else {}

    async def emit(self, seq: int, publish: bool = True) -> None:
        e = event(seq, self.instance)
        self.journal.setdefault(self.instance, []).append(e)
        if publish:
            assert self.client is not None
            await self.client.publish(f"{ROOT}/events", json.dumps(e), qos=1)

    async def state(self, seq: int, instance: str | None = None) -> None:
        assert self.client is not None
        body = {"schema_version": 1, "seq": seq, **({"instance": instance} if instance else {})}
        await self.client.publish(f"{ROOT}/state", json.dumps(body), qos=1, retain=True)


async def _collect(feed: TableFeed, got: list[dict[str, Any]]) -> None:
    async with feed:
        async for e in feed:
            got.append(e)


@asynctest
async def test_late_events_wait_real_gaps_replay_exactly_what_is_missing(broker: Any) -> None:
    daemon = ScriptedDaemon(broker.port)
    runner = asyncio.create_task(daemon.run())
    await daemon.started(runner)
    got: list[dict[str, Any]] = []
    feed = TableFeed(broker.url, "T8", from_seq=1, grace_s=0.8)
    consumer = asyncio.create_task(_collect(feed, got))
    try:
        await feed.wait_connected(10)
        await asyncio.sleep(0.3)  # the start-up probe finds nothing
        probes = len(daemon.requests)
        await daemon.emit(1)
        await daemon.emit(2)
        await daemon.emit(3, publish=False)
        await daemon.emit(4)
        await asyncio.sleep(0.2)
        assert [e["seq"] for e in got] == [1, 2]
        assert daemon.client is not None
        await daemon.client.publish(f"{ROOT}/events", json.dumps(event(3)), qos=1)  # late
        await daemon.client.publish(f"{ROOT}/events", json.dumps(event(2)), qos=1)  # dup
        await wait_for(lambda: len(got) == 4, 5, "the late event")
        await asyncio.sleep(1.0)
        assert daemon.requests[probes:] == [], "a late event was re-requested"

        await daemon.emit(5)
        await daemon.emit(6, publish=False)
        await daemon.emit(7)
        await wait_for(lambda: len(got) == 7, 5, "the replayed gap")
        assert daemon.requests[probes:] == [(6, 6)]

        # A lost tail: only the retained state says it exists.
        await daemon.emit(8, publish=False)
        await daemon.emit(9, publish=False)
        await daemon.state(9)
        await wait_for(lambda: len(got) == 9, 5, "the tail the state names")
        assert [e["seq"] for e in got] == list(range(1, 10))
        assert feed.stats["duplicates"] >= 1
    finally:
        await stop_tasks(consumer, runner)


@asynctest
async def test_new_instance_restarts_at_seq_1_and_replay_pages(broker: Any) -> None:
    daemon = ScriptedDaemon(broker.port, page=3)
    runner = asyncio.create_task(daemon.run())
    await daemon.started(runner)
    for seq in range(1, 9):
        await daemon.emit(seq, publish=False)  # dealt before the consumer started
    got: list[dict[str, Any]] = []
    feed = TableFeed(broker.url, "T8", from_seq=1, grace_s=0.5)
    consumer = asyncio.create_task(_collect(feed, got))
    try:
        await wait_for(lambda: len(got) == 8, 10, "the journal, three pages")
        assert daemon.requests[0][0] == 1 and (4, None) in daemon.requests
        daemon.instance = "bbbb0002"  # an operator started a new journal
        daemon.previous = {"instance": "aaaa0001", "last_seq": 8,  # all of it was read
                           "more_possible": False}
        for seq in range(1, 4):
            await daemon.emit(seq, publish=seq == 3)
        await wait_for(lambda: len(got) == 11, 10, "the new instance from seq 1")
        assert [(e["instance"], e["seq"]) for e in got[8:]] == [
            ("bbbb0002", 1), ("bbbb0002", 2), ("bbbb0002", 3)]
        assert feed.stats["instances"] == 1 and not feed.lost
        # A late event of the old instance is a duplicate, not a new stream.
        assert daemon.client is not None
        await daemon.client.publish(f"{ROOT}/events", json.dumps(event(8)), qos=1)
        await asyncio.sleep(0.5)
        assert len(got) == 11 and feed.instance == "bbbb0002"
    finally:
        await stop_tasks(consumer, runner)


async def _journal_behind_a_retained_state(
        broker: Any, retained: tuple[int, str], cursor: Cursor,
        previous: dict[str, Any] | None = None,
) -> tuple[ScriptedDaemon, asyncio.Task[None], TableFeed, list[dict[str, Any]],
           asyncio.Task[None]]:
    """A scripted daemon on journal bbbb0002 holding 1..5 (none published live), the
    broker retaining a `state` (seq, instance), and a feed started from `cursor`."""
    daemon = ScriptedDaemon(broker.port)
    runner = asyncio.create_task(daemon.run())
    await daemon.started(runner)
    daemon.instance = "bbbb0002"
    daemon.previous = previous
    for seq in range(1, 6):
        await daemon.emit(seq, publish=False)
    await daemon.state(*retained)
    store = MemoryCursorStore()
    await store.save("T8", cursor)
    got: list[dict[str, Any]] = []
    feed = TableFeed(broker.url, "T8", cursor_store=store, grace_s=0.3)
    return daemon, runner, feed, got, asyncio.create_task(_collect(feed, got))


@asynctest
async def test_a_stale_retained_state_of_an_old_journal_does_not_retire_the_live_one(
        broker: Any) -> None:
    """A broker back from its persistence file may hold the `state` of a journal replaced
    since (outside review: the feed took it for a new journal, retired the live one and
    dropped every event after, for good). Retained, it is only a reason to ask: the
    replayed events name the live journal, and the feed goes on from its cursor."""
    # the live journal bbbb0002 (1..5); retained by the broker: the old journal's state
    daemon, runner, feed, got, consumer = await _journal_behind_a_retained_state(
        broker, retained=(70, "aaaa0001"), cursor=Cursor("bbbb0002", 3))
    try:
        await wait_for(lambda: len(got) == 2, 10, "4 and 5 of the live journal")
        await daemon.emit(6)
        await wait_for(lambda: len(got) == 3, 10, "a live event after it")
        assert [(e["instance"], e["seq"]) for e in got] == [
            ("bbbb0002", 4), ("bbbb0002", 5), ("bbbb0002", 6)]
        assert feed.instance == "bbbb0002" and feed.stats["instances"] == 0
        assert "aaaa0001" not in feed.retired and not feed.lost
    finally:
        await stop_tasks(consumer, runner)


@asynctest
async def test_a_retained_state_of_a_new_idle_journal_is_confirmed_by_the_daemon(
        broker: Any) -> None:
    """The other way round: the cursor is in the old journal, the daemon runs a new one
    with fewer events and deals nothing. The retained state names it; the probe's answer
    (`out_of_range`, naming the live journal) confirms it, and the new journal is read
    from seq 1."""
    _daemon, runner, feed, got, consumer = await _journal_behind_a_retained_state(
        broker, retained=(5, "bbbb0002"), cursor=Cursor("aaaa0001", 40))
    try:
        await wait_for(lambda: len(got) == 5, 10, "the new journal from seq 1")
        assert [(e["instance"], e["seq"]) for e in got] == [
            ("bbbb0002", s) for s in range(1, 6)]
        assert feed.instance == "bbbb0002" and "aaaa0001" in feed.retired
    finally:
        await stop_tasks(consumer, runner)


@pytest.mark.parametrize(("previous", "lost"), [
    # 41..60 never reached us
    ({"instance": "aaaa0001", "last_seq": 60, "more_possible": False}, [(41, 60)]),
    # we had all it held
    ({"instance": "aaaa0001", "last_seq": 40, "more_possible": False}, []),
    # its record log held inputs its database lacked: more may have been published
    ({"instance": "aaaa0001", "last_seq": 40, "more_possible": True}, [(41, None)]),
    ({"instance": "aaaa0001", "last_seq": 60, "more_possible": True},
     [(41, 60), (61, None)]),
    # a daemon before the field: it could not say, so more may have followed
    ({"instance": "aaaa0001", "last_seq": 40}, [(41, None)]),
    ({"instance": "aaaa0001", "last_seq": None}, [(41, None)]),  # its database unreadable
    ({"instance": "cccc0003", "last_seq": 9}, [(41, None)]),  # replaced twice since
    (None, [(41, None)]),  # the daemon does not say (state directory emptied by hand)
])
@asynctest
async def test_a_consumer_behind_on_a_replaced_journal_learns_what_it_missed(
        broker: Any, previous: dict[str, Any] | None,
        lost: list[tuple[int, int | None]]) -> None:
    """The cursor is at seq 40 of journal aaaa0001; the daemon now runs bbbb0002. Its
    answers say where the journal it replaced ended (`previous_instance`): what lies
    between is lost (an `EventsLost` of the old journal), and when the daemon cannot say
    where it ended, a possible loss from the cursor on (`last` None): never a silent
    skip (outside review, 2026-12-07)."""
    _daemon, runner, feed, got, consumer = await _journal_behind_a_retained_state(
        broker, retained=(5, "bbbb0002"), cursor=Cursor("aaaa0001", 40),
        previous=previous)
    try:
        await wait_for(lambda: len(got) == 5, 10, "the new journal from seq 1")
        assert [(e["instance"], e["seq"]) for e in got] == [
            ("bbbb0002", s) for s in range(1, 6)]
        # the answer naming the replaced journal comes after the events it replayed
        await wait_for(lambda: len(feed.lost) >= len(lost), 5, "the replaced journal checked")
        await asyncio.sleep(0.5)  # and nothing more is reported
        assert [(x.instance, x.first, x.last, x.possible) for x in feed.lost] == [
            ("aaaa0001", first, last, last is None) for first, last in lost]
    finally:
        await stop_tasks(consumer, runner)


@asynctest
async def test_a_first_start_after_retention_reports_one_loss_of_the_journals_instance(
        broker: Any) -> None:
    """A sink's first start on a journal already pruned (integrating.md section 2,
    step 7): one loss, 1..49, of the journal named by the retained state."""
    daemon = ScriptedDaemon(broker.port)
    runner = asyncio.create_task(daemon.run())
    await daemon.started(runner)
    for seq in range(1, 61):
        await daemon.emit(seq, publish=False)
    daemon.journal[daemon.instance] = daemon.journal[daemon.instance][49:]  # pruned
    await daemon.state(60, daemon.instance)
    got: list[dict[str, Any]] = []
    feed = TableFeed(broker.url, "T8", from_seq=1, grace_s=0.3)
    consumer = asyncio.create_task(_collect(feed, got))
    try:
        await wait_for(lambda: len(got) == 11, 15, "the events held, 50..60")
        assert [e["seq"] for e in got] == list(range(50, 61))
        assert [(lost.instance, lost.first, lost.last) for lost in feed.lost] == [
            ("aaaa0001", 1, 49)]
    finally:
        await stop_tasks(consumer, runner)


@pytest.mark.parametrize(("error", "held"), [
    ({"code": "out_of_range", "message": "see first_seq", "first_seq": 40, "last_seq": 90},
     (40, 90)),
    ({"code": "out_of_range", "message": "nothing", "first_seq": 0, "last_seq": 0}, (0, 0)),
    # a daemon before the fields: the message says it
    ({"code": "out_of_range", "message": "expected from_seq..to_seq within 3..7, got 9..None"},
     (3, 7)),
    ({"code": "out_of_range", "message": "within 3..7", "first_seq": "3", "last_seq": 7},
     (3, 7)),
    ({"code": "out_of_range", "message": "no range"}, None),
])
def test_the_held_range_is_read_from_the_fields_else_from_the_message(
        error: dict[str, Any], held: tuple[int, int] | None) -> None:
    from shoed.client.feed import _held_range
    assert _held_range(error) == held


def test_a_closing_feed_starts_no_gap_task_while_it_waits_for_the_last_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An event dispatched while `close()` waits for the gap task's cancel used to start
    a new gap task, which nothing cancelled before the loop closed (decisions.md 180)."""
    from shoed.client import feed as feed_module

    async def main() -> None:
        feed = TableFeed("mqtt://127.0.0.1:1", "T9", from_seq=1, grace_s=0.5)
        feed.next_seq, feed._head = 1, 5  # events 1..4 missing: a gap task is due
        feed._schedule_gap(60.0)
        first = feed._gap_task
        assert first is not None
        real = feed_module.cancel_and_wait

        async def meanwhile(tasks: Any) -> None:
            feed._schedule_gap(0.0)  # a message dispatched while the cancel is waited for
            await real(tasks)

        monkeypatch.setattr(feed_module, "cancel_and_wait", meanwhile)
        await feed.close()
        assert first.cancelled()
        assert feed._gap_task is None
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
    asyncio.run(main())


@asynctest
async def test_a_stored_cursor_wins_over_from_seq_and_says_so(broker: Any) -> None:
    """`shoed tail --cursor F --from-seq N` with a cursor in F: the cursor wins, and a
    warning says that --from-seq was not used (outside review: silently ignored)."""
    from structlog.testing import capture_logs

    store = MemoryCursorStore()
    await store.save("T8", Cursor("aaaa0001", 40))
    feed = TableFeed(broker.url, "T8", cursor_store=store, from_seq=10)
    with capture_logs() as logs:
        async with feed:
            pass
    assert feed.next_seq == 41
    (warning,) = [e for e in logs if e["event"] == "client_from_seq_ignored"]
    assert (warning["from_seq"], warning["cursor_seq"]) == (10, 40)


@given(cursor=st.integers(0, 200), last=st.one_of(st.none(), st.integers(0, 200)),
       more=st.one_of(st.none(), st.booleans()),
       instance=st.sampled_from(["aaaa0001", "cccc0003"]))
def test_a_replaced_journal_s_losses_are_certain_then_possible_never_overlapping(
        cursor: int, last: int | None, more: bool | None, instance: str) -> None:
    """replaced_losses: the certain loss is cursor+1..last_seq, the possible one starts
    after both; a journal that says it held no more than the cursor gives none."""
    from shoed.client.errors import replaced_losses
    previous: dict[str, Any] = {"instance": instance, "last_seq": last}
    if more is not None:
        previous["more_possible"] = more
    lost = replaced_losses("aaaa0001", cursor, previous)
    known = instance == "aaaa0001"
    certain = [x for x in lost if not x.possible]
    possible = [x for x in lost if x.possible]
    assert all(x.instance == "aaaa0001" for x in lost)
    if known and last is not None and last > cursor:
        assert [(x.first, x.last) for x in certain] == [(cursor + 1, last)]
    else:
        assert certain == []
    if known and last is not None and more is False:
        assert possible == []
    else:
        end = last if known and last is not None else cursor
        assert [(x.first, x.last) for x in possible] == [(max(cursor, end) + 1, None)]

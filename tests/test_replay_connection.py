"""A `replay` goes out on a connection of its own and gives way to live events (issue 16
section 6, docs/decisions.md item 125); the real daemon, a real Mosquitto, the pty shoe.

The replayed events arrive complete, once each, in seq order, all before the answer; live
events stay gapless meanwhile; when the replay's own connection cannot be made, the page goes
out on the daemon's connection instead (logged), the same events in the same order."""

from __future__ import annotations

import asyncio
import pathlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from proc import DaemonProcess
from rig import Collector, wait_for

from shoed.sim.broker import PrivateMosquitto

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def broker() -> PrivateMosquitto:
    b = PrivateMosquitto()
    b.start()
    yield b  # type: ignore[misc]
    b.stop()


def replay_round(tmp: pathlib.Path, broker: PrivateMosquitto, **env: str) -> dict[str, object]:
    async def main() -> dict[str, object]:
        collector = Collector(broker.port, "shoed/T9")
        task = asyncio.create_task(collector.run())
        await wait_for(collector.connected.is_set, 10, "collector")
        d = DaemonProcess(tmp, broker.url, replay={"max_events": 100000})
        try:
            d.start_shoe(seed=7, pace=0.01)
            d.start(**env)
            await wait_for(lambda: len(collector.events) >= 40, 40, "events dealt")
            last = collector.events[-1]["seq"]
            answer = await collector.send({"request_id": "rp-all", "command": "replay",
                                           "operator": "t", "from_seq": 1,
                                           "to_seq": last}, timeout=30)
            replayed_before_answer = list(collector.replayed)
            live_after = collector.events[-1]["seq"]
            await asyncio.sleep(0.3)
            out = {"answer": answer, "last": last, "replayed": replayed_before_answer,
                   "replayed_later": collector.replayed[len(replayed_before_answer):],
                   "events": collector.events, "live_after": live_after,
                   "sent": d.logged("replay_sent"),
                   "failed": d.logged("replay_connection_failed")}
            assert d.stop() == 0
            return out
        finally:
            d.close()
            task.cancel()

    return asyncio.run(main())


def check_replay(out: dict[str, object]) -> None:
    answer = out["answer"]
    last = out["last"]
    assert answer["ok"] and answer["result"]["count"] == last, answer  # type: ignore[index]
    replayed = out["replayed"]
    # Complete, once each, in seq order, all before the answer.
    assert [e["seq"] for e in replayed] == list(range(1, last + 1))  # type: ignore[operator,union-attr,arg-type]
    assert not out["replayed_later"]
    # The same bodies as the live ones.
    live = {e["event_id"]: e for e in out["events"]}  # type: ignore[union-attr]
    assert all(live[e["event_id"]] == e for e in replayed)  # type: ignore[union-attr]
    # The live stream stays gapless.
    events = out["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))  # type: ignore[arg-type,union-attr]


def test_a_replay_goes_out_on_its_own_connection(tmp_path: pathlib.Path,
                                                  broker: PrivateMosquitto) -> None:
    out = replay_round(tmp_path, broker)
    check_replay(out)
    sent = out["sent"]
    assert len(sent) == 1 and sent[0]["connection"] == "own", sent  # type: ignore[arg-type,index]
    assert sent[0]["events"] == out["last"]  # type: ignore[index]
    assert not out["failed"]


def test_without_its_own_connection_a_replay_goes_out_on_the_daemons(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    out = replay_round(tmp_path, broker, SHOED_TEST_NO_REPLAY_CONNECTION="1")
    check_replay(out)
    failed = out["failed"]
    assert failed and failed[0]["level"] == "warning", failed  # type: ignore[index]
    sent = out["sent"]
    assert len(sent) == 1 and sent[0]["connection"] == "shared", sent  # type: ignore[arg-type,index]


@pytest.mark.parametrize("env", [{}, {"SHOED_TEST_NO_REPLAY_CONNECTION": "1"}],
                         ids=["own", "shared"])
def test_a_replay_keeps_to_its_pace(tmp_path: pathlib.Path, broker: PrivateMosquitto,
                                    env: dict[str, str]) -> None:
    """At most REPLAY_EVENTS_PER_S (here 100 a second): the page takes at least its
    count over the rate, on either connection, and is still complete and in order."""
    out = replay_round(tmp_path, broker, SHOED_TEST_REPLAY_RATE="100", **env)
    check_replay(out)
    sent = out["sent"][0]  # type: ignore[index]
    assert sent["events"] >= 40 and sent["took_s"] >= (sent["events"] - 8) / 100, sent


def _paced(stalls: dict[int, float], events: int = 4000, rate: float = 15_000,
           burst: float = 0.05, every: int = 8, send_s: float = 10e-6
           ) -> list[float]:
    """The send times of a replay paced as the inbox paces it, on a simulated clock:
    each send takes `send_s`; after the event numbered k, the stream waits stalls[k]
    seconds (for live events)."""
    from shoed.mqtt.inbox import replay_pace

    now = started = 0.0
    times = []
    for sent in range(1, events + 1):
        now += send_s
        times.append(now)
        now += stalls.get(sent, 0.0)
        if sent % every == 0:
            started, ahead = replay_pace(started, sent, now, rate, burst)
            if ahead >= 0.001:
                now += ahead
    return times


@given(stall_at=st.integers(1, 3000), stall_s=st.floats(0.0, 3.0),
       rate=st.sampled_from([100.0, 1000.0, 15_000.0]))
def test_a_replay_that_waited_makes_up_at_most_its_burst(stall_at: int, stall_s: float,
                                                         rate: float) -> None:
    """However long it waited for the live publisher, a replay then never sends more than
    `rate` events a second plus `burst` seconds' worth (and one loop turn's 8)."""
    burst, every = 0.05, 8
    events = min(4000, int(rate * 2))
    times = _paced({stall_at: stall_s}, events=events, rate=rate, burst=burst, every=every)
    # In any span of the run, from one send to a later one: no more than the pace allows.
    for first in range(0, len(times), max(1, len(times) // 50)):
        for last in range(first, len(times), max(1, len(times) // 50)):
            span = times[last] - times[first]
            assert last - first <= rate * (span + burst) + 2 * every + 1, (first, last, span)
    # And it keeps its pace overall: the stall is not made up beyond the burst.
    stalled = stall_s if stall_at < events else 0.0  # a stall after the last send is not in it
    # (the pace is looked at every `every` events: one such step's worth either way)
    assert times[-1] >= (events - 2 * every) / rate + stalled - burst - 0.01

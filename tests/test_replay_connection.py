"""A `replay` goes out on a connection of its own and gives way to live events (issue 16
section 6, docs/decisions.md item 125); the real daemon, a real Mosquitto, the pty shoe.

The replayed events arrive complete, once each, in seq order, all before the answer; live
events stay gapless meanwhile; when the replay's own connection cannot be made, the page goes
out on the daemon's connection instead (logged), the same events in the same order."""

from __future__ import annotations

import asyncio
import pathlib

import pytest
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

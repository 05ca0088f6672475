"""The look at the root before connecting (shoed/mqtt/claim.py), against a real broker:
a status is live until its `ts` stands still here (no other machine's wall clock is
compared with ours), a root found without any status during a conflict is watched before
it is taken, and short connections with a refused attempt between them are a broker
restarting, not a session taken over."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiomqtt
import pytest

from shoed.mqtt.claim import LIVE_S, RootTaken, StatusesSeen, TakeoverWatch, check_root
from shoed.sim.broker import PrivateMosquitto

ROOT = "shoed/T9"


def args(broker: PrivateMosquitto) -> dict[str, Any]:
    return {"hostname": "127.0.0.1", "port": broker.port, "identifier": "shoed-T9",
            "timeout": 5.0}


def status(ts: float, online: bool = True, run_id: str = "theirs") -> dict[str, Any]:
    return {"online": online, "run_id": run_id, "instance": "other", "ts": ts,
            "online_since": ts - 60}


async def put(broker: PrivateMosquitto, body: dict[str, Any]) -> None:
    async with aiomqtt.Client("127.0.0.1", broker.port, identifier="writer") as client:
        await client.publish(f"{ROOT}/status", json.dumps(body), qos=1, retain=True)


@pytest.mark.parametrize("skew_s", [-300.0, +300.0])
def test_a_status_from_a_clock_minutes_off_is_live_until_its_ts_stands_still(
        broker: PrivateMosquitto, skew_s: float) -> None:
    """The other table PC's clock 5 minutes behind (or ahead): its status is live (outside
    review: behind by more than 2 minutes, it was taken for a dead daemon's and both
    daemons published under the root). Seen here unchanged for LIVE_S, it is dead."""
    async def main() -> None:
        body = status(time.time() + skew_s)
        await put(broker, body)
        seen = StatusesSeen()
        with pytest.raises(RootTaken):
            await check_root(args(broker), ROOT, "ours", None, "mine", seen=seen)
        with pytest.raises(RootTaken):  # seen again at once: still live
            await check_root(args(broker), ROOT, "ours", None, "mine", seen=seen)
        aged = StatusesSeen()
        assert aged.live(body, asyncio.get_running_loop().time() - LIVE_S - 1)
        await check_root(args(broker), ROOT, "ours", None, "mine", seen=aged)  # free

    asyncio.run(main())


def test_in_a_conflict_a_root_without_status_is_watched_before_it_is_taken(
        broker: PrivateMosquitto) -> None:
    """A broker restarted without its retained messages: the daemon that holds the root
    says so again when it reconnects (outside review: the daemon in conflict took the
    empty root at its first look and published its backlog there)."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        alive: list[float] = []
        look = asyncio.create_task(check_root(
            args(broker), ROOT, "ours", None, "mine", confirm_s=20.0,
            alive=lambda: alive.append(loop.time())))
        await asyncio.sleep(1.5)
        assert not look.done()  # still watching
        await put(broker, status(time.time()))  # the holder is back
        with pytest.raises(RootTaken):
            await asyncio.wait_for(look, 5)
        assert alive

        # Nobody comes: the root is taken after the watch, not before.
        await put(broker, {})  # an unreadable status (not a claim) ...
        async with aiomqtt.Client("127.0.0.1", broker.port, identifier="eraser") as c:
            await c.publish(f"{ROOT}/status", b"", qos=1, retain=True)  # ... then none
        started = loop.time()
        await check_root(args(broker), ROOT, "ours", None, "mine", confirm_s=3.0)
        assert loop.time() - started >= 2.9

        # A status that says offline ends the watch at once.
        await put(broker, status(time.time(), online=False))
        started = loop.time()
        await check_root(args(broker), ROOT, "ours", None, "mine", confirm_s=30.0)
        assert loop.time() - started < 2.0

        # Outside a conflict nothing is watched.
        async with aiomqtt.Client("127.0.0.1", broker.port, identifier="eraser") as c:
            await c.publish(f"{ROOT}/status", b"", qos=1, retain=True)
        started = loop.time()
        await check_root(args(broker), ROOT, "ours", None, "mine")
        assert loop.time() - started < 2.0

    asyncio.run(main())


def test_short_connections_with_a_refused_attempt_between_are_no_takeover() -> None:
    """A broker restarted again and again (outside review: four restarts raised a false
    `table_id_conflict`): a refused attempt between the short connections clears them;
    without one, three within 30 s are a session taken over."""
    watch = TakeoverWatch()
    now = 100.0
    for _ in range(5):
        watch.connected_at = now
        now += 2.0
        assert watch.evidence(None, now) is None
        watch.attempt_failed()  # the broker refused the next attempt: it was away
    storm = TakeoverWatch()
    found = []
    for _ in range(3):
        storm.connected_at = now
        now += 2.0
        found.append(storm.evidence(None, now))
    assert found[:2] == [None, None] and found[2] is not None


def test_a_probe_whose_broker_goes_while_it_reads_is_a_disconnect_not_a_stranger() -> None:
    """The broker restarting during the watch: aiomqtt's iterator raises MqttError, which
    the connection loop would read as "not an MQTT broker" (outside review); it comes out
    as a plain BrokerError, the loop's disconnect."""
    from shoed.errors import BrokerError, NotABroker
    from shoed.mqtt.claim import _next_status

    class Dropped:
        def __aiter__(self) -> Dropped:
            return self

        async def __anext__(self) -> Any:
            raise aiomqtt.MqttError("Disconnected during message iteration")

    with pytest.raises(BrokerError) as caught:
        asyncio.run(_next_status(Dropped(), 1.0))
    assert not isinstance(caught.value, NotABroker)
    assert "probe's connection ended" in str(caught.value)

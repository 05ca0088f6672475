"""Failover between the brokers of `mqtt.url`: two private Mosquittos, the daemon
configured with both, a consumer on each (deduping by event_id); the first is killed
mid-shoe and the daemon goes on on the second."""

from __future__ import annotations

import asyncio
import collections
import json
import pathlib
import time
from typing import Any

import aiomqtt
import pytest
from kit import TableProcess, asynctest, journal_events, stop_tasks, wait_shoe_ended
from rig import Collector, rig, wait_for
from test_client_e2e import assert_exactly_once, consume
from test_daemon_e2e import check_shoe

from shoed.client import TableFeed
from shoed.sim.broker import PrivateMosquitto, free_port
from shoed.sim.shoe import Script

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]


@pytest.fixture
def second_broker():
    instance = PrivateMosquitto()
    instance.start()
    yield instance
    instance.stop()


def test_first_broker_killed_mid_shoe_daemon_continues_on_the_second(
        tmp_path: pathlib.Path, broker: PrivateMosquitto,
        second_broker: PrivateMosquitto) -> None:
    first, second = broker, second_broker

    async def main() -> None:
        async with rig(tmp_path, first, decks=1, seed=21, script=Script(pace_s=0.01, shoes=1),
                       mqtt={"url": [first.url, second.url]}) as r:
            on_first = r.collector
            on_second = Collector(second.port, r.daemon.settings.topic_root)
            task = asyncio.create_task(on_second.run())
            try:
                await wait_for(on_second.connected.is_set, 10, "consumer on the second")
                await wait_for(lambda: r.daemon.status.broker_url == first.url, 20,
                               "the daemon on the first broker")
                await wait_for(lambda: on_first.retained.get("status", {}).get("broker_url")
                               == first.url, 10, "status names the first broker")
                # Early in the shoe (seed 21 cuts it at card 38): more to come.
                await wait_for(lambda: on_first.of("hand_result"), 60, "a result")
                assert not on_first.of("shoe_ended")
                first.stop(kill=True)
                killed = time.monotonic()
                await wait_for(lambda: r.daemon.status.broker_url == second.url, 10,
                               "the daemon on the second broker")
                took = time.monotonic() - killed
                assert took < 10
                assert second.url in r.daemon.status.line()
                await wait_for(lambda: on_second.of("shoe_ended"), 120, "the shoe to end")
                await wait_for(lambda: r.daemon.outbox.depth() == 0, 20, "outbox drained")
                assert on_second.of("card"), "cards went out live on the second broker"
                await wait_for(lambda: on_second.retained.get("status", {}).get("broker_url")
                               == second.url, 10, "status names the second broker")
                # At least once: only what was in flight at the kill may come twice.
                both = collections.Counter(e["event_id"] for e in
                                           on_first.raw_events + on_second.raw_events)
                assert sum(n - 1 for n in both.values()) <= 1, both.most_common(3)
                # The consumer: both brokers' events, deduped by event_id, gaps replayed.
                consumer = on_second
                consumer.raw_events = on_first.raw_events + on_second.raw_events
                last = max(e["seq"] for e in consumer.raw_events)
                await consumer.fill_gaps(last)
                events = consumer.events
                assert events[0]["seq"] == 1 and events[-1]["seq"] == last
                check_shoe(events, r.shoe.dealt)
                assert len({e["event_id"] for e in events}) == len(events)
            finally:
                await stop_tasks(task)
    asyncio.run(main())


def test_first_broker_down_at_start_then_back_after_the_second_drops(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    """The first broker of the list is down: the daemon starts on the second; when that
    one drops, the next round tries the first again, which is back by then."""
    second = broker
    first = PrivateMosquitto(port=free_port())

    async def main() -> None:
        async with rig(tmp_path, second, decks=1, seed=7, script=Script(pace_s=0.05),
                       mqtt={"url": f"{first.url}, {second.url}"}) as r:
            await wait_for(lambda: r.daemon.status.broker_url == second.url, 10,
                           "the daemon on the second broker")
            await wait_for(lambda: r.collector.of("card"), 30, "cards on the second")
            first.start()
            try:
                on_first = Collector(first.port, r.daemon.settings.topic_root)
                task = asyncio.create_task(on_first.run())
                await wait_for(on_first.connected.is_set, 10, "consumer on the first")
                second.stop(kill=True)
                await wait_for(lambda: r.daemon.status.broker_url == first.url, 10,
                               "the daemon back on the first broker")
                await wait_for(lambda: on_first.retained.get("status", {}).get("broker_url")
                               == first.url, 10, "status names the first broker")
                seen = len(on_first.of("card"))
                await wait_for(lambda: len(on_first.of("card")) > seen, 30,
                               "cards on the first")
                await stop_tasks(task)
            finally:
                first.remove()
    asyncio.run(main())


@asynctest
async def test_the_client_fails_over_with_the_daemon_process(
        tmp_path: pathlib.Path, broker: PrivateMosquitto,
        second_broker: PrivateMosquitto) -> None:
    """`shoed run` with both brokers in its config, a TableFeed given both (what `shoed
    tail` and `shoed sink` do with `--url A,B`): the first is killed mid-shoe, the feed
    still yields every event exactly once and in seq order."""
    first, second = broker, second_broker
    # Slow enough that the shoe is still going when the feed has its first events.
    table = TableProcess(tmp_path, [first.url, second.url], decks=2, pace=0.06).start()
    got: list[dict[str, Any]] = []
    feed = TableFeed(f"{first.url},{second.url}", "T9", from_seq=1, grace_s=0.5)
    task = asyncio.create_task(consume(feed, got))
    try:
        await wait_for(lambda: len(got) > 15, 90, "the first events")
        assert feed.brokers.in_use is not None and feed.brokers.in_use.port == first.port
        assert not any(e["type"] == "shoe_ended" for e in got)
        first.stop(kill=True)
        await wait_shoe_ended(got)
        assert feed.brokers.in_use is not None and feed.brokers.in_use.url == second.url
        journal = await journal_events(second.port, table.root)
        await wait_for(lambda: len(got) >= len(journal), 10, "the last events")
        assert_exactly_once(got, journal)
    finally:
        await stop_tasks(task)
        table.stop()


def test_shoed_roads_reads_from_the_first_broker_that_answers(
        tmp_path: pathlib.Path, broker: PrivateMosquitto,
        capsys: pytest.CaptureFixture[str]) -> None:
    from test_roads_cli import example, publish_retained

    from shoed.cli import main
    from shoed.config import write_config

    dead = f"mqtt://127.0.0.1:{free_port()}"
    message = example()
    publish_retained(broker.port, "shoed/T09/roads", json.dumps(message))
    path = write_config(tmp_path / "shoed.toml", {
        "table": {"id": "T09"}, "mqtt": {"url": [dead, broker.url]}})
    assert main(["roads", "--config", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == message
    assert f"{dead}: " in err and "trying the next broker" in err


async def bridge_up(near: PrivateMosquitto, far: PrivateMosquitto) -> None:
    """Wait until a message published on `near` arrives on `far` (the bridge connects
    a moment after the broker opens its port)."""
    async with aiomqtt.Client("127.0.0.1", far.port, identifier="bridge-probe-far") as sub, \
            aiomqtt.Client("127.0.0.1", near.port, identifier="bridge-probe-near") as pub:
        await sub.subscribe("shoed/bridge-probe", qos=1)
        reader = asyncio.ensure_future(anext(aiter(sub.messages)))
        deadline = time.monotonic() + 15
        while not reader.done():
            assert time.monotonic() < deadline, "the bridge did not connect in 15 s"
            await pub.publish("shoed/bridge-probe", b"1", qos=1)
            await asyncio.wait((reader,), timeout=0.2)


def test_a_mosquitto_bridge_pair_consumer_on_one_side_only(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    """The set-up docs/brokers.md recommends for two brokers: the first bridges `shoed/#`
    both ways to the second (configured on one side only). A consumer on the second
    alone sees the daemon's events while it is on the first (over the bridge), and after
    the first is killed (directly); dedupe and `replay` make it exact."""
    second = broker
    first = PrivateMosquitto(extra_config=(
        f"connection to-second\naddress 127.0.0.1:{second.port}\n"
        "topic shoed/# both 1\ncleansession false\nrestart_timeout 1\n"))
    first.start()

    async def main() -> None:
        await bridge_up(first, second)
        async with rig(tmp_path, second, decks=1, seed=21, script=Script(pace_s=0.01, shoes=1),
                       mqtt={"url": [first.url, second.url]}) as r:
            consumer = r.collector  # on the second broker only
            await wait_for(lambda: r.daemon.status.broker_url == first.url, 20,
                           "the daemon on the first broker")
            await wait_for(lambda: consumer.of("hand_result"), 60, "a result, bridged")
            await wait_for(lambda: consumer.retained.get("status", {}).get("broker_url")
                           == first.url, 10, "the bridged status names the first broker")
            assert not consumer.of("shoe_ended")
            first.stop(kill=True)
            await wait_for(lambda: r.daemon.status.broker_url == second.url, 10,
                           "the daemon on the second broker")
            await wait_for(lambda: consumer.of("shoe_ended"), 120, "the shoe to end")
            await wait_for(lambda: r.daemon.outbox.depth() == 0, 20, "outbox drained")
            await wait_for(lambda: consumer.retained.get("status", {}).get("broker_url")
                           == second.url, 10, "status names the second broker")
            last = max(e["seq"] for e in consumer.raw_events)
            await consumer.fill_gaps(last)
            events = consumer.events
            assert events[0]["seq"] == 1 and events[-1]["seq"] == last
            check_shoe(events, r.shoe.dealt)
    try:
        asyncio.run(main())
    finally:
        first.remove()

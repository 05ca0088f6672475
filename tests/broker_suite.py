"""The delivery tests run against brokers other than Mosquitto (MQTT 3.1.1 only there):
a full shoe, a broker restart mid-shoe, commands. Imported by one module per broker,
each with a module-scoped `other_broker` fixture (brokers are slow to start)."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

from kit import TableProcess, journal_events, wait_shoe_ended
from rig import wait_for

from shoed.client import CommandRefused, TableConnection, TableFeed


async def _consume(feed: TableFeed, into: list[dict[str, Any]]) -> None:
    async with feed:
        async for event in feed:
            into.append(event)


async def full_shoe_and_restart(tmp_path: pathlib.Path, broker: Any, restart: bool) -> None:
    table = TableProcess(tmp_path, broker.url, protocol="3.1.1",
                         pace=0.05 if restart else 0.02,
                         table=f"B{abs(hash(str(tmp_path))) % 10_000}").start()
    got: list[dict[str, Any]] = []
    feed = TableFeed(broker.url, table.table, from_seq=1, grace_s=0.5, protocol="3.1.1",
                     command_timeout_s=3.0)
    task = asyncio.create_task(_consume(feed, got))
    try:
        if restart:
            await wait_for(lambda: len(got) > 15, 60, "the first events")
            broker.stop(kill=True)
            await asyncio.sleep(1.0)
            broker.start()
        await wait_shoe_ended(got, 120)
        journal = await journal_events(broker.port, table.root, protocol="3.1.1")
        await wait_for(lambda: len(got) >= len(journal), 20, "the last events")
        ids = [e["event_id"] for e in got]
        assert ids == [e["event_id"] for e in journal]
        assert len(set(ids)) == len(ids)
        assert [e["seq"] for e in got] == list(range(1, len(got) + 1))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        table.stop()


async def commands(tmp_path: pathlib.Path, broker: Any) -> None:
    table = TableProcess(tmp_path, broker.url, protocol="3.1.1", table="BC1").start()
    try:
        async with TableConnection(broker.url, table.table, protocol="3.1.1",
                                   operator="sup1", command_timeout_s=3.0) as conn:
            await conn.wait_connected(20)
            result = await conn.command("recall", hands=1)
            assert isinstance(result["hands"], list)
            try:
                await conn.command("void_hand", hand_no=999, reason="test")
            except CommandRefused as refused:
                assert refused.code == "unknown_hand"
            else:
                raise AssertionError("void_hand 999 was accepted")
            first = await conn.request("new_shoe", request_id="b-1", force=True)
            again = await conn.request("new_shoe", request_id="b-1", force=True)
            assert first["ok"] and again == first
    finally:
        table.stop()

"""Per-user command topics, roles and `instance` as the spec describes them
(mqtt-api.md section 4), through shoed.client. These need the daemon's side of them:
each test first asks the daemon whether it serves per-user topics (`whoami` on
`{root}/cmd/by/{username}`) and is skipped, saying so, when it does not yet."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest
from kit import TableProcess, asynctest, journal_events, wait_shoe_ended

from shoed.client import CommandTimeout, TableConnection, TableFeed, instance_of

pytestmark = [pytest.mark.broker, pytest.mark.timeout(120)]


async def _serves_per_user(url: str, table: str, user: str) -> bool:
    async with TableConnection(url, table, username=user, command_timeout_s=2.0) as probe:
        await probe.wait_connected(10)
        try:
            answer = await probe.request("whoami", retries=1)
        except CommandTimeout:
            return False
        return bool(answer.get("ok"))


@asynctest
async def test_commands_go_to_the_users_own_topics(tmp_path: pathlib.Path,
                                                   broker: Any) -> None:
    table = TableProcess(tmp_path, broker.url, roles={"gs-1": "game_server"}).start()
    try:
        if not await _serves_per_user(broker.url, "T9", "gs-1"):
            pytest.skip("the daemon does not serve {root}/cmd/by/{username} yet")
        async with TableConnection(broker.url, "T9", username="gs-1") as conn:
            assert conn.cmd_topic == "shoed/T9/cmd/by/gs-1"
            assert conn.response_topic == "shoed/T9/cmd/response/gs-1"
            who = await conn.command("whoami")
            assert who["authenticated_as"] == "gs-1"
            assert who["role"] == "game_server"
            assert set(who["commands"]) == {"close_betting", "recall", "roads", "whoami"}
            answer = await conn.request("recall", hands=1)
            assert answer["command"] == "recall"
    finally:
        table.stop()


@asynctest
async def test_instance_field_agrees_with_event_id(tmp_path: pathlib.Path,
                                                   broker: Any) -> None:
    table = TableProcess(tmp_path, broker.url).start()
    got: list[dict[str, Any]] = []

    async def consume(feed: TableFeed) -> None:
        async with feed:
            async for e in feed:
                got.append(e)

    task = asyncio.create_task(consume(TableFeed(broker.url, "T9", from_seq=1, grace_s=0.5)))
    try:
        await wait_shoe_ended(got)
        journal = await journal_events(broker.port, table.root)
        if "instance" not in journal[0]:
            pytest.skip("the daemon does not publish `instance` yet (derived from event_id)")
        for e in journal:
            derived = instance_of({k: v for k, v in e.items() if k != "instance"})
            assert instance_of(e) == derived, e
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        table.stop()

"""RootClaim, the shell's part of `table_id_conflict`: the raise committed (journalled at
once, into the outbox, not published) when another daemon is first seen on the root, the
clear when alone again; a conflict seen again journals nothing more, and a restart
mid-conflict still clears it. The daemon's rooms built on a journal on disk."""

from __future__ import annotations

import asyncio
import json
import pathlib

from rig import make_settings
from test_shell_seams import table

from shoed.daemon import Daemon
from shoed.mqtt.claim import RootTaken


def conflict_alarms(daemon: Daemon) -> list[tuple[str, bool]]:
    bodies = [json.loads(body) for _, body in daemon.outbox.take(10_000)]
    return [(e["alarm_id"], e["active"]) for e in bodies
            if e["type"] == "alarm" and e["code"] == "table_id_conflict"]


def inputs(daemon: Daemon) -> list[str]:
    return [json.loads(body)["kind"] for _, body in daemon.recorder.journal.inputs_after(0)]


def test_raise_once_per_episode_journalled_then_cleared_after_a_restart(
        tmp_path: pathlib.Path) -> None:
    taken = RootTaken("shoed/T9", "ours", {"run_id": "theirs", "online": True})

    async def first() -> str:
        async with table(tmp_path, "whole") as (daemon, _, deal):
            await deal(3)
            claim = daemon.mqtt.claim
            assert claim.run_id == daemon.status.run_id
            claim.taken(taken)
            claim.taken(taken)  # seen again 10 s later: nothing more
            assert inputs(daemon).count("root_conflict") == 1
            (raised,) = conflict_alarms(daemon)
            assert raised[1] is True
            assert [a["code"] for a in daemon.recorder.engine.public_state()["alarms"]] \
                == ["table_id_conflict"]
            return raised[0]

    async def second(alarm_id: str) -> None:
        daemon = Daemon(make_settings(tmp_path / "state", "mqtt://127.0.0.1:1"))
        daemon.build()
        try:
            claim = daemon.mqtt.claim
            assert claim.raised  # restored from the journal
            claim.taken(taken)  # the new run sees it too: still one raise
            assert inputs(daemon).count("root_conflict") == 1
            claim.alone()
            claim.alone()
            assert inputs(daemon).count("root_conflict") == 2
            assert conflict_alarms(daemon) == [(alarm_id, True), (alarm_id, False)]
            assert not claim.raised and daemon.recorder.engine.public_state()["alarms"] == []
        finally:
            daemon.recorder.close()

    asyncio.run(second(asyncio.run(first())))

"""End to end (pty shoe, real Mosquitto): the shoe-order watch holds an unshuffled shoe
before its first result; a shuffled shoe raises nothing; the retained `{root}/roads`
is the board of the results seen, through voids, a daemon restart and a broker restart."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest
from rig import Rig, rig, wait_for

from shoed.core.roads import HandOutcome, roads_message
from shoed.daemon import Daemon
from shoed.sim.broker import PrivateMosquitto
from shoed.sim.shoe import Script

pytestmark = pytest.mark.broker

INTEGRITY = ("shoe_unshuffled", "shoe_order_suspect")


def expected_roads(events: list[dict[str, Any]], upto: int) -> dict[str, Any]:
    """The board a consumer computes from the events up to seq `upto`."""
    results: dict[int, HandOutcome] = {}
    shoe_id: str | None = None
    seq, instance = 0, None
    for event in events:
        if event["seq"] <= upto:
            instance = event["instance"]  # the board names the journal its seq is of
        if event["seq"] > upto or event["type"] not in (
                "shoe_started", "hand_result", "hand_voided"):
            continue
        seq = event["seq"]
        if event["type"] == "shoe_started":
            results, shoe_id = {}, event["shoe_id"]
        elif event["type"] == "hand_result":
            results[event["hand_no"]] = HandOutcome.from_event(event)
        else:
            results.pop(event["hand_no"], None)
    return {**roads_message(list(results.values()), seq=seq, shoe_id=shoe_id),
            "instance": instance}


def test_an_unshuffled_shoe_is_held_before_its_first_result(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    async def main() -> None:
        script = Script(pace_s=0.02, shoes=1, unshuffled=True)
        async with rig(tmp_path, broker, decks=8, seed=2, script=script) as r:
            c = r.collector
            await wait_for(lambda: [e for e in c.of("alarm")
                                    if e["code"] == "shoe_unshuffled"], 60, "shoe_unshuffled")
            first = next(e for e in c.of("alarm") if e["code"] == "shoe_unshuffled")
            assert first["card_index"] <= 6 and first["detector"] == "suited_step_run"
            assert [x["card"] for x in first["cards"]] == ["AS", "2S", "3S", "4S", "5S", "6S"]
            await wait_for(lambda: (c.retained.get("state", {}).get("hold") or {}).get(
                "reasons") == ["shoe_unshuffled"], 20, "the hold on the state topic")
            await asyncio.sleep(0.5)  # the gate is locked: nothing more is dealt
            assert c.of("hand_result") == []
            assert r.shoe.gate_locked
            assert {"resume", "void_hand", "void_shoe"} <= set(
                c.retained["state"]["hold"]["allowed"])

            def standing_alarms() -> set[str]:
                raised = [e for e in c.of("alarm") if e["code"] == "shoe_unshuffled"]
                return ({e["alarm_id"] for e in raised if e["active"]}
                        - {e["alarm_id"] for e in raised if not e["active"]})

            # Each resume lets the pack go on, and the next detector (monotone_run at
            # card 8, same_suit_run at 13, ...) holds it again before hand 1 completes.
            resumes = 0
            while not c.of("hand_result"):
                assert resumes < 5, "hand 1 never got its result"
                resumes += 1
                held = standing_alarms()
                answer = await c.send({"request_id": f"go{resumes}", "command": "resume",
                                       "operator": "pit"})
                assert answer["ok"], answer
                await wait_for(lambda held=held: not held & standing_alarms(), 20,
                               "the alarms cleared")
                await wait_for(lambda: c.of("hand_result") or standing_alarms(), 20,
                               "a result or the next hold")
            assert resumes == 2  # suited_step_run at card 6, monotone_run at card 8
            cleared = [e for e in c.of("alarm") if e["alarm_id"] == first["alarm_id"]]
            assert [e["active"] for e in cleared] == [True, False]
            assert cleared[1]["seq"] < c.of("hand_result")[0]["seq"]
            answer = await c.send({"request_id": "stop", "command": "void_shoe",
                                   "operator": "pit", "reason": "unshuffled pack"})
            assert answer["ok"], answer
            await wait_for(lambda: c.of("shoe_report"), 20, "the shoe report")
            (report,) = c.of("shoe_report")
            raised = [i for i in report["integrity"] if i["alarm"] == "shoe_unshuffled"]
            assert raised[:2] == [
                {"detector": "suited_step_run", "card_index": 6, "alarm": "shoe_unshuffled"},
                {"detector": "monotone_run", "card_index": 8, "alarm": "shoe_unshuffled"}]
            assert report["supervisor_actions"] == {"resume": 2, "void_shoe": 1}
    asyncio.run(main())


async def _restart_daemon(r: Rig) -> None:
    """Stop the daemon and start a new one on the same journal; the dealer waits."""
    r.shoe.gate_locked = True  # the new daemon's gate frame after HELLO lets him go on
    old = r.daemon
    old.request_stop()
    await asyncio.wait_for(r.tasks[1], 20)
    r.daemon = Daemon(old.settings)
    r.tasks[1] = asyncio.create_task(r.daemon.run())


def test_roads_follow_a_full_shoe_with_voids_and_restarts(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    async def main() -> None:
        script = Script(pace_s=0.02, shoes=1)
        async with rig(tmp_path, broker, decks=2, seed=13, script=script) as r:
            c = r.collector

            def results() -> list[dict[str, Any]]:
                return c.of("hand_result")

            async def withdraw(request_id: str) -> None:
                hand_no = results()[-2]["hand_no"]
                answer = await c.send({"request_id": request_id, "command": "void_hand",
                                       "operator": "pit", "hand_no": hand_no,
                                       "reason": "review"})
                assert answer["ok"], answer

            await wait_for(lambda: len(results()) >= 3, 60, "3 results")
            await withdraw("v1")
            await wait_for(lambda: len(results()) >= 6, 60, "6 results")
            await _restart_daemon(r)
            await wait_for(lambda: len(results()) >= 9, 60, "9 results after the restart")
            await withdraw("v2")
            await wait_for(lambda: len(results()) >= 12, 60, "12 results")
            broker.stop(kill=True)
            broker.start()
            c.retained.pop("roads", None)
            await wait_for(lambda: "roads" in c.retained, 30, "roads after the broker restart")
            await wait_for(lambda: c.of("shoe_ended"), 180, "the shoe to end")
            await wait_for(lambda: r.daemon.outbox.depth() == 0, 20, "outbox drained")
            await c.fill_gaps(r.daemon.recorder.engine.seq)
            events = c.events
            assert not [e for e in events if e["type"] == "alarm" and e["code"] in INTEGRITY]
            assert [e["type"] for e in events].count("shoe_report") == 1
            withdrawn = [e for e in events if e["type"] == "hand_voided"]
            assert len(withdrawn) == 2 and all(v["result_withdrawn"] for v in withdrawn)
            # Every board received equals the one computed from the results up to its seq.
            assert c.roads
            for board in c.roads:
                assert board == expected_roads(events, board["seq"])
            changes = [e["seq"] for e in events
                       if e["type"] in ("shoe_started", "hand_result", "hand_voided")]
            seen = {board["seq"] for board in c.roads}
            assert len(seen & set(changes)) >= len(changes) // 2  # (a batch shares one)
            final = expected_roads(events, events[-1]["seq"])
            assert final["seq"] == changes[-1]
            await wait_for(lambda: c.retained.get("roads") == final, 10, "the final board")
            assert final["stats"]["hands"] == len(results()) - 2
            answer = await c.send({"request_id": "b", "command": "roads", "operator": "tv"})
            assert answer["ok"] and answer["result"] == final
    asyncio.run(main())

"""End to end: real Mosquitto, the daemon, the simulated shoe on a real pty (pyserial)."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest
from rig import rig, wait_for

from shoed.core.game import evaluate
from shoed.sim.broker import PrivateMosquitto
from shoed.sim.shoe import Script

pytestmark = pytest.mark.broker


def check_shoe(events: list[dict[str, Any]], dealt: list[str], allow_unread: bool = False
               ) -> None:
    """Every card once and in order, every result right, seq gapless.

    `allow_unread`: a card may stay unknown (an unread burn needs no entry)."""
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "seq has gaps"
    # What each card index finally is (a manual entry re-publishes an unread card).
    known: dict[int, str | None] = {}
    for e in events:
        if e["type"] == "card" and e["card_index"] is not None and (
                e["card"] is not None or e["card_index"] not in known):
            known[e["card_index"]] = e["card"]
    assert sorted(known) == list(range(1, len(known) + 1)), "card indexes not 1..n"
    seen = [known[i] for i in sorted(known)]
    if allow_unread:
        seen = [card if card is not None else dealt[i] for i, card in enumerate(seen)]
    assert seen == dealt[: len(known)]
    by_hand: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
    for e in events:
        if e["type"] == "card" and e["position"] in ("P1", "B1", "P2", "B2", "P3", "B3"):
            by_hand.setdefault((e["shoe_id"], e["hand_no"]), {})[e["card_index"]] = e
    results = [e for e in events if e["type"] == "hand_result"]
    assert len({(r["shoe_id"], r["hand_no"]) for r in results}) == len(results)
    for result in results:
        cards = by_hand[(result["shoe_id"], result["hand_no"])]
        draw_order = [cards[i]["card"] for i in sorted(cards)]
        expected = evaluate(draw_order)
        assert result["winner"] == expected.winner
        assert result["player_cards"] == list(expected.player_cards)
        assert result["banker_cards"] == list(expected.banker_cards)
        assert result["player_pair"] == expected.player_pair


def test_full_8_deck_shoe_end_to_end(tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    async def main() -> None:
        async with rig(tmp_path, broker, decks=8, seed=11,
                       script=Script(pace_s=0.0, shoes=1)) as r:
            await wait_for(lambda: r.collector.of("shoe_ended"), 240, "the shoe to end")
            await wait_for(lambda: r.daemon.outbox.depth() == 0, 10, "outbox drained")
            await r.caught_up()
            events = r.collector.events
            check_shoe(events, r.shoe.dealt)
            assert len(r.collector.of("hand_result")) > 60
            assert r.collector.of("last_hand")[0]["reason"] == "cut_card"
            assert r.collector.retained["status"]["online"] is True
            await wait_for(lambda: r.collector.retained["device"]["connected"] is True, 5,
                           "device topic: connected")
            assert r.collector.retained["device"]["serial_no"] == "SIM-0001"
            await wait_for(lambda: r.collector.retained.get("state", {}).get("seq")
                           == events[-1]["seq"], 10, "state republished")
            assert r.collector.retained["state"]["shoe_state"] == "shoe_ended"
    asyncio.run(main())


def test_rules_visible_on_mqtt_with_line_noise(tmp_path: pathlib.Path,
                                               broker: PrivateMosquitto) -> None:
    """Multi-card pulls, unnecessary cards and a noisy line; results still right."""
    async def main() -> None:
        script = Script(pace_s=0.0, shoes=1, multi_pull_rate=0.3, unnecessary_rate=0.15,
                        noise_rate=0.05)
        async with rig(tmp_path, broker, decks=1, seed=3, script=script,
                       rules={"unnecessary_cards": "burn_then_player"}) as r:
            await wait_for(lambda: r.collector.of("shoe_ended") or r.collector.of(
                "shoe_voided"), 120, "the shoe to finish")
            await wait_for(lambda: r.daemon.outbox.depth() == 0, 10, "outbox drained")
            procedures = {(p["rule"], p["action"]) for p in r.collector.of("procedure")}
            assert ("multi_card_pull", "reordered") in procedures
            assert ("unnecessary_card", "next_burn") in procedures
            assert r.daemon.session.link.discards, "noise was seen"
            check_shoe(r.collector.events, r.shoe.dealt)
    asyncio.run(main())


def test_commands_round_trip(tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    async def main() -> None:
        script = Script(pace_s=0.05, shoes=1)
        async with rig(tmp_path, broker, decks=1, seed=8, script=script,
                       table={"betting_control": "commands"}) as r:
            c = r.collector
            await wait_for(lambda: r.collector.retained.get("state", {}).get("betting")
                           == "open", 30, "betting open after commencement")
            bad = await c.send(b"{not json")
            assert bad["ok"] is False and bad["error"]["code"] == "invalid_json"
            assert bad["request_id"] is None
            missing = await c.send({"request_id": "m1", "command": "void_hand",
                                    "operator": "sup"})
            assert missing["error"]["code"] == "invalid_command"
            assert "hand_no" in missing["error"]["message"]
            unknown = await c.send({"request_id": "u1", "command": "explode", "operator": "x"})
            assert unknown["error"]["code"] == "unknown_command"
            assert unknown["command"] == "explode"  # every answer echoes `command`
            nan = await c.send({"request_id": "n1", "command": "recall", "operator": "x",
                                "hands": float("nan")})  # json.dumps writes NaN
            assert nan["error"]["code"] == "invalid_json"
            assert (nan["request_id"], nan["command"]) == ("n1", "recall")
            wrong = await c.send({"request_id": "w1", "command": "close_betting",
                                  "operator": "gs", "hand_no": 99})
            assert wrong["error"]["code"] == "wrong_hand"
            closed = await c.send({"request_id": "c1", "command": "close_betting",
                                   "operator": "gs"})
            assert closed["ok"] is True and closed["result"]["hand_no"] == 1
            again = await c.send({"request_id": "c1", "command": "close_betting",
                                  "operator": "gs"})
            assert again == closed  # the original answer, not applied twice
            await wait_for(lambda: c.of("hand_result"), 30, "hand 1's result")
            actions = [a for a in c.of("supervisor_action") if a["request_id"] == "c1"]
            assert len(actions) == 1
            recall = await c.send({"request_id": "r1", "command": "recall", "operator": "x",
                                   "hands": 1})
            assert recall["result"]["hands"][0]["hand_no"] == 1
            replay = await c.send({"request_id": "p1", "command": "replay", "operator": "x",
                                   "from_seq": 1, "to_seq": 3})
            assert replay["ok"] and replay["result"]["count"] == 3
            await wait_for(lambda: len(c.replayed) == 3, 5, "replayed events")
            assert [e["seq"] for e in c.replayed] == [1, 2, 3]
            out = await c.send({"request_id": "p2", "command": "replay", "operator": "x",
                                "from_seq": 10**6})
            assert out["error"]["code"] == "out_of_range"
    asyncio.run(main())


def test_broker_stopped_and_restarted_mid_shoe_loses_nothing(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    async def main() -> None:
        async with rig(tmp_path, broker, decks=1, seed=21,
                       script=Script(pace_s=0.01, shoes=1)) as r:
            # Early in the shoe (seed 21 cuts it at card 38): more than 10 cards to go.
            await wait_for(lambda: r.collector.of("hand_result"), 60, "a result")
            broker.stop(kill=True)
            served = r.shoe.cards_dealt
            await wait_for(lambda: r.shoe.cards_dealt > served + 10, 30,
                           "the shoe served while the broker is down")
            assert r.daemon.outbox.depth() > 0  # events wait on disk
            broker.start()
            await wait_for(lambda: r.collector.of("shoe_ended"), 120, "the shoe to end")
            await wait_for(lambda: r.daemon.outbox.depth() == 0, 20, "outbox drained")
            check_shoe(r.collector.events, r.shoe.dealt)
            assert r.collector.events[0]["seq"] == 1
    asyncio.run(main())


def test_a_shoe_with_another_serial_number_is_refused(tmp_path: pathlib.Path,
                                                       broker: PrivateMosquitto) -> None:
    async def main() -> None:
        async with rig(tmp_path, broker, decks=1, seed=2, script=Script(pace_s=0.02),
                       device={"serial_no": "SN-EXPECTED"}) as r:
            await wait_for(lambda: r.collector.of("alarm"), 15, "the refusal alarm")
            await asyncio.sleep(1.0)
            (alarm,) = r.collector.of("alarm")
            assert alarm["code"] == "protocol_mismatch" and "SIM-0001" in alarm["message"]
            assert not r.collector.of("shoe_started") and not r.collector.of("card")
            assert r.shoe.link.pending_count > 0  # nothing was ACKed: the shoe keeps it all
    asyncio.run(main())


def test_the_right_shoe_plugged_back_after_a_wrong_one_is_served_again(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    """The configured shoe's adapter pulled (the shoe powered, its frames kept), another
    shoe on the line (refused), then the configured one back: its frame in flight comes
    before its HELLO (stop-and-wait), and is taken, so the shoe is served again and every
    card it dealt is published. Before, the refusal outlived the line: the frame was
    refused, the HELLO never came, and nothing was ACKed until a restart."""
    from shoed.sim.shoe import PtyShoe, SimulatedShoe

    async def main() -> None:
        async with rig(tmp_path, broker, decks=2, seed=21, script=Script(pace_s=0.05),
                       device={"serial_no": "SIM-0001"}) as r:
            assert r.pty is not None
            await wait_for(lambda: len(r.collector.of("card")) >= 8, 30, "cards dealt")
            r.pty.unplug()
            loop = asyncio.get_running_loop()
            other = PtyShoe(SimulatedShoe(decks=1, seed=3, serial_no="SN-OTHER",
                                          script=Script(pace_s=0.05), now=loop.time()),
                            link_path=tmp_path / "shoe")
            other.plug()
            running = asyncio.create_task(other.run())
            try:
                await wait_for(lambda: any(a["code"] == "protocol_mismatch"
                                           for a in r.collector.of("alarm")), 20,
                               "the other shoe refused")
            finally:
                other.unplug()
                running.cancel()
            assert r.shoe.link.pending_count > 0  # the shoe dealt on while away
            r.pty.plug()
            await wait_for(lambda: r.collector.of("shoe_ended"), 120, "the shoe to end")
            await wait_for(lambda: r.shoe.link.pending_count == 0, 10, "every frame ACKed")
            check_shoe(r.collector.events, r.shoe.dealt)
    asyncio.run(main())


def test_mqtt_3_1_1(tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    async def main() -> None:
        async with rig(tmp_path, broker, decks=1, seed=12, script=Script(pace_s=0.0, shoes=1),
                       mqtt={"protocol": "3.1.1"}) as r:
            await wait_for(lambda: r.collector.of("shoe_ended"), 60, "the shoe to end")
            await wait_for(lambda: r.daemon.outbox.depth() == 0, 10, "outbox drained")
            check_shoe(r.collector.events, r.shoe.dealt)
            answer = await r.collector.send({"request_id": "v311", "command": "recall",
                                             "operator": "x"})
            assert answer["ok"]
    asyncio.run(main())


def test_rfid_cards_through_the_deck_manifest(tmp_path: pathlib.Path,
                                              broker: PrivateMosquitto) -> None:
    from shoed.sim.shoe import rfid_manifest

    uids, csv_text = rfid_manifest(1)
    manifest = tmp_path / "deck.csv"
    manifest.write_text(csv_text)

    async def main() -> None:
        script = Script(pace_s=0.0, shoes=1, rfid=uids)
        async with rig(tmp_path, broker, decks=1, seed=14, script=script,
                       cards={"manifest": str(manifest)}) as r:
            await wait_for(lambda: r.collector.of("shoe_ended"), 60, "the shoe to end")
            await wait_for(lambda: r.daemon.outbox.depth() == 0, 10, "outbox drained")
            check_shoe(r.collector.events, r.shoe.dealt)
            cards = [e for e in r.collector.of("card") if e["card_index"]]
            assert all(e["uid"] == uids[e["card"]] for e in cards)
            assert not r.collector.of("alarm")
    asyncio.run(main())


def test_unread_card_resolved_by_manual_entry_over_mqtt(tmp_path: pathlib.Path,
                                                        broker: PrivateMosquitto) -> None:
    async def main() -> None:
        script = Script(pace_s=0.02, shoes=1, unread_rate=0.08)
        async with rig(tmp_path, broker, decks=1, seed=15, script=script) as r:
            c = r.collector
            entered = 0
            while not c.of("shoe_ended"):
                await wait_for(lambda: c.of("shoe_ended") or (
                    c.retained.get("state", {}).get("hold") or {}).get("card_index"), 60,
                    "a hold on an unread card, or the end of the shoe")
                hold = (c.retained.get("state", {}).get("hold") or {})
                if c.of("shoe_ended") or not hold.get("card_index"):
                    continue
                index = hold["card_index"]
                truth = r.shoe.dealt[index - 1]  # single-card pulls: host index = shoe order
                answer = await c.send({"request_id": f"m{index}", "command": "manual_card",
                                       "operator": "pit", "card_index": index, "card": truth})
                assert answer["ok"], answer
                entered += 1
                await wait_for(lambda held=index: (c.retained.get("state", {}).get("hold")
                                                   or {}).get("card_index") != held, 10,
                               "the hold released")
            await wait_for(lambda: r.daemon.outbox.depth() == 0, 10, "outbox drained")
            assert entered >= 1
            manual = [e for e in c.of("card") if e["source"] == "manual"]
            assert len(manual) >= entered
            # Every result still equals the evaluation of the true cards.
            check_shoe(c.events, r.shoe.dealt, allow_unread=True)
    asyncio.run(main())

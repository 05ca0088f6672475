"""An event applied while the publisher waits goes to the broker in the same turn.

The live publisher parks on the outbox's wake-up when it has nothing to send; an event
applied then is handed to paho at once by the outbox's on_ready (in the turn that read
the shoe's frame), and the publisher, woken as ever, awaits its PUBACK and sends the
rest in order (docs/decisions.md 136). Over a real pty and a real Mosquitto: every event
once, in order, and most frames' first event sent ahead.
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest
from rig import rig, wait_for
from test_daemon_e2e import check_shoe

from shoed.device.session import DeviceSession
from shoed.mqtt import window
from shoed.sim.broker import PrivateMosquitto
from shoed.sim.shoe import Script

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]


def test_events_go_out_in_the_turn_that_applied_them_once_and_in_order(
        tmp_path: pathlib.Path, broker: PrivateMosquitto,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ahead: list[tuple[bool, str]] = []  # (inside the frame's turn, topic)
    inner = window.PublishWindow.send_now
    in_frame = [False]

    def send_now(self: Any, topic: str, *args: Any, **kwargs: Any) -> bool:
        sent = inner(self, topic, *args, **kwargs)
        if sent:
            ahead.append((in_frame[0], topic))
        return bool(sent)

    monkeypatch.setattr(window.PublishWindow, "send_now", send_now)
    on_bytes = DeviceSession.on_bytes

    def marked(self: DeviceSession, data: bytes) -> None:
        in_frame[0] = True
        try:
            on_bytes(self, data)
        finally:
            in_frame[0] = False

    monkeypatch.setattr(DeviceSession, "on_bytes", marked)

    async def main() -> None:
        async with rig(tmp_path, broker, decks=1, seed=4,
                       script=Script(pace_s=0.02, shoes=1)) as r:
            await wait_for(lambda: r.collector.of("shoe_ended"), 120, "the shoe to end")
            await wait_for(lambda: r.daemon.outbox.depth() == 0, 10, "outbox drained")
            events = r.collector.events
            check_shoe(events, r.shoe.dealt)
            ids = [e["event_id"] for e in r.collector.raw_events]
            assert len(ids) == len(set(ids))  # none twice: no reconnect happened
            cards = len(r.collector.of("card"))
            assert all(inside for inside, _ in ahead)  # only ever from the frame's turn
            assert {topic for _, topic in ahead} == {r.daemon.settings.topic_root + "/events"}
            # Most frames find the publisher parked (a snapshot's PUBACK still awaited
            # is the exception: then the publisher sends it after its wake-up).
            assert len(ahead) >= cards // 2, (len(ahead), cards)
            await asyncio.sleep(0)
    asyncio.run(main())

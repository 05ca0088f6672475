"""The events of an ACKed frame reach the publisher before their outbox rows are written
(docs/decisions.md 28). A crash in between loses nothing: the restart regenerates the
same events, byte for byte, from the fsynced record."""

from __future__ import annotations

import asyncio
import pathlib

from rig import make_settings

from shoed.daemon import Daemon
from shoed.device.loopback import LoopbackTransport
from shoed.sim.shoe import Script, SimulatedShoe


async def _deal(daemon: Daemon, cards: int) -> None:
    """Feed a simulated shoe's frames to the daemon through the loopback transport, the
    event loop turning between them (gate and indicator frames go out on its next turn)."""
    shoe = SimulatedShoe(decks=1, seed=4, script=Script(pace_s=0.0, shoes=1), now=0.0)
    now = 0.0
    line = LoopbackTransport()
    line.receive_with(daemon.session.on_bytes)
    await line.open()
    daemon.session.transport = line
    for _ in range(10_000):
        if shoe.cards_dealt >= cards:
            return
        now += 0.01
        shoe.poll(now)
        if data := shoe.data_to_send():
            line.feed(data)
        await asyncio.sleep(0)
        shoe.receive_data(line.take(), now)
    raise AssertionError(f"the shoe dealt {shoe.cards_dealt} of {cards} cards")


def test_crash_after_publish_before_outbox_rows_regenerates_the_same_events(
        tmp_path: pathlib.Path) -> None:
    settings = make_settings(tmp_path / "state", "mqtt://127.0.0.1:1")

    async def crashed_run() -> list[tuple[int, str]]:
        daemon = Daemon(settings)
        daemon.build()
        await _deal(daemon, 30)
        handed_over = list(daemon.outbox.fresh)  # what the publisher would send now
        assert daemon.outbox.unwritten, "the outbox rows are still to be written"
        on_disk = daemon.recorder.journal.unpublished(10_000)
        assert len(on_disk) < len(handed_over)
        daemon.recorder.journal.close()  # "kill -9": nothing more
        return handed_over

    handed_over = asyncio.run(crashed_run())
    assert [seq for seq, _ in handed_over] == list(range(1, len(handed_over) + 1))

    restarted = Daemon(settings)
    restarted.build()
    assert restarted.recorder.journal.unpublished(10_000) == handed_over  # same seq, bytes
    assert restarted.recorder.engine.seq == handed_over[-1][0]

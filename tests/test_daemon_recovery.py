"""The events of an ACKed frame reach the publisher before their outbox rows are written
(docs/decisions.md 28). A crash in between loses nothing: the restart regenerates the
same events, byte for byte, from the fsynced record."""

from __future__ import annotations

import asyncio
import pathlib

from rig import make_settings

from shoed.daemon import Daemon
from shoed.sim.shoe import Script, SimulatedShoe


class Wire:
    """What the daemon writes to the shoe, kept until the shoe reads it."""

    def __init__(self) -> None:
        self.sent = bytearray()

    def write(self, data: bytes) -> None:
        self.sent += data

    def take(self) -> bytes:
        data, self.sent = bytes(self.sent), bytearray()
        return data


async def _deal(daemon: Daemon, cards: int) -> None:
    """Feed a simulated shoe's frames to the daemon as the transport would, the event
    loop turning between them (gate and indicator frames go out on its next turn)."""
    shoe = SimulatedShoe(decks=1, seed=4, script=Script(pace_s=0.0, shoes=1), now=0.0)
    now = 0.0
    wire = Wire()
    daemon.transport, daemon.device_connected = wire, True  # type: ignore[assignment]
    for _ in range(10_000):
        if shoe.cards_dealt >= cards:
            return
        now += 0.01
        shoe.poll(now)
        if data := shoe.data_to_send():
            daemon.on_bytes(data)
        await asyncio.sleep(0)
        shoe.receive_data(wire.take(), now)
    raise AssertionError(f"the shoe dealt {shoe.cards_dealt} of {cards} cards")


def test_crash_after_publish_before_outbox_rows_regenerates_the_same_events(
        tmp_path: pathlib.Path) -> None:
    settings = make_settings(tmp_path / "state", "mqtt://127.0.0.1:1")

    async def crashed_run() -> list[tuple[int, str]]:
        daemon = Daemon(settings)
        daemon.restore()
        await _deal(daemon, 30)
        handed_over = list(daemon._fresh)  # what the publisher would send now
        assert daemon._unwritten, "the outbox rows are still to be written"
        on_disk = daemon.journal.unpublished(10_000) if daemon.journal else []
        assert len(on_disk) < len(handed_over)
        daemon.journal.close()  # type: ignore[union-attr]  # "kill -9": nothing more
        return handed_over

    handed_over = asyncio.run(crashed_run())
    assert [seq for seq, _ in handed_over] == list(range(1, len(handed_over) + 1))

    restarted = Daemon(settings)
    restarted.restore()
    assert restarted.journal is not None
    assert restarted.journal.unpublished(10_000) == handed_over  # same seq, same bytes
    assert restarted.engine is not None and restarted.engine.seq == handed_over[-1][0]

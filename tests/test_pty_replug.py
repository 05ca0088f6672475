"""The cause of the once-flaky `test_pty_closed_and_reopened` (docs/reliability.md):
after an unplug the simulated shoe left its `/dev/shoe`-like symlink pointing at a pty
number the kernel gives to the next pty opened on the machine. Another test's shoe (the
machine runs several suites at once) got it, and the daemon, reconnecting, opened that
other line: its frames showed as `cards_lost` (a seq far from ours) and `excess_card`.
An unplug now removes the symlink, as udev removes `/dev/shoe`."""

from __future__ import annotations

import asyncio
import os
import pathlib
import tty

import pytest
from rig import rig, wait_for
from test_daemon_e2e import check_shoe

from firmware_protocol import Card, build_frame, optical_code
from firmware_protocol.messages import encode_payload, type_code_of
from shoed.sim.broker import PrivateMosquitto
from shoed.sim.shoe import PtyShoe, Script, SimulatedShoe


def test_unplug_removes_the_symlink_and_replug_points_it_at_the_new_pty(
        tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        link = tmp_path / "shoe"
        pty = PtyShoe(SimulatedShoe(decks=1, seed=1), link_path=link)
        first = pty.plug()
        assert os.readlink(link) == first
        pty.unplug()
        assert not link.is_symlink() and not link.exists()
        second = pty.plug()
        assert os.readlink(link) == second
        pty.unplug()
    asyncio.run(main())


@pytest.mark.broker
def test_a_foreign_pty_on_the_freed_number_is_never_opened(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    async def main() -> None:
        async with rig(tmp_path, broker, decks=1, seed=6,
                       script=Script(pace_s=0.02, shoes=1)) as r:
            c = r.collector
            await wait_for(lambda: len(c.of("hand_result")) >= 1, 30, "a result")
            assert r.pty is not None
            old = r.pty.path
            r.pty.unplug()
            await wait_for(lambda: any(a["code"] == "device_lost" and a["active"]
                                       for a in c.of("alarm")), 10, "device_lost raised")
            await wait_for(lambda: not os.path.exists(old), 5, "the old pty to go")
            # Another table's shoe, mid-stream, on the pty number just freed (the kernel
            # gives the lowest free one: usually ours), held until the daemon would have
            # opened it (its back-off is 0.5 s here).
            master, slave = os.openpty()
            for _ in range(20):
                if os.ttyname(slave) == old:
                    break
                os.close(master)
                os.close(slave)
                await asyncio.sleep(0.01)
                master, slave = os.openpty()
            tty.setraw(master)
            tty.setraw(slave)
            opened = False
            try:
                for i in range(100):
                    card = Card(1000 + i, 30 + i, 30 + i, 1, 1, 1, optical_code("9S"), 95)
                    os.write(master, build_frame(type_code_of(card), 300 + i,
                                                 encode_payload(card)))
                    await asyncio.sleep(0.02)
                    opened = opened or r.daemon.status.device_open
                    if i >= 50 and opened:
                        break
            finally:
                os.close(master)
                os.close(slave)
            assert not opened, "the daemon opened another program's pty"
            r.pty.plug()
            await wait_for(lambda: c.of("shoe_ended"), 60, "the shoe to end")
            codes = {a["code"] for a in c.of("alarm")}
            assert not codes & {"cards_lost", "excess_card"}, codes
            check_shoe(c.events, r.shoe.dealt)
    asyncio.run(main())

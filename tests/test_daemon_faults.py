"""Faults against the real daemon: USB and pty unplug/replug, a full disk, kill -9."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import pathlib
import subprocess
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from faultlab import kill_run, scale
from rig import rig, wait_for
from test_daemon_e2e import check_shoe

from firmware_protocol import MessageReceived
from shoed.device.usb import UsbTransport
from shoed.sim.broker import PrivateMosquitto
from shoed.sim.shoe import Script, SimulatedShoe
from shoed.sim.usb import SimulatedUsbBackend

pytestmark = pytest.mark.broker


@contextlib.asynccontextmanager
async def usb_table(tmp_path: pathlib.Path, broker: PrivateMosquitto,
                    backend_class: type[SimulatedUsbBackend]) -> AsyncIterator[Any]:
    """The daemon on the simulated USB backend, one one-deck shoe dealt 20 ms a pull:
    (the rig, the shoe, the backend)."""
    loop = asyncio.get_running_loop()
    shoe = SimulatedShoe(decks=1, seed=4, script=Script(pace_s=0.02, shoes=1),
                         now=loop.time())
    backend = backend_class(shoe)
    backend.start()
    try:
        async with rig(tmp_path, broker, shoe=shoe,
                       transport_factory=lambda: UsbTransport(0x1209, 0xBAC0, backend=backend),
                       device={"transport": "usb"}) as r:
            yield r, shoe, backend
    finally:
        backend.stop()


def test_usb_path_with_unplug_and_replug(tmp_path: pathlib.Path,
                                         broker: PrivateMosquitto) -> None:
    async def main() -> None:
        async with usb_table(tmp_path, broker, SimulatedUsbBackend) as (r, shoe, backend):
            c = r.collector
            await wait_for(lambda: len(c.of("hand_result")) >= 1, 30, "a result over USB")
            backend.unplug()
            await wait_for(lambda: any(a["code"] == "device_lost" and a["active"]
                                       for a in c.of("alarm")), 10, "device_lost raised")
            raised = next(a for a in c.of("alarm") if a["code"] == "device_lost")
            # said as it happened: the line went away, not "5 s without a frame"
            assert raised["message"].startswith("the shoe's line went away"), raised
            await wait_for(lambda: c.retained.get("device", {}).get("connected") is False,
                           10, "device topic says disconnected")
            backend.replug()
            await wait_for(lambda: any(a["code"] == "device_lost" and not a["active"]
                                       for a in c.of("alarm")), 15, "device_lost cleared")
            await wait_for(lambda: c.of("shoe_ended"), 60, "the shoe to end")
            await wait_for(lambda: r.daemon.outbox.depth() == 0, 10, "outbox drained")
            check_shoe(c.events, shoe.dealt)
            await wait_for(lambda: c.retained.get("device", {}).get("connected") is True,
                           10, "device topic says connected")
    asyncio.run(main())


def test_pty_closed_and_reopened(tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    async def main() -> None:
        async with rig(tmp_path, broker, decks=1, seed=6,
                       script=Script(pace_s=0.02, shoes=1)) as r:
            c = r.collector
            await wait_for(lambda: len(c.of("hand_result")) >= 1, 30, "a result")
            assert r.pty is not None
            r.pty.unplug()  # like pulling the USB-serial adapter
            await wait_for(lambda: any(a["code"] == "device_lost" and a["active"]
                                       for a in c.of("alarm")), 10, "device_lost raised")
            await asyncio.sleep(0.5)
            host_frames: list[tuple[str, int]] = []
            handle = r.shoe.on_link_event

            def seen(event: Any, now: float) -> None:
                if isinstance(event, MessageReceived):
                    host_frames.append((type(event.message).__name__, event.seq))
                handle(event, now)

            r.shoe.on_link_event = seen  # type: ignore[method-assign]
            r.pty.plug()  # a new pty behind the same symlink, as udev's /dev/shoe
            await wait_for(lambda: host_frames, 10, "a host frame on the new line")
            # The host opens the link anew: GET_INFO first, seq 0 (spec section 3).
            assert host_frames[0] == ("GetInfo", 0)
            await wait_for(lambda: c.of("shoe_ended"), 60, "the shoe to end")
            await wait_for(lambda: r.daemon.outbox.depth() == 0, 10, "outbox drained")
            check_shoe(c.events, r.shoe.dealt)
            assert any(a["code"] == "device_lost" and not a["active"] for a in c.of("alarm"))
    asyncio.run(main())


def _mount_tmpfs(path: pathlib.Path, size: str) -> bool:
    if os.geteuid() != 0:
        return False
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size},mode=0750"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True)
    return done.returncode == 0


def test_disk_full_stops_acks_then_recovers_without_loss(tmp_path: pathlib.Path,
                                                         broker: PrivateMosquitto) -> None:
    state = tmp_path / "state"
    if not _mount_tmpfs(state, "4m"):
        pytest.skip("needs root and mount(2) for a real full filesystem")

    async def main() -> None:
        async with rig(tmp_path, broker, decks=1, seed=9,
                       script=Script(pace_s=0.03, shoes=1)) as r:
            c = r.collector
            await wait_for(lambda: len(c.of("hand_result")) >= 1, 30, "a result")
            filler = state / "filler"
            # Fill it to the last byte; unbuffered, so closing has nothing left to write.
            with open(filler, "wb", buffering=0) as f, pytest.raises(OSError):
                while True:
                    f.write(b"\0" * 65536)
            await wait_for(lambda: not r.daemon.status.storage_ok, 15, "storage_failed")
            await wait_for(lambda: c.retained.get("status", {}).get("storage_ok") is False,
                           10, "status says storage failed")
            refused = await c.send({"request_id": "s1", "command": "end_shoe",
                                    "operator": "sup"})
            assert refused["error"]["code"] == "storage_failed"
            # Whichever write met the full disk first: a frame's record (that frame is
            # not ACKed: the shoe keeps it) or an effect after the ACK (the gate is
            # locked, so the shoe deals nothing more); both stop the cards at the shoe.
            assert r.shoe.link.pending_count >= 1 or r.shoe.gate_locked
            filler.unlink()
            await wait_for(lambda: r.daemon.status.storage_ok, 20, "storage back")
            await wait_for(lambda: c.of("shoe_ended"), 60, "the shoe to end")
            await wait_for(lambda: r.daemon.outbox.depth() == 0, 10, "outbox drained")
            codes = [(a["code"], a["active"]) for a in c.of("alarm")]
            assert ("storage_failed", True) in codes and ("storage_failed", False) in codes
            check_shoe(c.events, r.shoe.dealt)
    try:
        asyncio.run(main())
    finally:
        subprocess.run(["umount", "-l", str(state)], capture_output=True)


def test_daemon_kill9_at_random_instants_loses_and_doubles_nothing(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    started = time.monotonic()
    report = asyncio.run(kill_run(tmp_path, broker, kills=scale(4, 50),
                                  crash_points=scale(3, 20), seed=13))
    check_shoe(report.events, report.dealt)
    indexes = [e["card_index"] for e in report.events if e["type"] == "card"
               and e["card_index"] is not None]
    assert sorted(set(indexes)) == list(range(1, len(report.dealt) + 1))
    assert report.events[0]["seq"] == 1
    assert report.kills + report.crash_points == scale(7, 70)
    print(f"kill -9 run: {report.kills} kills, {report.crash_points} crash points, "
          f"{len(report.dealt)} cards, {len(report.events)} events, "
          f"{time.monotonic() - started:.1f} s")


def test_usb_writes_never_wait_on_the_event_loop(tmp_path: pathlib.Path,
                                                 broker: PrivateMosquitto) -> None:
    """pyusb's bulk write blocks (field-notes: "run them in a thread with finite
    timeouts"): with a shoe whose bulk OUT takes 50 ms, every write happens off the
    loop's thread, and every card still arrives, once."""
    import threading
    import time as clock

    class SlowOut(SimulatedUsbBackend):
        threads: set[str] = set()

        def bulk_write(self, dev_handle: Any, ep: int, intf: int, data: Any,
                       timeout: int) -> int:
            self.threads.add(threading.current_thread().name)
            clock.sleep(0.05)
            return super().bulk_write(dev_handle, ep, intf, data, timeout)

    async def main() -> None:
        async with usb_table(tmp_path, broker, SlowOut) as (r, shoe, backend):
            c = r.collector
            await wait_for(lambda: c.of("shoe_ended"), 90, "the shoe to end")
            await wait_for(lambda: r.daemon.outbox.depth() == 0, 10, "outbox drained")
            check_shoe(c.events, shoe.dealt)
        assert backend.threads and threading.main_thread().name not in backend.threads, \
            backend.threads
    asyncio.run(main())


def test_the_hosts_get_info_is_sent_again_after_250_ms(tmp_path: pathlib.Path,
                                                         broker: PrivateMosquitto) -> None:
    """Spec section 3: "No ACK within 250 ms: the sender retransmits"; the host's opening
    GET_INFO once waited for the timer's next second. A device that never answers."""
    class Mute:
        description = "mute"

        def __init__(self) -> None:
            self.writes: list[tuple[float, bytes]] = []

        async def open(self) -> None:
            pass

        async def read(self) -> bytes:
            await asyncio.sleep(3600)
            return b""

        def receive_with(self, receiver: Any) -> None:
            pass

        def write(self, data: bytes) -> None:
            self.writes.append((clock(), data))

        async def close(self) -> None:
            pass

    clock = time.monotonic
    mute = Mute()

    async def main() -> None:
        async with rig(tmp_path, broker, transport_factory=lambda: mute, collector=False):
            await wait_for(lambda: len(mute.writes) >= 4, 10, "GET_INFO sent four times")
    asyncio.run(main())
    assert len({data for _, data in mute.writes[:4]}) == 1  # the same bytes each time
    times = [t for t, _ in mute.writes[:4]]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(0.2 <= gap < 0.6 for gap in gaps), gaps

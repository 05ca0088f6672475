"""The shoe over USB when the line misbehaves (an outside review, decisions.md 225): two
devices with the shoe's VID/PID, a line that fails as soon as it opens, a close while a
bulk read runs, a driver call that never returns at the daemon's stop. The simulated
pyusb backend of shoed/sim/usb.py, the real UsbTransport and daemon."""

from __future__ import annotations

import asyncio
import errno
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import usb.backend
import usb.core
from rig import rig, wait_for
from test_daemon_e2e import check_shoe

from shoed.device.usb import UsbTransport
from shoed.sim.broker import PrivateMosquitto
from shoed.sim.shoe import Script, SimulatedShoe
from shoed.sim.usb import PID, VID, SimulatedUsbBackend

pytestmark = pytest.mark.broker

_BY_DEVICE = ("get_configuration_descriptor", "get_interface_descriptor",
              "get_endpoint_descriptor", "open_device")
_BY_HANDLE = ("close_device", "set_configuration", "get_configuration",
              "set_interface_altsetting", "claim_interface", "release_interface",
              "bulk_write", "bulk_read")


class SideBySide(usb.backend.IBackend):  # type: ignore[misc]
    """Several simulated shoes on one bus, all with the same VID/PID, in this order."""

    def __init__(self, *parts: SimulatedUsbBackend) -> None:
        super().__init__()
        self.parts = parts

    def enumerate_devices(self) -> Any:
        for i, part in enumerate(self.parts):
            for dev in part.enumerate_devices():
                yield (i, dev)

    def get_device_descriptor(self, dev: Any) -> Any:
        descriptor = self.parts[dev[0]].get_device_descriptor(dev[1])
        descriptor.address += 10 * dev[0]  # each its own address on the bus
        return descriptor

    def __getattribute__(self, name: str) -> Any:
        if name in _BY_DEVICE or name in _BY_HANDLE:
            parts = object.__getattribute__(self, "parts")

            def routed(first: Any, *args: Any) -> Any:
                result = getattr(parts[first[0]], name)(first[1], *args)
                return (first[0], result) if name == "open_device" else result
            return routed
        return object.__getattribute__(self, name)


def test_the_configured_shoe_is_found_beside_another_with_the_same_usb_ids(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    """Another shoe enumerated first with the same VID/PID: the daemon opened it, refused
    it (device.serial_no) and kept that line for good, never reaching the configured shoe
    plugged beside it. Now the refused device is dropped and the next one opened."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        other = SimulatedUsbBackend(SimulatedShoe(decks=1, seed=9, serial_no="SN-OTHER",
                                                  script=Script(pace_s=0.02), now=loop.time()))
        shoe = SimulatedShoe(decks=1, seed=4, script=Script(pace_s=0.02, shoes=1),
                             now=loop.time())
        ours = SimulatedUsbBackend(shoe)
        bus = SideBySide(other, ours)
        for part in (other, ours):
            part.start()
        try:
            async with rig(tmp_path, broker, shoe=shoe,
                           transport_factory=lambda: UsbTransport(VID, PID, backend=bus),
                           device={"transport": "usb", "serial_no": "SIM-0001"}) as r:
                c = r.collector
                await wait_for(lambda: c.of("shoe_ended"), 60, "the configured shoe's end")
                await r.caught_up()
                check_shoe(c.events, shoe.dealt)
                notices = [a for a in c.of("alarm") if a["code"] == "protocol_mismatch"]
                assert len(notices) == 1 and "SN-OTHER" in notices[0]["message"]
                assert c.retained["device"]["serial_no"] == "SIM-0001"
        finally:
            for part in (other, ours):
                part.stop()
    asyncio.run(main())


def test_a_line_that_fails_as_it_opens_is_reopened_with_back_off(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    """A device that opens and then stalls every read (EPIPE): it was reopened four times
    a second for good, each time a device_opened, a device_lost and two status changes.
    Now such a line backs off as a failed open does, up to device.reconnect_max_s."""
    class Stalled(SimulatedUsbBackend):
        def bulk_read(self, dev_handle: Any, ep: int, intf: int, buff: Any,
                      timeout: int) -> int:
            raise usb.core.USBError("Pipe error", errno=errno.EPIPE)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        backend = Stalled(SimulatedShoe(decks=1, seed=4, script=Script(pace_s=0.02),
                                        now=loop.time()))
        backend.start()
        made: list[float] = []

        def factory() -> UsbTransport:
            made.append(loop.time())
            return UsbTransport(VID, PID, backend=backend)
        try:
            async with rig(tmp_path, broker, shoe=backend.shoe, transport_factory=factory,
                           device={"transport": "usb", "reconnect_max_s": 2.0}):
                await wait_for(lambda: made, 10, "the first open")
                await asyncio.sleep(5.0)
                # 0.5 + 1 + 2 + 2 s of back-off fit in 5 s: 5 lines at most (was ~20)
                assert 2 <= len(made) <= 6, made
        finally:
            backend.stop()
    asyncio.run(main())


def test_no_bulk_read_runs_when_the_device_is_released_and_closed() -> None:
    """libusb: release the interface and close the handle with no transfer under way. The
    close did both while the reader thread was inside a bulk read (20 closes in 20); it
    now stops the reader first."""
    class Watched(SimulatedUsbBackend):
        reading = 0
        overlaps = 0

        def bulk_read(self, dev_handle: Any, ep: int, intf: int, buff: Any,
                      timeout: int) -> int:
            self.reading += 1
            try:
                return super().bulk_read(dev_handle, ep, intf, buff, timeout)
            finally:
                self.reading -= 1

        def release_interface(self, dev_handle: Any, intf: int) -> None:
            self.overlaps += self.reading > 0

        def close_device(self, dev_handle: Any) -> None:
            self.overlaps += self.reading > 0

    async def main() -> None:
        backend = Watched(SimulatedShoe(decks=1, seed=4, script=Script(pace_s=0.5),
                                        now=asyncio.get_running_loop().time()))
        for _ in range(10):
            line = UsbTransport(VID, PID, backend=backend)
            await line.open()
            await asyncio.sleep(0.12)  # the reader waits in a bulk read (nothing to read)
            await line.close()
        assert backend.overlaps == 0
    asyncio.run(main())


def test_a_usb_open_that_never_returns_does_not_keep_the_process_from_its_exit(
        tmp_path: pathlib.Path) -> None:
    """A driver whose open never returns (decisions.md 217's case): the daemon's stop
    finished, but the process did not end. The open ran in asyncio's default executor,
    which the interpreter's exit joins, and pyusb's cleanup at exit waited for the lock
    the hung call holds. Now the open runs in a daemon thread of its own, and `shoed
    run`'s exit says so and leaves without that cleanup, with the run's exit code."""
    script = tmp_path / "hang.py"
    script.write_text(textwrap.dedent("""
        import asyncio, sys, threading
        from shoed import logs
        from shoed.aio import exit_past_hung_device_calls
        from shoed.device.usb import UsbTransport
        from shoed.sim.shoe import SimulatedShoe
        from shoed.sim.usb import PID, VID, SimulatedUsbBackend

        class Hangs(SimulatedUsbBackend):
            def open_device(self, dev):
                threading.Event().wait()  # a driver that never returns

        async def main():
            backend = Hangs(SimulatedShoe(decks=1, seed=1))
            line = UsbTransport(VID, PID, backend=backend)
            try:
                await asyncio.wait_for(line.open(), 0.5)
            except asyncio.TimeoutError:
                print("open timed out", flush=True)

        logs.configure("json", "info")
        asyncio.run(main())
        sys.exit(exit_past_hung_device_calls(3, wait_s=0.5))
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60)
    assert "open timed out" in done.stdout
    assert done.returncode == 3, done.stderr[-2000:]
    assert "device_call_never_returned" in done.stdout + done.stderr

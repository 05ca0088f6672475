"""The shoe's USB vendor interface through pyusb (firmware-protocol.md section 1: VID
0x1209, PID 0xBAC0 by default, interface 0, bulk OUT 0x01 and IN 0x81, 64-byte packets),
on the threaded base of shoed/device/transports.py. pyusb's calls block: they run in
threads (field-notes: "run them in a thread with finite timeouts"); pyusb itself is
imported only when a USB line opens.

Several devices may carry the VID/PID (two shoes on one PC, a spare left plugged): the
transport opens one that no HELLO has refused (device.serial_no) while others are
plugged, and the session drops a refused line when another is there (decisions.md 225).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from shoed.device.transports import READ_TIMEOUT_S, _ThreadedTransport
from shoed.errors import TransportLost

USB_PACKET = 64
USB_INTERFACE = 0
USB_EP_OUT = 0x01
USB_EP_IN = 0x81


class UsbTransport(_ThreadedTransport):
    """pyusb: the shoe's vendor interface, bulk OUT 0x01 / bulk IN 0x81, 64-byte packets."""

    def __init__(self, vid: int, pid: int, backend: Any = None) -> None:
        super().__init__()
        self.vid, self.pid = vid, pid
        self.backend = backend
        self.description = f"usb {vid:04x}:{pid:04x}"
        self._device: Any = None
        self._write_lock = threading.Lock()
        #: (bus, address) of devices whose HELLO named another shoe than device.serial_no,
        #: shared by the session's transports: while one stays plugged, another device
        #: with the same VID/PID is opened first (decisions.md 225).
        self.refused: set[tuple[int, int]] = set()
        self._plugged: list[tuple[int, int]] = []

    def _open_blocking(self) -> None:
        import usb.core
        import usb.util

        found = list(usb.core.find(find_all=True, idVendor=self.vid, idProduct=self.pid,
                                   backend=self.backend))
        if not found:
            raise TransportLost(f"{self.description}: no such device")
        self._plugged = [_usb_place(each) for each in found]
        self.refused &= set(self._plugged)  # one unplugged is forgotten
        device = min(found, key=lambda each: _usb_place(each) in self.refused)
        bus, address = _usb_place(device)
        self.description = f"usb {self.vid:04x}:{self.pid:04x} bus {bus} address {address}"
        with contextlib.suppress(usb.core.USBError):  # already configured: use it as it is
            device.set_configuration()
        usb.util.claim_interface(device, USB_INTERFACE)
        self._device = device

    def refuse_device(self) -> bool:
        """The open device's HELLO named another shoe: remember it, and say whether
        another device of the VID/PID was plugged that was not refused (then the caller
        drops this line and the next open tries that one)."""
        if self._device is None:
            return False
        self.refused.add(_usb_place(self._device))
        return any(place not in self.refused for place in self._plugged)

    def _read_blocking(self) -> bytes:
        import usb.core

        try:
            data = self._device.read(USB_EP_IN, USB_PACKET, timeout=int(READ_TIMEOUT_S * 1000))
        except usb.core.USBTimeoutError:
            return b""
        return bytes(data)

    def _write_blocking(self, data: bytes) -> None:
        with self._write_lock:
            for start in range(0, len(data), USB_PACKET):
                self._device.write(USB_EP_OUT, data[start:start + USB_PACKET], timeout=1000)

    def _close_blocking(self) -> None:
        import usb.util

        if self._device is not None:
            with contextlib.suppress(Exception):
                usb.util.release_interface(self._device, USB_INTERFACE)
            usb.util.dispose_resources(self._device)


def _usb_place(device: Any) -> tuple[int, int]:
    return (int(device.bus or 0), int(device.address or 0))

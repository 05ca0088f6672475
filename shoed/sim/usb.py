"""A simulated pyusb backend (`usb.backend.IBackend`) presenting the shoe on USB.

It shows one device with the spec's VID/PID, interface 0, bulk OUT 0x01 and bulk IN
0x81 (64-byte packets), and behind those endpoints runs a :class:`SimulatedShoe` in a
thread. `unplug()` makes the device vanish (enumeration empty, I/O fails with ENODEV);
`replug()` brings it back. The daemon's UsbTransport uses it exactly as a real backend.
"""

from __future__ import annotations

import errno
import threading
import time
from types import SimpleNamespace
from typing import Any

import usb.backend
import usb.core

from .shoe import SimulatedShoe

VID, PID = 0x1209, 0xBAC0
EP_OUT, EP_IN = 0x01, 0x81


def _endpoint(address: int) -> SimpleNamespace:
    return SimpleNamespace(bLength=7, bDescriptorType=5, bEndpointAddress=address,
                           bmAttributes=0x02, wMaxPacketSize=64, bInterval=0, bRefresh=0,
                           bSynchAddress=0, extra_descriptors=[])


class SimulatedUsbBackend(usb.backend.IBackend):  # type: ignore[misc]
    def __init__(self, shoe: SimulatedShoe, vid: int = VID, pid: int = PID) -> None:
        super().__init__()
        self.shoe = shoe
        self.vid, self.pid = vid, pid
        self.present = True
        self.generation = 0  # a replug is a new device
        self._lock = threading.Lock()
        self._out = bytearray()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.t0 = time.monotonic()

    # -- the shoe behind the endpoints -------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="usb-shoe", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                now = time.monotonic()
                self.shoe.poll(now)
                if self.present:
                    self._out += self.shoe.data_to_send()
                else:
                    self.shoe.data_to_send()  # nobody listens: the link retransmits later
            time.sleep(0.002)

    def unplug(self) -> None:
        with self._lock:
            self.present = False
            self._out.clear()

    def replug(self) -> None:
        with self._lock:
            self.present = True
            self.generation += 1

    # -- IBackend ---------------------------------------------------------------------

    def enumerate_devices(self) -> Any:
        if self.present:
            yield ("sim-shoe", self.generation)

    def get_device_descriptor(self, dev: Any) -> SimpleNamespace:
        return SimpleNamespace(
            bLength=18, bDescriptorType=1, bcdUSB=0x0200, bDeviceClass=0xFF,
            bDeviceSubClass=0, bDeviceProtocol=0, bMaxPacketSize0=64, idVendor=self.vid,
            idProduct=self.pid, bcdDevice=0x0100, iManufacturer=0, iProduct=0,
            iSerialNumber=0, bNumConfigurations=1, address=5 + dev[1], bus=1,
            port_number=1, port_numbers=(1,), speed=2)

    def get_configuration_descriptor(self, dev: Any, config: int) -> SimpleNamespace:
        return SimpleNamespace(bLength=9, bDescriptorType=2, wTotalLength=32, bNumInterfaces=1,
                               bConfigurationValue=1, iConfiguration=0, bmAttributes=0x80,
                               bMaxPower=50, extra_descriptors=[])

    def get_interface_descriptor(self, dev: Any, intf: int, alt: int, config: int
                                 ) -> SimpleNamespace:
        if intf != 0 or alt != 0:
            raise IndexError("no such interface")
        return SimpleNamespace(bLength=9, bDescriptorType=4, bInterfaceNumber=0,
                               bAlternateSetting=0, bNumEndpoints=2, bInterfaceClass=0xFF,
                               bInterfaceSubClass=0, bInterfaceProtocol=0, iInterface=0,
                               extra_descriptors=[])

    def get_endpoint_descriptor(self, dev: Any, ep: int, intf: int, alt: int, config: int
                                ) -> SimpleNamespace:
        return _endpoint([EP_OUT, EP_IN][ep])

    def open_device(self, dev: Any) -> Any:
        self._check(dev)
        return dev

    def close_device(self, dev_handle: Any) -> None:
        pass

    def set_configuration(self, dev_handle: Any, config_value: int) -> None:
        self._check(dev_handle)

    def get_configuration(self, dev_handle: Any) -> int:
        return 1

    def set_interface_altsetting(self, dev_handle: Any, intf: int, altsetting: int) -> None:
        pass

    def claim_interface(self, dev_handle: Any, intf: int) -> None:
        self._check(dev_handle)

    def release_interface(self, dev_handle: Any, intf: int) -> None:
        pass

    def _check(self, dev_handle: Any) -> None:
        if not self.present or dev_handle[1] != self.generation:
            raise usb.core.USBError("No such device", errno=errno.ENODEV)

    def bulk_write(self, dev_handle: Any, ep: int, intf: int, data: Any, timeout: int) -> int:
        self._check(dev_handle)
        if ep != EP_OUT:
            raise usb.core.USBError(f"expected bulk OUT 0x01, got 0x{ep:02x}", errno=errno.EINVAL)
        with self._lock:
            self.shoe.receive_data(bytes(data), time.monotonic())
        return len(data)

    def bulk_read(self, dev_handle: Any, ep: int, intf: int, buff: Any, timeout: int) -> int:
        deadline = time.monotonic() + timeout / 1000
        while True:
            self._check(dev_handle)
            with self._lock:
                if self._out:
                    n = min(len(buff), len(self._out))
                    for i in range(n):
                        buff[i] = self._out[i]
                    del self._out[:n]
                    return n
            if time.monotonic() >= deadline:
                raise usb.core.USBTimeoutError("Operation timed out", errno=errno.ETIMEDOUT)
            time.sleep(0.002)

"""Transports to the shoe: serial (pyserial, incl. URLs such as socket://) and USB (pyusb).

Both present the same small async interface: `open()`, `read()` (a chunk of bytes),
`write(data)`, `close()`. Blocking library calls run in a worker thread with finite
timeouts so the event loop never blocks; a vanished device raises TransportLost.
A receiver set with `receive_with(callback)` gets every chunk in the loop as it arrives
(no task switch per frame); `read()` then only reports the loss of the device.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import queue
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any, Protocol

from shoed.aio import in_background_thread
from shoed.errors import TransportLost

READ_TIMEOUT_S = 0.05
READ_CHUNK = 4096  # bytes read from a tty at once


#: pyserial's URLs that need a host and a port: a shoe on TCP, or behind an RFC 2217
#: terminal server. Its other handlers (hwgrep://, spy://, alt://, cp2110://) reach a
#: real line too and are taken as they are; loop:// is a loopback, never a shoe.
SERIAL_NETWORK_SCHEMES = ("socket", "rfc2217")
#: The options pyserial's handlers of those take after `?` (any other fails its open).
SERIAL_URL_OPTIONS = {"socket": ("logging",),
                      "rfc2217": ("logging", "ign_set_control", "poll_modem", "timeout")}
SERIAL_PORT_FORMS = ("a device path (/dev/shoe, /dev/ttyUSB0, /dev/serial/by-id/...), "
                     "socket://HOST:PORT, rfc2217://HOST:PORT or another of pyserial's "
                     "URLs for a real line (hwgrep://, spy://, alt://, cp2110://)")


def _pyserial_knows(scheme: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(f"serial.urlhandler.protocol_{scheme}") is not None
    except (ImportError, ValueError):
        return False


def serial_port_problem(port: str) -> str | None:
    """Why the serial transport could never open `port` ("is empty", ...), or None;
    nothing is opened.

    Checked by `check-config` and `shoed run` (config.check_device_port), not when a
    transport is made: a port that cannot be opened otherwise shows only as a `device_open_failed`
    warning every few seconds once the daemon runs."""
    if not port.strip():
        return "is empty"
    scheme, sep, _rest = port.partition("://")
    if not sep:
        return None  # a device path: whether it is there is the run's business (a replug)
    scheme = scheme.lower()  # pyserial reads it in any case
    if scheme == "loop":
        return "is pyserial's loopback, not a line to a shoe"
    if not scheme.isidentifier() or not _pyserial_knows(scheme):
        return f"has an unknown scheme {scheme + '://'!r}"
    if scheme not in SERIAL_NETWORK_SCHEMES:
        return None
    form = f"{scheme}://HOST:PORT"
    try:
        parts = urllib.parse.urlsplit(port)
        number = parts.port
    except ValueError as error:  # a port that is not a number, or past 65535
        return f"is not {form} ({error})"
    if not parts.hostname or number is None or number == 0:
        return f"is not {form}"
    taken = SERIAL_URL_OPTIONS[scheme]
    for option in urllib.parse.parse_qs(parts.query, keep_blank_values=True):
        if option not in taken:
            return f"has an option {option!r} pyserial does not take (it takes {', '.join(taken)})"
    return None


class Transport(Protocol):
    description: str

    async def open(self) -> None: ...
    async def read(self) -> bytes: ...
    def receive_with(self, receiver: Callable[[bytes], None]) -> None: ...
    def write(self, data: bytes) -> None: ...
    async def close(self) -> None: ...


class _ThreadedTransport:
    """A reader thread feeding an asyncio queue; writes go through a writer thread.

    The event loop never waits for the device: what `_write_now` cannot hand over at
    once (pyusb's bulk write always, a full tty's rest) goes to the writer thread, in
    order (field-notes: "pyusb calls block: run them in a thread with finite
    timeouts"). A failed write there is the transport's loss, reported to the loop.
    """

    description = "device"

    def __init__(self) -> None:
        self._queue: asyncio.Queue[bytes | BaseException] = asyncio.Queue()
        self._writes: queue.SimpleQueue[bytes | None] | None = None
        self._writes_pending = 0  # handed to the writer thread, not yet written
        self._writer: threading.Thread | None = None
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = []
        self._lost: BaseException | None = None
        self._receiver: Callable[[bytes], None] | None = None

    def receive_with(self, receiver: Callable[[bytes], None]) -> None:
        """Deliver incoming chunks to `receiver` (called in the event loop) instead of
        queueing them for read()."""
        self._receiver = receiver

    def _deliver(self, data: bytes) -> None:
        if self._receiver is not None:
            self._receiver(data)
        else:
            self._queue.put_nowait(data)

    # subclasses implement these three, called in worker threads
    def _open_blocking(self) -> None:
        raise NotImplementedError

    def _read_blocking(self) -> bytes:
        raise NotImplementedError

    def _write_blocking(self, data: bytes) -> None:
        raise NotImplementedError

    def _close_blocking(self) -> None:
        raise NotImplementedError

    async def open(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop.clear()
        self._lost = None
        self._queue = asyncio.Queue()
        try:
            await in_background_thread(self._open_blocking, "shoe-open", idle=False)
        except TransportLost:
            raise
        except Exception as error:
            raise TransportLost(f"{self.description}: cannot open: {error}") from error
        self._start_reading()

    def _start_reading(self) -> None:
        reader = threading.Thread(target=self._reader, name="shoe-reader", daemon=True)
        self._threads = [reader]
        reader.start()

    def _reader(self) -> None:
        assert self._loop is not None
        while not self._stop.is_set():
            try:
                data = self._read_blocking()
            except Exception as error:
                if not self._stop.is_set():
                    lost = TransportLost(f"{self.description}: {error}")
                    self._loop.call_soon_threadsafe(self._queue.put_nowait, lost)
                return
            if data:
                self._loop.call_soon_threadsafe(self._deliver, data)

    async def read(self) -> bytes:
        if self._lost is not None:
            raise TransportLost(str(self._lost))
        item = await self._queue.get()
        if isinstance(item, BaseException):
            self._lost = item
            raise item
        return item

    def _write_now(self, data: bytes) -> bytes:
        """Write what can be written without waiting (on the loop's thread); the rest.
        Nothing by default: every write goes to the writer thread."""
        return data

    def write(self, data: bytes) -> None:
        if not data or self._lost is not None:
            return
        try:
            rest = self._write_now(data) if not self._writes_pending else data
        except Exception as error:
            self._write_failed(error)
            return
        if rest:
            if self._writer is None:
                self._writes = queue.SimpleQueue()
                self._writer = threading.Thread(target=self._write_in_thread,
                                                args=(self._writes,), name="shoe-writer",
                                                daemon=True)
                self._writer.start()
            assert self._writes is not None
            self._writes_pending += 1
            self._writes.put(rest)

    def _write_in_thread(self, writes: queue.SimpleQueue[bytes | None]) -> None:
        loop = self._loop
        while (data := writes.get()) is not None:
            error: Exception | None = None
            try:
                if not self._stop.is_set():
                    self._write_blocking(data)
            except Exception as failure:
                error = failure
            if loop is None:
                continue
            with contextlib.suppress(RuntimeError):  # the loop closed
                loop.call_soon_threadsafe(self._written, error)

    def _written(self, error: Exception | None) -> None:
        self._writes_pending = max(0, self._writes_pending - 1)
        if error is not None and not self._stop.is_set():
            self._write_failed(error)

    def _write_failed(self, error: BaseException) -> None:
        self.drop(f"write failed: {error}")

    def drop(self, reason: str) -> None:
        """End the line from the loop's side (a failed write, a refused USB device):
        serve() sees it lost."""
        if self._lost is None:
            self._lost = TransportLost(f"{self.description}: {reason}")
            self._queue.put_nowait(self._lost)

    async def close(self) -> None:
        """Stop the threads, then close the device: the reader returns within
        READ_TIMEOUT_S (a read that never does is waited for 1 s), so no bulk read is
        under way when libusb releases the interface and closes the handle. Each step in
        a daemon thread: a driver that never returns cannot keep the process from its
        exit."""
        self._stop.set()
        writer, self._writer = self._writer, None
        if writer is not None and self._writes is not None:
            self._writes.put(None)
        self._writes_pending = 0
        for thread in [*self._threads, *([writer] if writer is not None else [])]:
            await in_background_thread(functools.partial(thread.join, 1.0), "shoe-join",
                                       idle=False)
        with contextlib.suppress(Exception):
            await in_background_thread(self._close_blocking, "shoe-close", idle=False)


class SerialTransport(_ThreadedTransport):
    """pyserial: `/dev/ttyUSB0`, `/dev/serial/by-id/...`, a pty, or `socket://host:port`."""

    def __init__(self, port: str, baudrate: int = 115200) -> None:
        super().__init__()
        self.port = port
        self.baudrate = baudrate
        self.description = f"serial {port}"
        self._serial: Any = None
        self._fd: int | None = None
        self._direct = False  # read(2)/write(2) on the fd (a tty), not pyserial's loops

    def _open_blocking(self) -> None:
        import serial

        self._serial = serial.serial_for_url(
            self.port, baudrate=self.baudrate, bytesize=8, parity="N", stopbits=1,
            timeout=READ_TIMEOUT_S, write_timeout=1.0, rtscts=False, xonxoff=False,
            exclusive=True if not self.port.startswith(("socket://", "rfc2217://")) else None,
        )

    def _read_blocking(self) -> bytes:
        serial_port = self._serial
        waiting = serial_port.in_waiting
        data: bytes = serial_port.read(waiting or 1)
        return data

    def _start_reading(self) -> None:
        """A tty or socket has a file descriptor: let the event loop watch it (no thread
        hop per frame). Anything else falls back to the reader thread."""
        try:
            fd = self._serial.fileno()
        except Exception:
            fd = None
        if not isinstance(fd, int) or self._loop is None:
            self._direct = False
            super()._start_reading()
            return
        self._fd = fd
        from serial import serialposix

        # pyserial opens a tty O_NONBLOCK (its own read and write wait in select)
        self._direct = isinstance(self._serial, serialposix.Serial) and not os.get_blocking(fd)
        self._loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        """The fd is readable: what is there, in one read(2) on the fd pyserial opened
        non-blocking (its own read() adds an ioctl, a select and a Timeout object per
        chunk; docs/performance.md). Readable with nothing to read is a vanished device,
        as pyserial reports it."""
        fd = self._fd
        try:
            data = os.read(fd, READ_CHUNK) if self._direct and fd is not None else \
                self._serial.read(self._serial.in_waiting or 1)
            if not data and self._direct:
                raise OSError("device reports readiness to read but returned no data "
                              "(device disconnected?)")
        except BlockingIOError:
            return  # woken with nothing to read after all
        except Exception as error:
            self._stop_watching()
            self._queue.put_nowait(TransportLost(f"{self.description}: read failed: {error}"))
            return
        if data:
            self._deliver(data)

    def _stop_watching(self) -> None:
        if self._fd is not None and self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._fd)
        self._fd = None

    async def close(self) -> None:
        self._stop_watching()
        await super().close()

    def _write_now(self, data: bytes) -> bytes:
        """One write(2) when the tty takes it all (the common case: a frame or an ACK is
        a few bytes); the rest, if the tty is full, goes to the writer thread."""
        if self._direct and self._fd is not None:
            with contextlib.suppress(BlockingIOError):  # full: the writer thread waits
                data = data[os.write(self._fd, data):]
            return data
        return data  # not a tty (socket://, rfc2217://): pyserial's write, in the thread

    def _write_blocking(self, data: bytes) -> None:
        """pyserial's write, with its write timeout (in the writer thread)."""
        self._serial.write(data)

    def _close_blocking(self) -> None:
        if self._serial is not None:
            self._serial.close()


def _serial(device: Any) -> Transport:
    return SerialTransport(device.port, device.baudrate)


def _usb(device: Any) -> Transport:
    from shoed.device.usb import UsbTransport  # pyusb's code only for a USB shoe

    return UsbTransport(device.vid, device.pid)


# `device.transport` -> how to build it from the device section. Room for "tcp" (today
# a shoe on TCP is reached through serial's `socket://host:port` URLs).
TRANSPORTS: dict[str, Callable[[Any], Transport]] = {"serial": _serial, "usb": _usb}

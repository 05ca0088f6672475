"""The serial transport's read(2)/write(2) on a non-blocking fd (shoed/device/transports.py):
what pyserial's own loops did, kept: a device that reads as empty is lost, a write the fd
cannot take (whole or in part) goes on through pyserial's write, with its timeout, in the
writer thread (never on the loop)."""

from __future__ import annotations

import asyncio
import os

from shoed.device.transports import SerialTransport
from shoed.errors import TransportLost


class FakeSerial:
    """pyserial's side, only where the transport falls back to it."""

    def __init__(self) -> None:
        self.written = b""

    def write(self, data: bytes) -> int:
        self.written += data
        return len(data)


def direct(fd: int) -> tuple[SerialTransport, FakeSerial]:
    transport = SerialTransport("/dev/null-test")
    fake = FakeSerial()
    transport._serial, transport._fd, transport._direct = fake, fd, True
    return transport, fake


def test_a_read_of_nothing_is_a_lost_device_and_a_spurious_wakeup_is_nothing() -> None:
    async def main() -> None:
        r, w = os.pipe()
        os.set_blocking(r, False)
        transport, _ = direct(r)
        transport._loop = asyncio.get_running_loop()
        got: list[bytes] = []
        transport.receive_with(got.append)
        transport._readable()  # nothing there yet: EAGAIN, nothing delivered, not lost
        assert got == [] and transport._queue.empty()
        os.write(w, b"\x05abc\x00")
        transport._readable()
        assert got == [b"\x05abc\x00"]
        os.close(w)  # the other end gone: readable, and read(2) returns b""
        transport._readable()
        lost = transport._queue.get_nowait()
        assert isinstance(lost, TransportLost) and "returned no data" in str(lost)
        assert transport._fd is None  # no longer watched
        os.close(r)

    asyncio.run(main())


def test_a_write_the_fd_cannot_take_goes_on_through_pyserial_in_the_writer_thread() -> None:
    """What the fd takes is written at once, on the loop; the rest goes to pyserial's
    write (it waits, with its timeout) in the writer thread, never on the loop, in
    order: a later write waits behind it (decisions.md 171)."""
    async def main() -> None:
        r, w = os.pipe()
        os.set_blocking(w, False)
        transport, fake = direct(w)
        transport._loop = asyncio.get_running_loop()
        transport.write(b"frame")
        assert os.read(r, 100) == b"frame" and fake.written == b""  # the common case
        assert transport._writer is None  # no thread for it
        while True:  # fill the pipe
            try:
                os.write(w, b"x" * 4096)
            except BlockingIOError:
                break
        transport.write(b"ACK!")  # EAGAIN: all of it through pyserial's write
        assert fake.written == b""  # not on the loop's thread: nothing yet
        transport.write(b"next")  # behind it, not past it on the fd
        for _ in range(200):
            await asyncio.sleep(0.005)
            if fake.written == b"ACK!next" and not transport._writes_pending:
                break
        assert fake.written == b"ACK!next" and transport._writes_pending == 0
        os.read(r, 8192)  # room for some: a partial write, the rest through pyserial
        payload = b"y" * 16384
        fake.written = b""
        transport.write(payload)
        for _ in range(200):
            await asyncio.sleep(0.005)
            if fake.written and not transport._writes_pending:
                break
        room = len(payload) - len(fake.written)
        assert 0 < room < len(payload) and fake.written == payload[room:]
        await transport.close()
        os.close(r)
        os.close(w)

    asyncio.run(main())

"""An in-process transport: the daemon's side of a line whose other end is plain calls.

For tests and benches: the other end (a simulated shoe, a test) calls :meth:`feed` with
what the shoe sends and reads :meth:`take` (or gets `on_write`) for what the host wrote;
:meth:`lose` is the cable pulled. It has the same interface as the serial and USB
transports, so the device session cannot tell it from them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from shoed.errors import TransportLost


class LoopbackTransport:
    description = "loopback"

    def __init__(self, on_write: Callable[[bytes], None] | None = None) -> None:
        self.on_write = on_write
        self.written = bytearray()
        self.is_open = False
        self.opens = 0
        self.refuse_open: str | None = None  # set: open() fails with this message
        self._receiver: Callable[[bytes], None] | None = None
        self._lost: asyncio.Future[None] | None = None

    # -- the daemon's side (the Transport interface) ---------------------------------

    async def open(self) -> None:
        if self.refuse_open is not None:
            raise TransportLost(f"{self.description}: cannot open: {self.refuse_open}")
        self._lost = asyncio.get_running_loop().create_future()
        self.is_open = True
        self.opens += 1

    async def read(self) -> bytes:
        """Chunks go to the receiver; this only waits for the loss of the line."""
        if self._lost is None:
            raise TransportLost(f"{self.description}: not open")
        await self._lost
        raise TransportLost(f"{self.description}: line lost")

    def receive_with(self, receiver: Callable[[bytes], None]) -> None:
        self._receiver = receiver

    def write(self, data: bytes) -> None:
        if not self.is_open or not data:
            return
        if self.on_write is not None:
            self.on_write(data)
        else:
            self.written += data

    async def close(self) -> None:
        self.is_open = False

    # -- the other end -----------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Bytes from the shoe, delivered now (as the serial reader does in the loop)."""
        if self.is_open and data and self._receiver is not None:
            self._receiver(data)

    def take(self) -> bytes:
        """What the host wrote since the last take (when no `on_write` is set)."""
        data, self.written = bytes(self.written), bytearray()
        return data

    def lose(self) -> None:
        """The cable pulled: read() raises TransportLost, writes go nowhere."""
        self.is_open = False
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)

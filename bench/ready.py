"""A daemon's start as the benches see it: a shoe that only sends heartbeats, on a pty,
and the NOTIFY_SOCKET its READY=1 arrives on (bench/latency.py, bench/start_cost.py)."""

from __future__ import annotations

import asyncio
import pathlib
import socket
import subprocess
import time

from shoed.sim.shoe import PtyShoe, Script, SimulatedShoe


def idle_shoe(tmp: pathlib.Path) -> tuple[PtyShoe, asyncio.Task[None]]:
    """An 8-deck shoe that deals nothing (heartbeats only), served on `tmp/shoe`; unplug
    the pty and cancel the task when done."""
    loop = asyncio.get_running_loop()
    shoe = SimulatedShoe(decks=8, seed=1, now=loop.time(), script=Script(pace_s=0, shoes=0))
    shoe.finished = True  # heartbeats only
    pty = PtyShoe(shoe, link_path=tmp / "shoe")
    pty.plug()
    return pty, asyncio.create_task(pty.run())


def notify_socket(path: pathlib.Path) -> socket.socket:
    """A non-blocking datagram socket bound at `path`, for the daemon's NOTIFY_SOCKET."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.setblocking(False)
    return sock


async def wait_ready(sock: socket.socket, proc: subprocess.Popen[bytes], start: float,
                     timeout: float, poll: float) -> float | None:
    """Seconds from `start` (time.perf_counter) to the READY=1 on `sock`, looking every
    `poll` seconds; None if none came within `timeout` or the process ended first."""
    while True:
        try:
            if b"READY=1" in sock.recv(4096):
                return time.perf_counter() - start
        except BlockingIOError:
            if time.perf_counter() - start >= timeout or proc.poll() is not None:
                return None
            await asyncio.sleep(poll)

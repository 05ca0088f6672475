"""asyncio helpers shared by the daemon and the simulator."""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for `event` at most `timeout` seconds; True if it was set.

    Not ``asyncio.wait_for(event.wait(), ...)``: on Python 3.11 that swallows a
    cancellation arriving as the event fires, and a loop waiting on a busy event then
    cannot be stopped. ``asyncio.timeout`` counts cancellations and does not.
    """
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(max(timeout, 0.0)):
            await event.wait()
    except TimeoutError:
        return False
    return True

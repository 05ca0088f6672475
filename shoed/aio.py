"""asyncio helpers shared by the daemon and the simulator.

None of them relies on ``asyncio.timeout``, ``asyncio.wait_for`` or a TaskGroup's
cancellation of its parent: their cancellation semantics differ between 3.11 patch
releases. On Debian 12's 3.11.2 a task whose cancel count was left above zero (by a
TaskGroup whose child failed) sees every later ``asyncio.timeout`` that expires raise
CancelledError instead of TimeoutError (fixed in 3.11.3), and a long-lived loop ended
*cancelled* although nobody had asked it to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine
from typing import Any


class Wakeup:
    """A flag a coroutine can wait on with a timeout: a future and a call_later, no
    cancel counting. One waiter at a time."""

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._set = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    async def wait(self, timeout: float) -> bool:
        """Wait until set, at most `timeout` seconds; True if it was set."""
        if self._set:
            return True
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiter = waiter
        handle = loop.call_later(max(timeout, 0.0), _resolve, waiter)
        try:
            await waiter
        finally:
            handle.cancel()
            self._waiter = None
        return self._set


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait for `event` at most `timeout` seconds; True if it was set (the simulator's
    helper; the daemon uses :class:`Wakeup`).

    Not ``asyncio.wait_for(event.wait(), ...)``: on Python 3.11 that swallows a
    cancellation arriving as the event fires. ``asyncio.timeout`` is safe here only
    because nothing leaves this task's cancel count above zero (see above).
    """
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(max(timeout, 0.0)):
            await event.wait()
    except TimeoutError:
        return False
    return True


def clear_stray_cancel() -> int:
    """Reset the current task's cancel count left by a cancellation that was handled
    (so later timeouts behave); returns how many there were."""
    task = asyncio.current_task()
    count = 0
    while task is not None and task.cancelling():
        task.uncancel()
        count += 1
    return count


def run_until_signalled(main: Coroutine[Any, Any, int]) -> int:
    """Run `main` on a new loop until it returns; SIGTERM or SIGINT cancels it (exit 0).
    Other exceptions propagate to the caller, after the loop is closed."""
    loop = asyncio.new_event_loop()
    task = loop.create_task(main)
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, task.cancel)
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        return 0
    finally:
        loop.close()

"""One exception the benches' own MQTT subscriber leaves behind, silenced by name.

When a bench cancels its aiomqtt subscriber, paho may just have asked for a writer (a
PUBACK to send) and aiomqtt scheduled ``loop.add_writer`` with
``call_soon_threadsafe``; the socket is closed before that callback runs, and asyncio
prints "Exception in callback ... Bad file descriptor". It is harmless and says nothing
about shoed; everything else still goes to the default handler.
"""

from __future__ import annotations

import asyncio
from typing import Any


def ignore_closed_subscriber_writer(loop: asyncio.AbstractEventLoop) -> None:
    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        if isinstance(error, OSError) and "add_writer" in repr(context.get("handle")):
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)

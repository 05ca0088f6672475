"""The latency bench's subscriber in a process of its own (bench/latency.py --subscriber
process): the casino's system that takes the events, apart from the simulated shoe.

    python bench/subscriber.py MQTT_PORT TOPIC {shoed,floor}

Prints ``ready`` once subscribed (QoS 1, as bench/latency.py's own subscriber), then
notes the arrival time (``time.perf_counter()``: CLOCK_MONOTONIC, the same clock in
every process of the machine) of each first card event (shoed: a `card` event with a
`card_index`, the first of each (shoe_id, card_index); the floor: every message). On
SIGTERM it prints the times as one JSON list, in arrival order, and exits.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import Callable

import aiomqtt


async def take_events(port: int, topic: str, kind: str, received: list[float],
                      subscribed: Callable[[], None]) -> None:
    """Subscribe, call `subscribed`, then append each first card event's arrival time to
    `received` until cancelled (bench/latency.py runs this in its own loop by default)."""
    async with aiomqtt.Client("127.0.0.1", port) as client:
        await client.subscribe(topic, qos=1)
        subscribed()
        first_seen: set[tuple[str, int]] = set()
        async for message in client.messages:
            now = time.perf_counter()
            event = json.loads(message.payload)  # type: ignore[arg-type]
            if kind == "shoed":
                if event["type"] != "card" or event["card_index"] is None:
                    continue
                key = (event["shoe_id"], event["card_index"])
                if key in first_seen:
                    continue
                first_seen.add(key)
            received.append(now)


async def main(port: int, topic: str, kind: str) -> None:
    received: list[float] = []
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    task = asyncio.create_task(take_events(port, topic, kind, received,
                                           lambda: print("ready", flush=True)))
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # it ends only by an error (the broker's connection): raise it
    task.cancel()
    print(json.dumps(received), flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[3] not in ("shoed", "floor"):
        sys.exit("usage: subscriber.py MQTT_PORT TOPIC {shoed,floor}")
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3]))

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

import aiomqtt


async def main(port: int, topic: str, kind: str) -> None:
    received: list[float] = []
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    async def subscribe() -> None:
        async with aiomqtt.Client("127.0.0.1", port) as client:
            await client.subscribe(topic, qos=1)
            print("ready", flush=True)
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

    task = asyncio.create_task(subscribe())
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    task.cancel()
    if task.done() and not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]
    print(json.dumps(received), flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[3] not in ("shoed", "floor"):
        sys.exit("usage: subscriber.py MQTT_PORT TOPIC {shoed,floor}")
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3]))

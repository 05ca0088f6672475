"""The daemon's cost of reading one PUBACK of the live publisher (docs/performance.md).

    .venv/bin/python bench/puback_read.py [--pubacks 20000] [--repeat 5]

A real paho client (paho's reads, its packet handling) on one end of a socket pair,
with the daemon's buffered read and a publish lane awaiting every packet id, as on the
daemon's connection; the other end sends plain PUBACKs (MQTT 5, success) one at a time,
each read by one `loop_read` as the event loop would call it when the socket is
readable (a card's event and snapshot PUBACKs arrive apart). Two ways, in one process:
`taken`, the lane's PUBACKs taken straight from the buffer (shoed.mqtt.reads), and
`paho`, read by paho and handed to the lane by paho's PUBACK handler (the tree before).
Prints the best and median microseconds per PUBACK of each. Absolute figures depend on
the machine; compare the two.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import socket
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

import paho.mqtt.client as mqtt

from shoed.mqtt.reads import read_buffered
from shoed.mqtt.window import DirectLane


class Window:
    """What the lane tells of each PUBACK (a PublishWindow's part of it)."""

    def __init__(self) -> None:
        self.acked = 0

    def _acked(self, mid: int) -> None:
        self.acked += 1


def run(pubacks: int, taken: bool) -> float:
    """Seconds for `pubacks` PUBACKs, each sent alone and read by one loop_read."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    paho = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    paho._sock = ours  # type: ignore[assignment]
    window = Window()
    lane = DirectLane.install(paho, {window})  # type: ignore[arg-type]
    assert lane is not None
    if taken:
        paho._shoed_lane = lane  # type: ignore[attr-defined]  # as _windows_of sets it
    client: Any = type("C", (), {"_client": paho})()
    assert read_buffered(client)
    packets = [bytes((0x40, 2, mid >> 8, mid & 0xFF)) for mid in range(1, pubacks + 1)]
    elapsed = 0.0
    for mid, packet in enumerate(packets, start=1):
        lane.mids.add(mid)
        theirs.send(packet)
        start = time.perf_counter()
        paho.loop_read()
        elapsed += time.perf_counter() - start
    assert window.acked == pubacks and not lane.mids
    ours.close()
    theirs.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pubacks", type=int, default=20_000, choices=range(1, 65_536),
                        metavar="1..65535")
    parser.add_argument("--repeat", type=int, default=5, choices=range(1, 101),
                        metavar="1..100")
    args = parser.parse_args()
    out: dict[str, Any] = {"pubacks": args.pubacks, "repeat": args.repeat}
    times: dict[str, list[float]] = {"taken": [], "paho": []}
    for _ in range(args.repeat):  # alternating, so that both see the same machine
        for way in times:
            times[way].append(run(args.pubacks, way == "taken") / args.pubacks * 1e6)
    for way, us in times.items():
        out[f"{way}_best_us"] = round(min(us), 2)
        out[f"{way}_median_us"] = round(statistics.median(us), 2)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

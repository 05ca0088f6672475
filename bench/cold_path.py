"""A card's first steps in the daemon, back to back and after a pause (docs/performance.md).

    .venv/bin/python bench/cold_path.py [--cards 400] [--pauses 0,1,5,20] [--spin]

The steps of a plain card's frame outside the engine: the host link decoding the CARD
frame (`Link.receive_data` and `next_event`), then the daemon's way for a plain card:
the record's JSON written without a model (`card_record`, before the ACK) and the input's
model built from that JSON (`card_input`, after it); and beside them the usual way of any
other frame: the engine inputs built from the message (`stamp` and `message_to_inputs`,
a pydantic model) and their JSON (`model_dump_json`). Each is timed per card, with
`--pauses` milliseconds between cards (0: back to back; the latency bench deals a card
every 20 ms). The pause is a sleep, or with `--spin` a busy loop that touches nothing
else, so that the figures tell a CPU woken from idle apart from caches that went cold
while other code ran.
Medians in microseconds. The same code runs each time: any difference between the
pauses is the machine (its caches, its predictors), not the code.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from firmware_protocol import (
    Card,
    Link,
    MessageReceived,
    Role,
    build_frame,
    encode_payload,
    optical_code,
)
from shoed.core.cards import ALL_CARDS
from shoed.core.engine import build_models
from shoed.device.inputs import card_input, card_record, message_to_inputs, stamp


def card_frames(n: int) -> list[bytes]:
    """`n` CARD frames (optical, read) with seqs 0, 1, ... (mod 65536) as a shoe sends them."""
    return [build_frame(Card.TYPE, i % 65536, encode_payload(Card(
        uptime_ms=i, card_index=i, pull_id=i, pull_pos=1, pull_size=1, code_kind=1,
        code=optical_code(ALL_CARDS[i % len(ALL_CARDS)]), quality=90))) for i in range(n)]


def pause(seconds: float, spin: bool) -> None:
    if seconds <= 0:
        return
    if not spin:
        time.sleep(seconds)
        return
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def run(frames: list[bytes], pause_s: float, spin: bool) -> dict[str, float]:
    host = Link(Role.HOST, 0.0)
    steps: dict[str, list[float]] = {"decode": [], "record": [], "model": [], "inputs": [],
                                     "json": []}
    for frame in frames:
        pause(pause_s, spin)
        a = time.perf_counter()
        host.receive_data(frame, 1.0)
        event = host.next_event()
        b = time.perf_counter()
        assert isinstance(event, MessageReceived), event
        stamped = stamp(None)
        body = card_record(event.message, stamped, 50)
        b1 = time.perf_counter()
        model = card_input(body) if body is not None else None
        b2 = time.perf_counter()
        assert model is not None, event.message  # a plain card: read, its pull whole
        inputs = message_to_inputs(event.message, stamped, None, 50)
        c = time.perf_counter()
        bodies = [inp.model_dump_json() for inp in inputs]
        d = time.perf_counter()
        assert bodies == [body] and inputs == [model], (bodies, body)  # the same input
        host.ack(event.seq)
        host.data_to_send()
        while host.next_event() is not None:
            pass
        steps["decode"].append(b - a)
        steps["record"].append(b1 - b)
        steps["model"].append(b2 - b1)
        steps["inputs"].append(c - b2)
        steps["json"].append(d - c)
    return {name: round(statistics.median(v) * 1e6, 1) for name, v in steps.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cards", type=int, default=400)
    parser.add_argument("--pauses", default="0,1,5,20", help="milliseconds between cards")
    parser.add_argument("--spin", action="store_true", help="busy-wait instead of sleeping")
    args = parser.parse_args()
    if args.cards < 1:
        parser.error(f"--cards must be at least 1, got {args.cards}")
    try:
        pauses = [float(p) for p in args.pauses.split(",")]
    except ValueError:
        parser.error(f"--pauses must be numbers of milliseconds, comma-separated: "
                     f"{args.pauses!r}")
    if any(p < 0 for p in pauses):
        parser.error(f"--pauses must not be negative: {args.pauses!r}")
    build_models()
    frames = card_frames(args.cards)
    run(frames[: min(50, len(frames))], 0.0, False)  # warm up: imports, first calls
    results = [{"pause_ms": p, "spin": args.spin, "median_us": run(frames, p / 1000, args.spin)}
               for p in pauses]
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

"""firmware_protocol encode/decode throughput, against what 115200 baud can carry.

    .venv/bin/python bench/codec.py

115200 baud at 8N1 is 11 520 bytes/s. A CARD frame (optical) is 26 bytes on the wire
with its delimiter, its ACK 10: stop-and-wait carries at most ~320 cards/s.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from firmware_protocol import (
    Card,
    Link,
    MessageReceived,
    Role,
    StreamDecoder,
    build_frame,
    decode_message,
    encode_payload,
)

WIRE_BYTES_PER_S = 115200 / 10


def best_of(fn, repeat: int = 5) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    n = 50_000
    cards = [Card(1000 + i, i % 65536, i % 65536, 1, 1, 1, bytes([1 + i % 13, 1 + i % 4]), 95)
             for i in range(n)]
    frames = [build_frame(Card.TYPE, i % 65536, encode_payload(c)) for i, c in enumerate(cards)]
    stream = b"".join(frames)
    frame_len = len(frames[0])

    def encode() -> None:
        for i, c in enumerate(cards):
            build_frame(Card.TYPE, i % 65536, encode_payload(c))

    def decode() -> None:
        decoder = StreamDecoder()
        for r in decoder.feed(stream):
            decode_message(r.type_code, r.payload)  # type: ignore[union-attr]

    def host_link() -> None:
        host = Link(Role.HOST, 0.0)
        for i in range(0, len(stream), 4096):
            host.receive_data(stream[i:i + 4096], 0.0)
            while (e := host.next_event()) is not None:
                if isinstance(e, MessageReceived):
                    host.ack(e.seq)
            host.data_to_send()

    t_enc, t_dec, t_link = best_of(encode), best_of(decode), best_of(host_link)
    wire_frames = WIRE_BYTES_PER_S / frame_len
    print(json.dumps({
        "frames": n, "card_frame_bytes_on_wire": frame_len,
        "encode_frames_per_s": round(n / t_enc),
        "encode_MB_per_s": round(len(stream) / t_enc / 1e6, 2),
        "decode_frames_per_s": round(n / t_dec),
        "decode_MB_per_s": round(len(stream) / t_dec / 1e6, 2),
        "host_link_frames_per_s": round(n / t_link),
        "wire_115200_frames_per_s": round(wire_frames),
        "decode_headroom_over_wire": round(n / t_dec / wire_frames, 1),
    }, indent=1))


if __name__ == "__main__":
    main()

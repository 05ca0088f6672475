"""Where one card's time goes inside the daemon: decode -> engine -> journal commit.

    .venv/bin/python bench/commit_profile.py [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pathlib
import pstats
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from rig import make_settings  # noqa: E402

from shoed.daemon import Daemon  # noqa: E402
from shoed.sim.shoe import Script, SimulatedShoe  # noqa: E402


async def main(args: argparse.Namespace) -> None:
    """Inside an event loop, as in the daemon (the effect write is scheduled on it)."""
    tmp = pathlib.Path(tempfile.mkdtemp())
    settings = make_settings(tmp / "state", "mqtt://127.0.0.1:1", "unused",
                             rules={"decks": 12})
    daemon = Daemon(settings)
    daemon.build()
    shoes = args.cards // (12 * 52 - 60) + 1  # enough shoes for the cards asked for
    shoe = SimulatedShoe(decks=12, seed=1, script=Script(pace_s=0.0, shoes=shoes), now=0.0)
    now = 0.0
    wire: list[bytes] = []
    while shoe.cards_dealt < args.cards:  # record what the shoe would send, ACKing it
        now += 0.01
        shoe.poll(now)
        data = shoe.data_to_send()
        if data:
            wire.append(data)
            link = daemon.session.link
            link.receive_data(data, now)
            while (event := link.next_event()) is not None:
                if hasattr(event, "seq") and hasattr(event, "dedup_after"):
                    link.ack(event.seq)
            shoe.receive_data(link.data_to_send(), now)
    # Replay the same bytes into a fresh daemon, timed.
    tmp2 = pathlib.Path(tempfile.mkdtemp())
    daemon = Daemon(make_settings(tmp2 / "state", "mqtt://127.0.0.1:1", "unused",
                                  rules={"decks": 12}))
    daemon.build()
    profiler = cProfile.Profile() if args.profile else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    for data in wire:
        daemon.session.on_bytes(data)
    if profiler:
        profiler.disable()
    elapsed = time.perf_counter() - start
    print(f"{len(wire)} writes, {shoe.cards_dealt} cards: {elapsed * 1000 / len(wire):.3f} ms "
          f"per frame on average (decode + engine + journal commit with fsync + ACK)")
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--cards", type=int, default=800)
    asyncio.run(main(parser.parse_args()))

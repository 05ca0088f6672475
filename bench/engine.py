"""The dealing engine's time per input, as the daemon drives it.

    .venv/bin/python bench/engine.py [--shoes 6] [--repeat 5]

Deals whole 8-deck shoes in `commands` mode (close_betting, then the hand's cards; one
pull in four a two-card pull, half of those arriving lower card first), records the
inputs once, then replays them into a fresh engine `--repeat` times, with the
daemon's `prepare_checkpoint()` after each card. Prints the best and median time per
input and per card. Run it before and after a change to the core, in one session, on
a quiet machine: the absolute figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from shoed.core import commands as cmd
from shoed.core.cards import ALL_CARDS, commencement_count
from shoed.core.config import EngineConfig
from shoed.core.engine import Engine
from shoed.core.game import next_needed
from shoed.core.inputs import CommandInput, DeviceHello, DeviceItem, DeviceShoeLoaded, Input

CONFIG = EngineConfig(table_id="B1", betting_control="commands")


def deal(shoes: int, seed: int = 7) -> list[Input]:
    """The inputs of `shoes` shoes of 60 hands each."""
    rng = random.Random(seed)
    inputs: list[Input] = []
    t = 1_800_000_000.0
    pull_id = request = 0

    def at() -> dict[str, float]:
        nonlocal t
        t += 0.4
        return {"at": t, "mono": t - 1_799_990_000.0}

    def pull(*cards: str) -> None:
        nonlocal pull_id
        pull_id += 1
        items = [DeviceItem(**at(), item="card", pull_id=pull_id, pull_pos=pos,
                            pull_size=len(cards), card=card)
                 for pos, card in enumerate(cards, start=1)]
        if len(items) > 1 and rng.random() < 0.5:
            items.reverse()  # the lower card first
        inputs.extend(items)

    def command(name: str) -> None:
        nonlocal request
        request += 1
        inputs.append(CommandInput(**at(), command=cmd.COMMAND_ADAPTER.validate_python(
            {"command": name, "request_id": f"r{request}", "operator": "bench"})))

    inputs.append(DeviceHello(**at(), boot_id=1, capabilities=0b11111, fw_version="1",
                              serial_no="B"))
    for _ in range(shoes):
        deck = [card for card in ALL_CARDS for _ in range(CONFIG.decks)]
        rng.shuffle(deck)
        inputs.append(DeviceShoeLoaded(**at()))
        first = deck.pop()
        pull(first)
        for _ in range(commencement_count(first)):
            pull(deck.pop())
        for _ in range(60):
            command("close_betting")
            pull(deck.pop())  # the burn
            dealt: list[str] = []
            while next_needed(dealt) is not None:
                if len(dealt) in (0, 2) and rng.random() < 0.25:
                    pair = [deck.pop(), deck.pop()]
                    pull(*pair)
                    dealt += pair
                else:
                    dealt.append(deck.pop())
                    pull(dealt[-1])
        command("end_shoe")
    return inputs


def replay(inputs: list[Input]) -> float:
    engine = Engine(CONFIG, instance_id="bench")
    start = time.perf_counter()
    for inp in inputs:
        engine.handle(inp)
        if inp.kind == "item":
            engine.prepare_checkpoint()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shoes", type=int, default=6, choices=range(1, 101),
                        metavar="1..100")
    parser.add_argument("--repeat", type=int, default=5, choices=range(1, 101),
                        metavar="1..100")
    args = parser.parse_args()
    inputs = deal(args.shoes)
    cards = sum(1 for inp in inputs if inp.kind == "item")
    times = [replay(inputs) for _ in range(args.repeat)]
    print(json.dumps({
        "inputs": len(inputs), "cards": cards, "repeat": args.repeat,
        "best_us_per_input": round(min(times) / len(inputs) * 1e6, 1),
        "median_us_per_input": round(statistics.median(times) / len(inputs) * 1e6, 1),
        "best_us_per_card": round(min(times) / cards * 1e6, 1),
    }, indent=1))


if __name__ == "__main__":
    main()

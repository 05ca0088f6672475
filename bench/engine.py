"""The dealing engine's time per input, as the daemon drives it.

    .venv/bin/python bench/engine.py [--shoes 6] [--repeat 5]
    .venv/bin/python bench/engine.py --betting none --pause 20  # each card alone, cold

Deals whole 8-deck shoes in `commands` mode (close_betting, then the hand's cards; one
pull in four a two-card pull, half of those arriving lower card first), records the
inputs once, then replays them into a fresh engine `--repeat` times, with the
daemon's `prepare_checkpoint()` after each card. Prints the best and median time per
input and per card. Run it before and after a change to the core, in one session, on
a quiet machine: the absolute figures depend on the machine.

`--betting none` deals as the latency bench's table does (no commands: each shoe in a
fresh engine, as a shoe ends only by a command there). `--pause MS` times each card
input alone, MS milliseconds after the one before (a sleep between), as the daemon
meets it (bench/latency.py deals a card every 20 ms): the code's caches are cold then,
and the figure is several times the back-to-back one (docs/performance.md, "Eighth
pass"). It reports the median and 90th percentile per card input.
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


def deal(shoes: int, seed: int = 7, commands: bool = True) -> list[Input]:
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
        if not commands:
            return
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


def replay(inputs: list[Input], config: EngineConfig = CONFIG) -> float:
    engine = Engine(config, instance_id="bench")
    start = time.perf_counter()
    for inp in inputs:
        engine.handle(inp)
        if inp.kind == "item":
            engine.prepare_checkpoint()
    return time.perf_counter() - start


def cold(inputs: list[Input], config: EngineConfig, pause_s: float) -> list[float]:
    """Each card input's own time (handle, then prepare_checkpoint), after a pause."""
    engine = Engine(config, instance_id="bench")
    times: list[float] = []
    for inp in inputs:
        time.sleep(pause_s)
        start = time.perf_counter()
        engine.handle(inp)
        if inp.kind == "item":
            engine.prepare_checkpoint()
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shoes", type=int, default=6, choices=range(1, 101),
                        metavar="1..100")
    parser.add_argument("--repeat", type=int, default=5, choices=range(1, 101),
                        metavar="1..100")
    parser.add_argument("--betting", choices=("commands", "none"), default="commands")
    parser.add_argument("--pause", type=float, default=0.0, metavar="MS",
                        help="time each card input alone, MS milliseconds after the last")
    args = parser.parse_args()
    if args.pause < 0:
        parser.error(f"--pause must be 0 or more milliseconds, got {args.pause}")
    if args.betting == "none":
        config = EngineConfig(table_id="B1", betting_control="none")
        shoes = [deal(1, seed=7 + i, commands=False) for i in range(args.shoes)]
    else:
        config, shoes = CONFIG, [deal(args.shoes)]
    if args.pause:
        times = [t for _ in range(args.repeat) for one in shoes
                 for t in cold(one, config, args.pause / 1000)]
        ordered = sorted(times)
        print(json.dumps({
            "cards": len(times), "pause_ms": args.pause, "betting": args.betting,
            "median_us_per_card": round(statistics.median(times) * 1e6, 1),
            "p90_us_per_card": round(ordered[int(0.9 * len(ordered))] * 1e6, 1),
        }, indent=1))
        return
    inputs = [inp for one in shoes for inp in one]
    cards = sum(1 for inp in inputs if inp.kind == "item")
    times = [sum(replay(one, config) for one in shoes) for _ in range(args.repeat)]
    print(json.dumps({
        "inputs": len(inputs), "cards": cards, "repeat": args.repeat,
        "best_us_per_input": round(min(times) / len(inputs) * 1e6, 1),
        "median_us_per_input": round(statistics.median(times) / len(inputs) * 1e6, 1),
        "best_us_per_card": round(min(times) / cards * 1e6, 1),
    }, indent=1))


if __name__ == "__main__":
    main()

"""The scoreboard's cost per result over a long shoe (125 hands, a long 12-deck shoe).

    .venv/bin/python bench/roads.py [--shoes 40] [--hands 125] [--json]

After each result of each shoe it times, per result:
- incremental: `Scoreboard.append` then `Scoreboard.message` (what the daemon does);
- incremental + JSON: the same and `json.dumps` of the message (what goes on the wire);
- from scratch: `roads_message` over every standing result so far (what a void costs).
Outcomes are drawn with the 8-deck probabilities (banker 45.86 %, player 44.62 %,
tie 9.52 %; each pair 7.47 %; a natural on either side 34.2 %), seeded; `--streaky`
deals long streaks instead (dragon tails in every road). Prints p50 and p99 in µs.
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

from shoed.core.roads import HandOutcome, Scoreboard, roads_message


def shoe(rnd: random.Random, hands: int, streaky: bool) -> list[HandOutcome]:
    results = []
    side = "banker"
    for hand_no in range(1, hands + 1):
        if streaky:
            if rnd.random() < 0.12:
                side = "player" if side == "banker" else "banker"
            winner = "tie" if rnd.random() < 0.05 else side
        else:
            draw = rnd.random()
            winner = "banker" if draw < 0.4586 else ("player" if draw < 0.9048 else "tie")
        results.append(HandOutcome(hand_no, winner,  # type: ignore[arg-type]
                                   player_pair=rnd.random() < 0.0747,
                                   banker_pair=rnd.random() < 0.0747,
                                   natural=rnd.random() < 0.342))
    return results


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(
        values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shoes", type=int, default=40)
    parser.add_argument("--hands", type=int, default=125)
    parser.add_argument("--rows", type=int, default=6)
    parser.add_argument("--tail-mode", choices=["stay", "drop"], default="stay")
    parser.add_argument("--streaky", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rnd = random.Random(args.seed)
    timings: dict[str, list[float]] = {"incremental": [], "incremental_json": [],
                                       "from_scratch": []}
    clock = time.perf_counter_ns
    for _ in range(args.shoes):
        results = shoe(rnd, args.hands, args.streaky)
        board = Scoreboard("bench", rows=args.rows, tail_mode=args.tail_mode)
        for i, result in enumerate(results):
            start = clock()
            board.append(result)
            message = board.message(i)
            middle = clock()
            json.dumps(message, separators=(",", ":"))
            end = clock()
            scratch = roads_message(results[:i + 1], seq=i, shoe_id="bench", rows=args.rows,
                                    tail_mode=args.tail_mode)
            done = clock()
            assert scratch == message, f"incremental != from scratch after result {i + 1}"
            timings["incremental"].append((middle - start) / 1000)
            timings["incremental_json"].append((end - start) / 1000)
            timings["from_scratch"].append((done - end) / 1000)
    figures = {name: {"p50_us": round(percentile(values, 50), 1),
                      "p99_us": round(percentile(values, 99), 1),
                      "max_us": round(max(values), 1)} for name, values in timings.items()}
    summary = {"shoes": args.shoes, "hands": args.hands, "rows": args.rows,
               "tail_mode": args.tail_mode, "streaky": args.streaky, "per_result": figures}
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"{args.shoes} shoes x {args.hands} hands, rows {args.rows}, tails {args.tail_mode}"
          f"{', streaky' if args.streaky else ''}: per result")
    for name, figure in figures.items():
        print(f"  {name:<18} p50 {figure['p50_us']:>8.1f} us   p99 {figure['p99_us']:>8.1f} us"
              f"   max {figure['max_us']:>8.1f} us")


if __name__ == "__main__":
    main()

"""The shoe-order watch on simulated shoes: false alarms and detection delay.

    .venv/bin/python bench/integrity.py --shoes 100000 --trials 2000 --workers 2

False alarms: properly shuffled shoes (8 decks, 402 cards drawn, the cut card 14 cards
from the end), each watched with the previous simulated shoe as its previous shoe, every
card fed in order to the same :class:`IntegrityWatch` the engine uses. A shoe counts as a
false alarm when any detector raises ``shoe_unshuffled``; preliminary notices
(``shoe_order_suspect``) are counted apart.

Detection delay, in cards drawn until the first ``shoe_unshuffled``, for packs that were
not shuffled: new-deck order, the same cut once, stripped once (packets of 5-20), one
52-card order repeated in every deck (the Golden Nugget pattern), and the previous shoe
reloaded (in order, reversed, cut). Every figure depends only on the seeds, never on the
machine: only the run time does.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import pathlib
import random
import statistics
import sys
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shoed.core.cards import ALL_CARDS, RANKS  # noqa: E402
from shoed.core.integrity import DETECTORS, IntegrityWatch  # noqa: E402

DECKS = 8
DRAWN = 52 * DECKS - 14  # the cut card 14 cards from the end: 402 cards
#: a new deck as it comes out of the box: A-K spades, A-K diamonds, K-A clubs, K-A hearts
NEW_DECK = ([r + "S" for r in RANKS] + [r + "D" for r in RANKS]
            + [r + "C" for r in reversed(RANKS)] + [r + "H" for r in reversed(RANKS)])


def watch_shoe(order: list[str | None], previous: list[str | None]
               ) -> tuple[int | None, str | None, list[str], list[str], IntegrityWatch]:
    """Feed a shoe: (first final card_index, its detector, finals, notices, the watch)."""
    watch = IntegrityWatch(decks=DECKS, previous_shoe_order=previous)
    first: int | None = None
    detector: str | None = None
    finals: list[str] = []
    notices: list[str] = []
    for index, card in enumerate(order[:DRAWN], 1):
        for alarm in watch.feed(card, index):
            if alarm.kind == "shoe_unshuffled":
                finals.append(alarm.detector)
                if first is None:
                    first, detector = index, alarm.detector
            else:
                notices.append(alarm.detector)
    return first, detector, finals, notices, watch


def fair_chunk(seed: int, shoes: int) -> dict[str, Any]:
    """`shoes` shuffled shoes in a row (each the next one's previous shoe)."""
    rng = random.Random(seed)
    pack = list(ALL_CARDS) * DECKS
    previous: list[str | None] = []
    rng.shuffle(pack)
    previous = list(pack[:DRAWN])
    alarmed = noticed = 0
    by_detector: collections.Counter[str] = collections.Counter()
    notices_by: collections.Counter[str] = collections.Counter()
    for _ in range(shoes):
        rng.shuffle(pack)
        first, _d, finals, notices, watch = watch_shoe(list(pack), previous)
        previous = watch.dealt_order()
        alarmed += first is not None
        noticed += bool(notices)
        by_detector.update(set(finals))
        notices_by.update(set(notices))
    return {"shoes": shoes, "alarmed": alarmed, "noticed": noticed,
            "by_detector": dict(by_detector), "notices_by": dict(notices_by)}


def strip(order: list[str], rng: random.Random) -> list[str]:
    """A strip shuffle: packets of 5-20 cards off the top, each dropped on the new pile."""
    out: list[str] = []
    i = 0
    while i < len(order):
        size = rng.randint(5, 20)
        out = order[i:i + size] + out
        i += size
    return out


def unshuffled(kind: str, rng: random.Random) -> tuple[list[str | None], list[str | None]]:
    """(the shoe's order, the previous shoe's dealt order) for one trial of `kind`."""
    pack = list(ALL_CARDS) * DECKS
    rng.shuffle(pack)
    fair_previous: list[str | None] = list(pack[:DRAWN])
    new = NEW_DECK * DECKS
    if kind == "new_deck_order":
        return list(new), fair_previous
    if kind == "cut_once":
        cut = rng.randrange(1, len(new))
        return list(new[cut:] + new[:cut]), fair_previous
    if kind == "stripped_once":
        return list(strip(new, rng)), fair_previous
    if kind == "one_order_every_deck":
        deck = list(ALL_CARDS)
        rng.shuffle(deck)
        return list(deck * DECKS), fair_previous
    # the previous shoe reloaded: its dealt cards (the stub of 14 behind them)
    previous_pack = list(ALL_CARDS) * DECKS
    rng.shuffle(previous_pack)
    dealt, stub = previous_pack[:DRAWN], previous_pack[DRAWN:]
    previous: list[str | None] = list(dealt)
    if kind == "previous_forward":
        return list(dealt + stub), previous
    if kind == "previous_reversed":
        return list(dealt[::-1] + stub), previous
    if kind == "previous_cut":
        cut = rng.randrange(1, len(dealt))
        return list(dealt[cut:] + dealt[:cut] + stub), previous
    raise ValueError(f"unknown kind {kind!r}")


KINDS = ("new_deck_order", "cut_once", "stripped_once", "one_order_every_deck",
         "previous_forward", "previous_reversed", "previous_cut")


def delay_chunk(kind: str, seed: int, trials: int) -> dict[str, Any]:
    rng = random.Random(seed)
    delays: list[int] = []
    missed = 0
    first_by: collections.Counter[str] = collections.Counter()
    for _ in range(trials):
        order, previous = unshuffled(kind, rng)
        first, detector, _f, _n, _w = watch_shoe(order, previous)
        if first is None or detector is None:
            missed += 1
        else:
            delays.append(first)
            first_by[detector] += 1
    return {"kind": kind, "delays": delays, "missed": missed, "first_by": dict(first_by)}


def _run(job: tuple[str, tuple[Any, ...]]) -> dict[str, Any]:
    name, args = job
    return fair_chunk(*args) if name == "fair" else delay_chunk(*args)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shoes", type=int, default=100_000, help="fair shoes (false alarms)")
    parser.add_argument("--trials", type=int, default=2000, help="trials per unshuffled kind")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=2000, help="fair shoes per job")
    parser.add_argument("--json", type=pathlib.Path, help="also write the figures here")
    args = parser.parse_args()
    started = time.perf_counter()
    jobs: list[tuple[str, tuple[Any, ...]]] = []
    for k, kind in enumerate(KINDS):
        trials = 1 if kind == "new_deck_order" else args.trials
        jobs.append(("delay", (kind, args.seed * 1000 + k, trials)))
    done, n = 0, 0
    while done < args.shoes:
        size = min(args.chunk, args.shoes - done)
        jobs.append(("fair", (args.seed * 1_000_003 + n, size)))
        done += size
        n += 1
    with multiprocessing.Pool(args.workers) as pool:
        results = pool.map(_run, jobs, chunksize=1)
    fair = [r for r in results if "shoes" in r]
    shoes = sum(r["shoes"] for r in fair)
    alarmed = sum(r["alarmed"] for r in fair)
    noticed = sum(r["noticed"] for r in fair)
    by: collections.Counter[str] = collections.Counter()
    notices_by: collections.Counter[str] = collections.Counter()
    for r in fair:
        by.update(r["by_detector"])
        notices_by.update(r["notices_by"])
    report: dict[str, Any] = {
        "shoes": shoes, "cards_per_shoe": DRAWN, "decks": DECKS,
        "false_alarm_shoes": alarmed,
        "false_alarms_per_10000": 10_000 * alarmed / shoes if shoes else None,
        "false_alarms_by_detector": {d: by.get(d, 0) for d in DETECTORS},
        "notice_shoes": noticed,
        "notices_per_10000": 10_000 * noticed / shoes if shoes else None,
        "notices_by_detector": {d: notices_by.get(d, 0) for d in DETECTORS},
        "delays": {},
    }
    for r in results:
        if "kind" not in r:
            continue
        d = r["delays"]
        report["delays"][r["kind"]] = {
            "trials": len(d) + r["missed"], "missed": r["missed"],
            "median": statistics.median(d) if d else None, "max": max(d) if d else None,
            "min": min(d) if d else None, "first_detector": r["first_by"],
        }
    report["run_time_s"] = round(time.perf_counter() - started, 1)
    print(f"false alarms: {alarmed} of {shoes} shoes "
          f"({report['false_alarms_per_10000']:.2f} per 10,000); by detector "
          f"{ {k: v for k, v in report['false_alarms_by_detector'].items() if v} }")
    print(f"preliminary notices: {noticed} shoes ({report['notices_per_10000']:.2f} per 10,000)"
          f"; by detector { {k: v for k, v in report['notices_by_detector'].items() if v} }")
    print("\n| pack | trials | missed | delay median | delay max | first detector |")
    print("|---|---|---|---|---|---|")
    for kind, row in report["delays"].items():
        firsts = ", ".join(f"{k} {v}" for k, v in sorted(row["first_detector"].items(),
                                                           key=lambda kv: -kv[1]))
        print(f"| {kind} | {row['trials']} | {row['missed']} | {row['median']} | "
              f"{row['max']} | {firsts} |")
    print(f"\nrun time {report['run_time_s']} s on {args.workers} worker(s)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Cards dealt while the daemon prunes a day's backlog: their card-to-ACK (docs/performance.md).

    .venv/bin/python bench/grow_journal.py --events 300000 --days 31 --state /tmp/old
    .venv/bin/python bench/prune_cards.py --journal /tmp/old --cards 1500 [--rounds 2]

shoed starts on a copy of a journal whose events span the last 31 days by both clocks
(grow_journal.py --days), so its first housekeeping tick, 10 s after the start, prunes
the oldest day (~10 000 events, in batches) while cards are dealt every 20 ms (as
bench/latency.py deals them). The daemon's `journal_pruned` log line says when the prune
ran and how long it took; the cards sent in that window are compared with the others.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import pathlib
import sys
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import latency


def stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {"n": len(ordered), "p50": round(ordered[len(ordered) // 2], 3),
            "p99": round(ordered[int(0.99 * len(ordered))], 3), "max": round(ordered[-1], 3)}


async def one_round(cards: int) -> dict[str, Any]:
    broker = latency.PrivateMosquitto()
    broker.start()
    try:
        run = await latency.run_target("shoed", cards, 0.02, broker, warm=False)
    finally:
        broker.stop()
    prunes = []
    for line in pathlib.Path(run["log"]).read_text().splitlines():
        if '"journal_pruned"' in line:
            entry = json.loads(line)
            end = dt.datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00"))
            prunes.append((end.timestamp() - entry["seconds"], end.timestamp(), entry))
    during: list[float] = []
    other: list[float] = []
    for sent, to_ack in run["sent_to_ack"]:
        in_prune = any(start <= sent <= end for start, end, _ in prunes)
        (during if in_prune else other).append(to_ack * 1000)
    return {"prunes": [{k: e[k] for k in ("events", "seconds", "longest_batch_s")}
                       for _, _, e in prunes],
            "card_to_ack_ms_during_prune": stats(during),
            "card_to_ack_ms_otherwise": stats(other)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--journal", type=pathlib.Path, required=True,
                        help="a state directory grown by grow_journal.py --days 31")
    parser.add_argument("--cards", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    latency.JOURNAL, latency.TABLE = args.journal.resolve(), "BENCH"
    results = [await one_round(args.cards) for _ in range(args.rounds)]
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    asyncio.run(main())

"""Grow a journal of N events written by shoed's own code, and time its checks.

    .venv/bin/python bench/grow_journal.py --events 300000 --state /tmp/big [--measure]
    .venv/bin/python bench/grow_journal.py --events 300000 --days 31 --state /tmp/old

Shoes of 8 decks are dealt through the engine (hello, shoe loaded, one card per pull, the
cut card near the end, a new shoe after each end); every input and every event goes into
the journal through `Journal` (add_input, add_event, save_snapshot every 64 inputs, as the
daemon does), 500 inputs per transaction and, unless --sync, with synchronous=OFF while it
grows (the file is the same; only building it is faster). The events are marked published,
as after a day's dealing. Reusable by the performance work: a big journal to start from.

--measure then times what a start does with it (docs/reliability.md): opening it after a
clean stop, after a kill -9 (SQLite's quick_check), the full integrity_check, and
`shoed check-journal`. On a state directory that already holds a journal, --measure
only times it.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shoed.core.engine import Engine, EngineConfig  # noqa: E402
from shoed.core.inputs import DeviceHello, DeviceItem, DeviceShoeLoaded, Input  # noqa: E402
from shoed.store.journal import Journal  # noqa: E402

RANKS = "A23456789TJQK"
SUITS = "SHDC"
SNAPSHOT_EVERY = 64
BATCH = 500


def inputs(seed: int, decks: int = 8) -> object:
    """An endless stream of engine inputs: shoe after shoe of single-card pulls."""
    rng = random.Random(seed)
    at = 1_800_000_000.0
    pull = 0
    index = 0
    yield DeviceHello(at=at, boot_id=1, capabilities=0b11111, fw_version="1.0",
                      serial_no="BENCH")
    while True:
        yield DeviceShoeLoaded(at=at)
        cards = [r + s for r in RANKS for s in SUITS] * decks
        rng.shuffle(cards)
        cut = len(cards) - rng.randint(14, 20)
        for n, card in enumerate(cards[:cut + 8]):
            at += 1.5
            pull += 1
            index += 1
            if n == cut:
                yield DeviceItem(at=at, item="cut", pull_id=pull, pull_pos=1, pull_size=1)
                pull += 1
            yield DeviceItem(at=at, item="card", card=card, pull_id=pull, pull_pos=1,
                             pull_size=1, device_card_index=index)


def grow(state: pathlib.Path, events: int, sync: bool, seed: int, days: float = 0.0) -> Journal:
    # --days: the journal's two clocks (wall, and the monotonic one its uptime runs on) are
    # moved on as it grows, so that its events span the last `days` by both: a daemon
    # started on it finds the oldest past retention (30 days) and prunes them.
    elapsed = [0.0]
    wall_now, mono_now = time.time() - days * 86400.0, time.monotonic()
    journal = Journal(state, wall=lambda: wall_now + elapsed[0],
                      monotonic=lambda: mono_now + elapsed[0]) if days else Journal(state)
    if not sync:
        journal._conn().execute("PRAGMA synchronous=OFF")
    # betting_control "none": hands are dealt as the shoe gives cards (as the bench and the
    # demo deal); under "commands" every card without a close_betting is unnecessary.
    engine = Engine(EngineConfig(table_id="BENCH", decks=8, betting_control="none"),
                    instance_id=journal.instance_id)
    stream = iter(inputs(seed))  # type: ignore[call-overload]
    shoe_over = False
    since_snapshot = 0
    start = time.perf_counter()
    # Until `events`, then on to the end of that shoe: a daemon started on the journal
    # (bench/latency.py --journal) finds no shoe in play, and the shoe's next load is a
    # new shoe, not one loaded in play (a hold).
    while not (engine.seq >= events and shoe_over):
        elapsed[0] = days * 86400.0 * min(1.0, engine.seq / events)
        with journal.transaction():
            for _ in range(BATCH):
                inp: Input = next(stream)
                if shoe_over and isinstance(inp, DeviceItem):
                    continue  # the shoe ended: deal on into the next one
                shoe_over = False
                input_id = journal.add_input(inp.at, inp.model_dump_json())
                for event in engine.handle(inp).events:
                    journal.add_event(event.seq, event.event_id, event.type,
                                      event.model_dump_json(), published=True)
                    shoe_over = shoe_over or event.type == "shoe_ended"
                since_snapshot += 1
                if since_snapshot >= SNAPSHOT_EVERY:
                    journal.save_snapshot(input_id, engine.snapshot())
                    since_snapshot = 0
                if engine.seq >= events and shoe_over:
                    break
            journal.checkpoint_if_due(every=1)
    print(f"grew {engine.seq} events in {time.perf_counter() - start:.1f} s")
    return journal


def timed(what: str, fn: object) -> object:
    start = time.perf_counter()
    result = fn()  # type: ignore[operator]
    print(f"{what}: {time.perf_counter() - start:.2f} s")
    return result


def measure(state: pathlib.Path) -> None:
    journal = timed("open after a clean stop", lambda: Journal(state))
    assert isinstance(journal, Journal) and not journal.quick_checked
    found = timed("integrity_check (full, own connection)", journal.integrity_check)
    assert found == [], found
    journal.close()
    # A kill -9: a child opens the journal, writes, and dies without closing it.
    code = ("import os, pathlib, sys; from shoed.store.journal import Journal; "
            "j = Journal(pathlib.Path(sys.argv[1]));\n"
            "with j.transaction(): j.set_meta('bench', 'x')\n"
            "os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(state)], check=True, cwd=ROOT)
    journal = timed("open after a kill -9 (quick_check)", lambda: Journal(state))
    assert isinstance(journal, Journal) and journal.quick_checked
    journal.close()
    timed("shoed check-journal (full integrity_check)", lambda: subprocess.run(
        [sys.executable, "-m", "shoed.cli", "check-journal", str(state)], check=True,
        cwd=ROOT, stdout=subprocess.DEVNULL))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--state", type=pathlib.Path, required=True,
                        help="the state directory to create (must not hold a journal)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sync", action="store_true", help="fsync every transaction")
    parser.add_argument("--measure", action="store_true")
    parser.add_argument("--days", type=float, default=0.0,
                        help="the events span this many days back from now, by the wall "
                             "clock and by the uptime (31: the oldest day is past the "
                             "default retention)")
    args = parser.parse_args()
    if args.events < 1:
        parser.error("--events must be at least 1")
    path = args.state / "journal.sqlite3"
    if path.exists() and not args.measure:
        parser.error(f"{args.state} already holds a journal (--measure alone times it)")
    if not path.exists():
        grow(args.state, args.events, args.sync, args.seed, args.days).close()
        os.sync()
    print(f"{path}: {path.stat().st_size / 1e6:.1f} MB")
    if args.measure:
        measure(args.state)


if __name__ == "__main__":
    main()

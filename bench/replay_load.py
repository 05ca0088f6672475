"""Card-to-event latency while a big `replay` runs, against the same without it.

    .venv/bin/python bench/replay_load.py --events 100000 --cards 400
    .venv/bin/python bench/replay_load.py --events 100000 --cards 400 --rounds 3
    .venv/bin/python bench/replay_load.py --events 5000 --cards 100   # a quick look

A journal of `--events` events is grown once with shoed's own code (bench/grow_journal.py);
each round starts the daemon (a subprocess, `replay.max_events` = `--events`) on a copy of
it with the simulated shoe on a pty, waits for cards to flow, then measures card-to-event
(a CARD frame written -> its `card` event received from a local Mosquitto) for `--cards`
cards, one every `--pace` s. In the `replay` round, a `replay` of the whole journal is
sent on `{root}/cmd` as the measured cards start, and the cards are measured until its
answer arrives (after its last event); the replayed events go out on the replay's own
connection, giving way to the live ones (docs/decisions.md item 125), to a
`mosquitto_sub` consumer. The output says how many were replayed and how long the replay took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import aiomqtt

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from grow_journal import grow  # noqa: E402
from latency import TimedShoe, pct, summary  # noqa: E402
from procfs import stop  # noqa: E402
from quiet import ignore_closed_subscriber_writer  # noqa: E402

from shoed.config import write_config  # noqa: E402
from shoed.sim.broker import PrivateMosquitto  # noqa: E402
from shoed.sim.shoe import PtyShoe, Script  # noqa: E402

TABLE = "BENCH"


def daemon_config(tmp: pathlib.Path, port: int, client_id: str,
                  events: int) -> pathlib.Path:
    """The bench daemon's config: its state and shoe in `tmp`, a replay of `events` at
    once."""
    return write_config(tmp / "shoed.toml", {
        "table": {"id": TABLE, "betting_control": "none"},
        "device": {"port": str(tmp / "shoe")},
        "mqtt": {"url": f"mqtt://127.0.0.1:{port}", "client_id": client_id},
        "rules": {"decks": 8},
        "state": {"dir": str(tmp / "state")},
        "replay": {"max_events": events},
        "log": {"format": "json"},
    })


async def round_(mode: str, journal_dir: pathlib.Path, events: int, cards: int, pace: float,
                 broker: PrivateMosquitto) -> dict[str, Any]:
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"bench-replay-{mode}-"))
    shutil.copytree(journal_dir, tmp / "state")
    # On disk before the start, as a table's journal is (as bench/latency.py --journal):
    # left dirty in the page cache, the daemon's first checkpoint fsyncs the whole copy
    # (~70 MB) and holds the loop 20-40 ms, a card of every round, replay or not.
    os.sync()
    loop = asyncio.get_running_loop()
    shoe = TimedShoe(decks=8, seed=3, now=loop.time(),
                     script=Script(pace_s=pace, shoes=4, cut_card_from_end=20))
    pty = PtyShoe(shoe, link_path=tmp / "shoe")
    pty.plug()
    root = f"shoed/{TABLE}"
    received: dict[int, float] = {}
    answer: dict[str, Any] = {}
    answered_at: list[float] = []
    ready = asyncio.Event()
    # The replay's consumer is another process (as it would be): the bench's own loop,
    # which also plays the shoe, must not be the one that reads 100 000 messages.
    replay_out = tmp / "replayed.txt"
    consumer = subprocess.Popen(["mosquitto_sub", "-p", str(broker.port), "-q", "1",
                                 "-t", f"{root}/replay"], stdout=open(replay_out, "wb"))  # noqa: SIM115

    clients: list[aiomqtt.Client] = []

    async def subscribe() -> None:
        async with aiomqtt.Client("127.0.0.1", broker.port) as client:
            clients.append(client)
            for leaf in ("events", "cmd/response"):
                await client.subscribe(f"{root}/{leaf}", qos=1)
            ready.set()
            seen: set[tuple[str, int]] = set()
            async for message in client.messages:
                now = time.perf_counter()
                topic = str(message.topic)
                body = json.loads(message.payload)  # type: ignore[arg-type]
                if topic.endswith("/cmd/response"):
                    answer.update(body)
                    answered_at.append(now)
                    continue
                if body["type"] != "card" or body["card_index"] is None:
                    continue
                key = (body["shoe_id"], body["card_index"])
                if key not in seen:
                    seen.add(key)
                    received[len(seen) - 1] = now

    sub = asyncio.create_task(subscribe())
    await ready.wait()
    runner = asyncio.create_task(pty.run())
    # A client id of the round's own: with a shared one, the broker kept the session of
    # the last `none` round, queued the `replay` round's command for it, and the next
    # `none` round's daemon replayed the journal too.
    config = daemon_config(tmp, broker.port, f"bench-{mode}-{time.time_ns()}", events)
    proc = subprocess.Popen([sys.executable, "-m", "shoed.cli", "run", "--config", str(config)],
                            stdout=open(tmp / "shoed.log", "wb"),  # noqa: SIM115
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.perf_counter() + 60
        while len(received) < 20 and time.perf_counter() < deadline:
            await asyncio.sleep(0.05)
        first = len(shoe.card_seqs)
        started = time.perf_counter()
        if mode == "replay":
            # On the connection made before the cards were measured: connecting here
            # (a thread, the CONNACK, the disconnect) delayed the bench's own loop, which
            # plays the shoe, and showed up as one card of ~20 ms right after it.
            await clients[0].publish(f"{root}/cmd", json.dumps({
                "request_id": f"bench-{time.time_ns()}", "command": "replay",
                "operator": "bench", "from_seq": 1, "to_seq": events}), qos=1)
        # `replay`: until its answer (sent after its last event), at least `cards` cards;
        # `none`: `cards` cards.
        deadline = time.perf_counter() + cards * pace * 4 + (events / 50 if mode == "replay"
                                                             else 60)
        while (len(shoe.card_seqs) < first + cards or (mode == "replay" and not answered_at)) \
                and time.perf_counter() < deadline:
            await asyncio.sleep(0.05)
        measured_s = time.perf_counter() - started
        await asyncio.sleep(1.0)
    finally:
        stop(proc)
        runner.cancel()
        sub.cancel()
        pty.unplug()
        consumer.terminate()
        consumer.wait()
    end = answered_at[0] if answered_at else float("inf")  # the replay's last event sent
    # Each measured card: its card-to-event time, and when it was dealt (seconds from the
    # start of the measurement, the replay's command sent then).
    timed = [(received[i] - shoe.sent[seq], shoe.sent[seq] - started)
             for i, seq in enumerate(shoe.card_seqs)
             if i >= first and seq in shoe.sent and i in received
             and (mode == "none" or received[i] <= end)]
    to_event = [t for t, _ in timed]
    replayed = replay_out.read_bytes().count(b"\n")
    return {"mode": mode, "cards": len(to_event), "measured_s": round(measured_s, 1),
            "replay_s": round(end - started, 2) if answered_at else None,
            "replayed": replayed,
            "replay_answer": answer.get("result") or answer.get("error"),
            "card_to_event_ms": summary(to_event) if to_event else None,
            "slowest": [{"ms": round(t * 1000, 2), "dealt_at_s": round(at, 2)}
                        for t, at in sorted(timed, reverse=True)[:3]],  # the slowest
            "_samples": to_event}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--cards", type=int, default=400)
    parser.add_argument("--pace", type=float, default=0.02)
    parser.add_argument("--journal", type=pathlib.Path, default=None,
                        help="a state directory grown before (reused)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternate the two modes this many times")
    parser.add_argument("--broker-nodelay", action="store_true",
                        help="the broker sets TCP_NODELAY (Mosquitto's set_tcp_nodelay)")
    args = parser.parse_args()
    ignore_closed_subscriber_writer(asyncio.get_running_loop())
    journal_dir = args.journal or pathlib.Path(tempfile.mkdtemp(prefix="bench-replay-j-"))
    if not (journal_dir / "journal.sqlite3").exists():  # grown before: reused as it is
        grow(journal_dir, args.events, sync=False, seed=1).close()
    broker = PrivateMosquitto(extra_config="max_queued_messages 1000000\n" + (
        "set_tcp_nodelay true\n" if args.broker_nodelay else ""))
    broker.start()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        results = [await round_(mode, journal_dir, args.events, args.cards, args.pace, broker)
                   for _ in range(args.rounds) for mode in ("none", "replay")]
    finally:
        broker.stop()
    summed = pooled(results) if args.rounds > 1 else None
    for result in results:
        del result["_samples"]
    print(json.dumps(results, indent=2))
    if summed is not None:
        print(json.dumps(summed, indent=2))


def pooled(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's range over the rounds, and the replay's p50/p99 over the no-replay's,
    round by round (they alternate, so drift hits both alike)."""
    none = [r for r in results if r["mode"] == "none"]
    replay = [r for r in results if r["mode"] == "replay"]

    def span(rows: list[dict[str, Any]], key: str) -> list[float]:
        values = [r["card_to_event_ms"][key] for r in rows if r["card_to_event_ms"]]
        return [min(values), max(values)] if values else []

    return {"rounds": len(none),
            "none_p50_ms": span(none, "p50"), "none_p99_ms": span(none, "p99"),
            "replay_p50_ms": span(replay, "p50"), "replay_p99_ms": span(replay, "p99"),
            "p99_ratio": [round(b["card_to_event_ms"]["p99"] / a["card_to_event_ms"]["p99"], 2)
                          for a, b in zip(none, replay, strict=True)],
            "p50_ratio": [round(b["card_to_event_ms"]["p50"] / a["card_to_event_ms"]["p50"], 2)
                          for a, b in zip(none, replay, strict=True)],
            # every round's cards together, per mode: a p99 of ~1 600 cards rather than
            # of ~320 (one slow card moves a round's p99; the pooled one hardly)
            "pooled_p99_ratio": _pooled_ratio(none, replay, 0.99),
            "pooled_p50_ratio": _pooled_ratio(none, replay, 0.50),
            "events_per_s": [round(r["replayed"] / r["replay_s"]) for r in replay
                             if r["replay_s"]]}


def _pooled_ratio(none: list[dict[str, Any]], replay: list[dict[str, Any]],
                  q: float) -> float | None:
    """The q-quantile of every replay round's cards over that of every no-replay round's."""
    without = [t for r in none for t in r["_samples"]]
    during = [t for r in replay for t in r["_samples"]]
    if not without or not during:
        return None
    return round(pct(during, q) / pct(without, q), 2)


if __name__ == "__main__":
    asyncio.run(main())

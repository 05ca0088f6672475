"""Scale: N tables (a simulated shoe and a shoed each) against one Mosquitto.

    .venv/bin/python bench/scale.py --tables 50 --pace 0.15 --seconds 60

Each shoe deals at `pace` seconds between pulls (a dealer draws about one card every
1.5 s: 0.15 is 10x human pace). A subscriber on `shoed/+/events` receives every card
event; card-to-event is measured from the moment the simulated shoe queued the card
(its --record file, CLOCK_MONOTONIC, shared by all processes) to its receipt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import aiomqtt

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shoed.broker import PrivateMosquitto  # noqa: E402
from shoed.config import write_config  # noqa: E402


def config(tmp: pathlib.Path, table: str, port: int) -> pathlib.Path:
    return write_config(tmp / "shoed.toml", {
        "table": {"id": table, "betting_control": "none"},
        "device": {"port": str(tmp / "shoe")},
        "mqtt": {"url": f"mqtt://127.0.0.1:{port}"},
        "state": {"dir": str(tmp / "state")},
        "log": {"format": "json", "level": "warning"},
    })


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=50)
    parser.add_argument("--pace", type=float, default=0.15)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    broker = PrivateMosquitto(extra_config="max_connections -1\n")
    broker.start()
    base = pathlib.Path(tempfile.mkdtemp(prefix="bench-scale-"))
    procs: list[subprocess.Popen[bytes]] = []
    received: dict[str, list[tuple[int, float]]] = {}
    seen: set[tuple[str, int]] = set()

    async def subscribe(ready: asyncio.Event) -> None:
        async with aiomqtt.Client("127.0.0.1", broker.port, max_queued_incoming_messages=0
                                  ) as client:
            await client.subscribe("shoed/+/events", qos=1)
            ready.set()
            async for message in client.messages:
                now = time.monotonic()
                event = json.loads(message.payload)  # type: ignore[arg-type]
                if event["type"] != "card" or event["card_index"] is None:
                    continue
                key = (event["shoe_id"], event["card_index"])
                if key in seen:
                    continue
                seen.add(key)
                received.setdefault(event["table_id"], []).append((event["card_index"], now))

    ready = asyncio.Event()
    sub = asyncio.create_task(subscribe(ready))
    await ready.wait()
    try:
        for i in range(args.tables):
            table = f"S{i:02d}"
            tmp = base / table
            tmp.mkdir()
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "shoed.cli", "simulate", "--link", str(tmp / "shoe"),
                 "--decks", "8", "--seed", str(i), "--pace", str(args.pace), "--shoes", "1",
                 "--record", str(tmp / "dealt.txt")], stdout=subprocess.DEVNULL))
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "shoed.cli", "run", "--config",
                 str(config(tmp, table, broker.port))], stdout=subprocess.DEVNULL))
            await asyncio.sleep(0.3)  # stagger the starts: 2 cores
        start_count = len(seen)
        started = time.monotonic()
        await asyncio.sleep(args.seconds)
        elapsed = time.monotonic() - started
        events = len(seen) - start_count
        rss = []
        for proc in procs[1::2]:
            status = pathlib.Path(f"/proc/{proc.pid}/status")
            if status.exists():
                rss += [int(x.split()[1]) for x in status.read_text().splitlines()
                        if x.startswith("VmRSS:")]
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        sub.cancel()
        broker.stop()
    latencies = []
    for table, got in received.items():
        lines = (base / table / "dealt.txt").read_text().splitlines()
        sent = [float(line.split("\t")[1]) for line in lines if "\t" in line]
        by_index: dict[int, float] = {}
        for index, at in got:  # card_index counts the shoe's cards in procedure order
            by_index.setdefault(index, at)
        # Only cards dealt inside the measured window (not while tables were starting).
        latencies += [by_index[k + 1] - t for k, t in enumerate(sent)
                      if k + 1 in by_index and started <= t <= started + elapsed]
    ms = sorted(x * 1000 for x in latencies)
    late = sum(1 for x in latencies if x > 1.0)
    print(json.dumps({
        "tables": args.tables, "pace_s": args.pace, "seconds": round(elapsed, 1),
        "card_events_per_s_total": round(events / elapsed, 1),
        "card_to_event_ms": {"n": len(ms), "p50": round(statistics.median(ms), 2),
                             "p99": round(ms[int(0.99 * len(ms))], 2), "max": round(ms[-1], 2)},
        "daemon_rss_kb_median": int(statistics.median(rss)) if rss else None,
        "cards_later_than_1s": late,
    }, indent=1))


if __name__ == "__main__":
    asyncio.run(main())

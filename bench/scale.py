"""Scale: N tables (a simulated shoe and a host each) against one Mosquitto.

    .venv/bin/python bench/scale.py --tables 50 --pace 0.15 --seconds 60
    .venv/bin/python bench/scale.py --tables 50 --pace 0.15 --seconds 60 --target floor

Each shoe deals at `pace` seconds between pulls (a dealer draws about one card every
1.5 s: 0.15 is 10x human pace). The host of each table is a `shoed run` process, or
with `--target floor` the floor relay of bench/latency.py (the least a correct host
does). All shoes run in one process (bench/shoes.py) and start dealing together once
every host has started; a subscriber in this process
receives every card event. Card-to-event is measured from the moment the shoe queued
the card (its dealt.txt, CLOCK_MONOTONIC, shared by all processes) to its receipt, for
cards dealt inside the measured window. CPU is read from /proc for the window.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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

from procfs import cpu_seconds, rss_kb  # noqa: E402
from quiet import ignore_closed_subscriber_writer  # noqa: E402

from shoed.config import write_config  # noqa: E402
from shoed.sim.broker import PrivateMosquitto  # noqa: E402


def config(tmp: pathlib.Path, table: str, port: int) -> pathlib.Path:
    return write_config(tmp / "shoed.toml", {
        "table": {"id": table, "betting_control": "none"},
        "device": {"port": str(tmp / "shoe")},
        "mqtt": {"url": f"mqtt://127.0.0.1:{port}"},
        "state": {"dir": str(tmp / "state")},
        "log": {"format": "json"},  # the default level (info), as deployed
    })


async def main() -> None:
    ignore_closed_subscriber_writer(asyncio.get_running_loop())
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=50)
    parser.add_argument("--pace", type=float, default=0.15)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--target", choices=("shoed", "floor"), default="shoed")
    args = parser.parse_args()
    broker = PrivateMosquitto(extra_config="max_connections -1\n")
    broker.start()
    base = pathlib.Path(tempfile.mkdtemp(prefix="bench-scale-"))
    tables = [f"S{i:02d}" for i in range(args.tables)]
    hosts: list[subprocess.Popen[bytes]] = []
    received: dict[str, dict[int, float]] = {t: {} for t in tables}

    async def subscribe(ready: asyncio.Event) -> None:
        topic = "shoed/+/events" if args.target == "shoed" else "floor/+/events"
        async with aiomqtt.Client("127.0.0.1", broker.port, max_queued_incoming_messages=0
                                  ) as client:
            await client.subscribe(topic, qos=1)
            ready.set()
            async for message in client.messages:
                now = time.monotonic()
                event = json.loads(message.payload)  # type: ignore[arg-type]
                if event.get("type", "card") != "card" or event["card_index"] is None:
                    continue
                # card_index counts the shoe's cards in dealing order (both hosts)
                received[str(message.topic).split("/")[1]].setdefault(event["card_index"], now)

    ready = asyncio.Event()
    sub = asyncio.create_task(subscribe(ready))
    await ready.wait()
    shoes = subprocess.Popen([sys.executable, str(ROOT / "bench" / "shoes.py"), str(base),
                              str(args.tables), str(args.pace)], stdout=subprocess.PIPE,
                             stdin=subprocess.PIPE)
    assert shoes.stdout is not None and shoes.stdin is not None
    await asyncio.to_thread(shoes.stdout.readline)  # "ready": every pty exists
    try:
        for table in tables:
            tmp = base / table
            if args.target == "shoed":
                command = [sys.executable, "-m", "shoed.cli", "run", "--config",
                           str(config(tmp, table, broker.port))]
            else:
                command = [sys.executable, str(ROOT / "bench" / "floor_relay.py"),
                           str(tmp / "shoe"), str(broker.port), str(tmp / "floor.log"),
                           f"floor/{table}/events"]
            hosts.append(subprocess.Popen(command, stdout=subprocess.DEVNULL))
            await asyncio.sleep(0.3)  # stagger the starts: 2 cores
        await asyncio.sleep(3)  # the last host opens its port
        shoes.stdin.write(b"go\n")  # every shoe starts dealing now
        shoes.stdin.flush()
        await asyncio.sleep(5)  # past the start: every table dealing
        pids = {"hosts": [p.pid for p in hosts], "shoes": [shoes.pid],
                "broker": [broker.proc.pid] if broker.proc else [], "bench": [os.getpid()]}
        cpu_before = {k: sum(cpu_seconds(p) for p in v) for k, v in pids.items()}
        count_before = sum(len(r) for r in received.values())
        started = time.monotonic()
        await asyncio.sleep(args.seconds)
        elapsed = time.monotonic() - started
        count = sum(len(r) for r in received.values()) - count_before
        cpu = {k: sum(cpu_seconds(p) for p in v) - cpu_before[k] for k, v in pids.items()}
        rss = [r for p in hosts if (r := rss_kb(p.pid)) is not None]
        if sub.done():  # the subscriber failed: say why rather than report nothing
            sub.result()
    finally:
        for proc in [*hosts, shoes]:
            proc.send_signal(signal.SIGTERM)
        for proc in [*hosts, shoes]:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        sub.cancel()
        broker.stop()
    (base / "received.json").write_text(json.dumps(received))  # for a closer look
    latencies = []
    for table, got in received.items():
        lines = (base / table / "dealt.txt").read_text().splitlines()
        sent = [float(line.split("\t")[1]) for line in lines if "\t" in line]
        # Only cards dealt inside the measured window (not while tables were starting).
        latencies += [got[k + 1] - t for k, t in enumerate(sent)
                      if k + 1 in got and started <= t <= started + elapsed]
    ms = sorted(x * 1000 for x in latencies) or [float("nan")]
    print(json.dumps({
        "target": args.target, "run_dir": str(base), "tables": args.tables, "pace_s": args.pace,
        "seconds": round(elapsed, 1),
        "card_events_per_s_total": round(count / elapsed, 1),
        "card_to_event_ms": {"n": len(ms), "p50": round(statistics.median(ms), 2),
                             "p99": round(ms[int(0.99 * len(ms))], 2), "max": round(ms[-1], 2)},
        "cards_later_than_1s": sum(1 for x in latencies if x > 1.0),
        "cards_dealt_in_window": sum(
            1 for t in tables for line in (base / t / "dealt.txt").read_text().splitlines()
            if "\t" in line and started <= float(line.split("\t")[1]) <= started + elapsed),
        "cpu_percent_of_one_core": {k: round(100 * v / elapsed, 1) for k, v in cpu.items()},
        "host_cpu_ms_per_card": round(1000 * cpu["hosts"] / count, 2) if count else None,
        "host_rss_kb_median": int(statistics.median(rss)) if rss else None,
    }, indent=1))


if __name__ == "__main__":
    asyncio.run(main())

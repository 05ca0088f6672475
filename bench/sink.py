"""The sink under a many-table feed: N tables' events into one `shoed sink`.

    .venv/bin/python bench/sink.py --tables 50 --rate 2 --seconds 60 \
        --postgres postgresql://postgres@127.0.0.1:5432/postgres

One real shoe is dealt first (a `shoed simulate` and a `shoed run` against a private
Mosquitto, at full speed) and its events recorded. Then N publishers in this process
play that shoe as N tables (table_id, event_id, shoe_id and ts re-stamped, `rate` events
per second each, answering `replay` from what they sent, with a retained `status` so the
sink discovers them), into one `shoed sink` process with a wildcard subscription. The
bench creates a scratch database on the given server and drops it afterwards.

Reported: rows (events) stored per second over the window, and the lag from an event's
`ts` to its row (`events.stored_at`, the insert's clock) at p50/p99/max.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

import aiomqtt
import psycopg

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shoed.config import write_config  # noqa: E402
from shoed.sim.broker import PrivateMosquitto  # noqa: E402


async def record_shoe(broker: PrivateMosquitto, tmp: pathlib.Path) -> list[dict[str, Any]]:
    config = write_config(tmp / "shoed.toml", {
        "table": {"id": "REC", "betting_control": "none"},
        "device": {"port": str(tmp / "shoe")}, "mqtt": {"url": broker.url},
        "rules": {"decks": 8}, "state": {"dir": str(tmp / "state")},
        "log": {"format": "json", "level": "warning"}})
    sim = subprocess.Popen([sys.executable, "-m", "shoed.cli", "simulate", "--link",
                            str(tmp / "shoe"), "--decks", "8", "--seed", "7", "--pace", "0",
                            "--shoes", "1"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    events: dict[int, dict[str, Any]] = {}
    async with aiomqtt.Client("127.0.0.1", broker.port) as client:
        await client.subscribe("shoed/REC/events", qos=1)
        while not (tmp / "shoe").exists():
            await asyncio.sleep(0.05)
        daemon = subprocess.Popen([sys.executable, "-m", "shoed.cli", "run", "--config",
                                   str(config)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            async with asyncio.timeout(300):
                async for message in client.messages:
                    e = json.loads(message.payload)
                    events[e["seq"]] = e
                    if e["type"] == "shoe_ended":
                        break
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait()
            sim.kill()
            sim.wait()
    return [events[s] for s in sorted(events)]


async def play(port: int, table: str, shoe: list[dict[str, Any]], rate: float,
               stop: asyncio.Event) -> None:
    root = f"shoed/{table}"
    sent: list[str] = []
    instance = uuid.uuid4().hex[:8]
    async with aiomqtt.Client("127.0.0.1", port, identifier=f"bench-{table}") as client:
        await client.subscribe(f"{root}/cmd", qos=1)
        await client.publish(f"{root}/status", json.dumps({"online": True}), qos=1,
                             retain=True)

        async def answer() -> None:
            async for message in client.messages:
                cmd = json.loads(message.payload)
                first, last = cmd.get("from_seq", 1), cmd.get("to_seq") or len(sent)
                if cmd.get("command") != "replay" or not sent or first > len(sent):
                    body = {"ok": False, "error": {"code": "out_of_range", "message":
                            f"expected from_seq..to_seq within 1..{len(sent)}"}, "result": None}
                else:
                    for raw in sent[first - 1:last]:
                        await client.publish(f"{root}/replay", raw, qos=1)
                    body = {"ok": True, "error": None, "result": {
                        "from_seq": first, "to_seq": last, "count": last - first + 1,
                        "next_from_seq": None}}
                await client.publish(f"{root}/cmd/response", json.dumps(
                    {"request_id": cmd.get("request_id"), "command": "replay", **body}), qos=1)

        answering = asyncio.create_task(answer())
        seq, shoe_no = 0, 0
        while not stop.is_set():
            shoe_no += 1
            shoe_id = f"{table}-bench-{instance}-{shoe_no}"
            for e in shoe:
                if stop.is_set():
                    break
                seq += 1
                body = {**e, "table_id": table, "seq": seq, "instance": instance,
                        "event_id": f"{table}-{instance}-{seq}", "shoe_id": shoe_id,
                        "ts": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")}
                if e["type"] == "alarm":
                    body["alarm_id"] = f"{table}-{instance}-A{seq}"
                raw = json.dumps(body)
                sent.append(raw)
                await client.publish(f"{root}/events", raw, qos=1)
                await asyncio.sleep(1 / rate)
        answering.cancel()


def _count(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM events").fetchone()
    return int(row[0]) if row else 0


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=int, default=50)
    parser.add_argument("--rate", type=float, default=2.0, help="events/s per table")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="shoed-bench-sink-"))
    broker = PrivateMosquitto()
    broker.start()
    name = f"shoed_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.postgres, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    db = args.postgres.rsplit("/", 1)[0] + f"/{name}"
    sink = None
    try:
        shoe = await record_shoe(broker, tmp)
        print(f"recorded one 8-deck shoe: {len(shoe)} events")
        sink = subprocess.Popen([sys.executable, "-m", "shoed.cli", "sink", "--postgres", db,
                                 "--url", broker.url],
                                stdout=open(tmp / "sink.log", "ab"),  # noqa: SIM115
                                stderr=subprocess.STDOUT)
        stop = asyncio.Event()
        players = [asyncio.create_task(play(broker.port, f"B{n:03d}", shoe, args.rate, stop))
                   for n in range(args.tables)]
        await asyncio.sleep(args.warmup)
        started = time.time()
        with psycopg.connect(db) as conn:
            before = _count(conn)
        await asyncio.sleep(args.seconds)
        with psycopg.connect(db) as conn:
            after = _count(conn)
            lag = conn.execute(
                "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY l), "
                "percentile_cont(0.99) WITHIN GROUP (ORDER BY l), max(l) FROM ("
                "SELECT extract(epoch FROM stored_at - ts) AS l FROM events "
                "WHERE ts >= to_timestamp(%s)) x", (started,)).fetchone()
        elapsed = time.time() - started
        stop.set()
        await asyncio.gather(*players, return_exceptions=True)
        offered = args.tables * args.rate
        print(json.dumps({
            "tables": args.tables, "offered_events_per_s": offered,
            "rows_per_s": round((after - before) / elapsed, 1),
            "lag_s": dict(zip(("p50", "p99", "max"),
                              (round(float(v or 0), 4) for v in lag or (0, 0, 0)),
                              strict=True)),
            "window_s": round(elapsed, 1), "load_avg": os.getloadavg()}, indent=2))
    finally:
        if sink is not None:
            sink.send_signal(signal.SIGKILL)
            sink.wait()
        broker.stop()
        with psycopg.connect(args.postgres, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""How long another user's command waits while many big `replay`s are asked at once.

    .venv/bin/python bench/replays_commands.py --replays 20 --events 20000
    .venv/bin/python bench/replays_commands.py --replays 20 --events 20000 --subscribers 20

A journal of `--events` events is grown once with shoed's own code (bench/grow_journal.py).
The daemon (a subprocess, `replay.max_events` = `--events`, a simulated shoe on a pty
dealing a card a second) starts on a copy of it; once READY, `--replays` clients each ask
for a replay of the whole journal at once, and another client sends a `whoami` (answered
by the daemon's desk, no engine) and a `recall` (through the engine and the journal) in
turn every `--every` s, each timed from its PUBLISH to its answer, until every replay is
answered. `--subscribers` processes (`mosquitto_sub`) read `{root}/replay` meanwhile (by
default one: the broker's fan-out is then one copy of each replayed event). The CPU of the
daemon and of the broker over the run says which of them was busy.
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
from latency import pct  # noqa: E402
from procfs import cpu_seconds, stop  # noqa: E402
from replay_load import TABLE, daemon_config  # noqa: E402

from shoed.sim.broker import PrivateMosquitto  # noqa: E402
from shoed.sim.shoe import PtyShoe, Script, SimulatedShoe  # noqa: E402


async def run(args: argparse.Namespace, journal_dir: pathlib.Path,
              broker: PrivateMosquitto) -> dict[str, Any]:
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-replays-"))
    shutil.copytree(journal_dir, tmp / "state")
    os.sync()
    root = f"shoed/{TABLE}"
    loop = asyncio.get_running_loop()
    pty = PtyShoe(SimulatedShoe(decks=8, seed=3, now=loop.time(),
                                script=Script(pace_s=1.0, shoes=0)),
                  link_path=tmp / "shoe")
    pty.plug()
    shoe_task = asyncio.create_task(pty.run())
    subscribers = [subprocess.Popen(["mosquitto_sub", "-p", str(broker.port), "-q", "1",
                                     "-t", f"{root}/replay"], stdout=subprocess.DEVNULL)
                   for _ in range(args.subscribers)]
    config = daemon_config(tmp, broker.port, f"bench-{time.time_ns()}", args.events)
    proc = subprocess.Popen([sys.executable, "-m", "shoed.cli", "run", "--config", str(config)],
                            stdout=open(tmp / "shoed.log", "wb"),  # noqa: SIM115
                            stderr=subprocess.STDOUT)
    assert broker.proc is not None
    broker_pid = broker.proc.pid
    answers: dict[str, float] = {}
    asked: dict[str, tuple[str, float]] = {}
    online = asyncio.Event()
    try:
        async with aiomqtt.Client("127.0.0.1", broker.port) as client:
            await client.subscribe(f"{root}/cmd/response", qos=1)
            await client.subscribe(f"{root}/status", qos=1)

            async def listen() -> None:
                async for message in client.messages:
                    body = json.loads(message.payload)  # type: ignore[arg-type]
                    if str(message.topic).endswith("/status"):
                        if body.get("online") and body.get("mqtt_connected", True):
                            online.set()
                        continue
                    answers.setdefault(str(body.get("request_id")), time.perf_counter())

            listener = asyncio.create_task(listen())
            await asyncio.wait_for(online.wait(), 60)
            await asyncio.sleep(1.0)
            daemon_cpu, broker_cpu = cpu_seconds(proc.pid), cpu_seconds(broker_pid)
            started = time.perf_counter()
            replays = [f"replay-{i}" for i in range(args.replays)]
            for request_id in replays:
                await client.publish(f"{root}/cmd", json.dumps({
                    "request_id": request_id, "command": "replay", "operator": "bench",
                    "from_seq": 1, "to_seq": args.events}), qos=1)
            n = 0
            deadline = started + args.timeout
            while not all(r in answers for r in replays) and time.perf_counter() < deadline:
                command = ("whoami", "recall")[n % 2]
                request_id = f"probe-{n}"
                body: dict[str, Any] = {"request_id": request_id, "command": command,
                                        "operator": "bench"}
                if command == "recall":
                    body["hands"] = 1
                asked[request_id] = (command, time.perf_counter())
                await client.publish(f"{root}/cmd", json.dumps(body), qos=1)
                n += 1
                await asyncio.sleep(args.every)
            took = time.perf_counter() - started
            await asyncio.sleep(2.0)  # the last probes' answers
            daemon_cpu = cpu_seconds(proc.pid) - daemon_cpu
            broker_cpu = cpu_seconds(broker_pid) - broker_cpu
            listener.cancel()
    finally:
        stop(proc)
        shoe_task.cancel()
        pty.unplug()
        for sub in subscribers:
            sub.terminate()
            sub.wait()
    waits: dict[str, list[float]] = {"whoami": [], "recall": []}
    unanswered = 0
    for request_id, (command, at) in asked.items():
        if request_id in answers:
            waits[command].append(answers[request_id] - at)
        else:
            unanswered += 1
    replay_done = [answers[r] - started for r in replays if r in answers]
    return {
        "replays": args.replays, "events_each": args.events, "subscribers": args.subscribers,
        "replays_answered": len(replay_done),
        "all_replayed_s": round(max(replay_done), 1) if replay_done else None,
        "events_per_s": round(len(replay_done) * args.events / max(replay_done))
        if replay_done else None,
        "probes": len(asked), "probes_unanswered": unanswered,
        **{f"{c}_ms": {"p50": round(pct(w, 0.5) * 1000, 1),
                       "p90": round(pct(w, 0.9) * 1000, 1),
                       "max": round(max(w) * 1000, 1)} for c, w in waits.items() if w},
        "cpu_s": {"daemon": round(daemon_cpu, 1), "broker": round(broker_cpu, 1),
                  "run": round(took, 1)},
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--subscribers", type=int, default=1)
    parser.add_argument("--every", type=float, default=0.25, help="between two probes (s)")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--journal", type=pathlib.Path, default=None,
                        help="a state directory grown before (reused)")
    args = parser.parse_args()
    journal_dir = args.journal or pathlib.Path(tempfile.mkdtemp(prefix="bench-replays-j-"))
    if not (journal_dir / "journal.sqlite3").exists():
        grow(journal_dir, args.events, sync=False, seed=1).close()
    broker = PrivateMosquitto(extra_config="max_queued_messages 1000000\n")
    broker.start()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        result = await run(args, journal_dir, broker)
    finally:
        broker.stop()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())

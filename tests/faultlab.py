"""Fault-injection harness shared by the short tests and the documented long runs.

`SHOED_FAULTS=long` scales every fault up to the long run (see docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from rig import Collector, wait_for

from shoed.config import write_config as config_file
from shoed.sim.broker import PrivateMosquitto

LONG = os.environ.get("SHOED_FAULTS") == "long"
HARNESS = pathlib.Path(__file__).resolve().parent / "daemon_harness.py"


def scale(short: int, long: int) -> int:
    return long if LONG else short


@dataclass
class KillReport:
    kills: int = 0
    crash_points: int = 0
    restarts: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    dealt: list[str] = field(default_factory=list)


def write_config(tmp: pathlib.Path, broker: PrivateMosquitto, decks: int) -> pathlib.Path:
    return config_file(tmp / "shoed.toml", {
        "table": {"id": "T9", "betting_control": "none"},
        "device": {"port": str(tmp / "shoe"), "reconnect_max_s": 0.3},
        "mqtt": {"url": broker.url, "publish_timeout_s": 3.0},
        "rules": {"decks": decks},
        "state": {"dir": str(tmp / "state"), "snapshot_every": 16},
        "log": {"format": "json", "level": "warning"},
    })


def start_daemon(config: pathlib.Path, log: pathlib.Path, crash_after: int = 0
                 ) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.pop("SHOED_TEST_CRASH_AFTER_COMMIT", None)
    if crash_after:
        env["SHOED_TEST_CRASH_AFTER_COMMIT"] = str(crash_after)
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, str(HARNESS), "run", "--config",
                                 str(config)], stdout=out, stderr=out, env=env)


def start_simulator(tmp: pathlib.Path, decks: int, seed: int, pace: float,
                    extra: list[str] | None = None) -> subprocess.Popen[bytes]:
    with open(tmp / "simulator.log", "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "shoed.cli", "simulate", "--link", str(tmp / "shoe"),
             "--decks", str(decks), "--seed", str(seed), "--pace", str(pace), "--shoes", "1",
             "--record", str(tmp / "dealt.txt"), *(extra or [])],
            stdout=out, stderr=out)


async def kill_run(tmp: pathlib.Path, broker: PrivateMosquitto, kills: int, crash_points: int,
                   seed: int, decks: int = 1, pace: float = 0.05) -> KillReport:
    """Deal a shoe while the daemon is killed (-9) `kills` times at random instants and
    `crash_points` times right between a journal commit and its ACK."""
    rng = random.Random(seed)
    report = KillReport()
    config = write_config(tmp, broker, decks)
    collector = Collector(broker.port, "shoed/T9")
    collector_task = asyncio.create_task(collector.run())
    await wait_for(collector.connected.is_set, 10, "collector")
    simulator = start_simulator(tmp, decks, seed, pace)
    await wait_for(lambda: (tmp / "shoe").exists(), 10, "the simulated shoe's pty")
    log = tmp / "daemon.log"
    plan = ["kill"] * kills + ["crash"] * crash_points
    rng.shuffle(plan)
    try:
        for step in plan:
            if step == "crash":
                daemon = start_daemon(config, log, crash_after=rng.randint(1, 8))
                deadline = time.monotonic() + 15
                while daemon.poll() is None and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                if daemon.poll() is None:  # the shoe was idle: kill it anyway
                    daemon.send_signal(signal.SIGKILL)
                    daemon.wait()
                report.crash_points += 1
            else:
                daemon = start_daemon(config, log)
                await asyncio.sleep(rng.uniform(0.6, 2.0))
                daemon.send_signal(signal.SIGKILL)
                daemon.wait()
                report.kills += 1
            report.restarts += 1
        daemon = start_daemon(config, log)
        await wait_for(lambda: collector.of("shoe_ended"), 240, "the shoe to end")
        await asyncio.sleep(1.0)  # let the last retained/outbox publishes land
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=20)
    finally:
        for proc in (simulator,):
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        collector_task.cancel()
        await asyncio.gather(collector_task, return_exceptions=True)
    report.events = collector.events
    report.dealt = [line.split("\t")[0] for line in
                    (tmp / "dealt.txt").read_text().splitlines() if line]
    return report

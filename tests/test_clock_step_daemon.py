"""The wall clock stepped forward across a restart of the real daemon (libfaketime moves the
wall clock of the daemon's process only, not its monotonic clock; real Mosquitto).

Issue 13 §4: after a forward step a retried request_id was applied twice and events
seconds old were pruned from the replay range. Both memories now age on the journal's
uptime as well, and are forgotten only when old by both.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from rig import Collector, wait_for

from shoed.sim.broker import PrivateMosquitto

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Debian's multiarch place (installed by scripts/bootstrap).
LIBFAKETIME = next(iter(sorted(pathlib.Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))),
                   pathlib.Path("/usr/lib/faketime/libfaketime.so.1"))


def start(tmp_path: pathlib.Path, broker: PrivateMosquitto, name: str,
          faketime: str | None) -> tuple[subprocess.Popen[bytes], pathlib.Path]:
    config = tmp_path / "shoed.toml"
    config.write_text(f'[table]\nid = "FT1"\n[device]\nport = "{tmp_path / "no-shoe"}"\n'
                      f'[mqtt]\nurl = "{broker.url}"\n'
                      f'[state]\ndir = "{tmp_path / "state"}"\nretention_days = 1\n'
                      f'[log]\nformat = "json"\nlevel = "info"\n')
    env = dict(os.environ)
    if faketime:
        env.update(LD_PRELOAD=str(LIBFAKETIME), FAKETIME=faketime,
                   FAKETIME_DONT_FAKE_MONOTONIC="1")
    log = tmp_path / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "shoed.cli", "run", "--config",
                                 str(config)], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    return proc, log


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)


@pytest.mark.skipif(not LIBFAKETIME.exists(),
                    reason="libfaketime missing: scripts/bootstrap installs it (faketime)")
def test_forward_step_forgets_neither_request_ids_nor_the_replay_range(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    async def main() -> None:
        collector = Collector(broker.port, "shoed/FT1")
        task = asyncio.create_task(collector.run())
        procs = []
        try:
            await wait_for(collector.connected.is_set, 10, "collector connected")
            proc, _ = start(tmp_path, broker, "before", None)
            procs.append(proc)
            await wait_for(lambda: collector.retained.get("status", {}).get("online"), 20,
                           "the daemon online")
            command = {"request_id": "r1", "command": "new_shoe", "operator": "pit"}
            first = await collector.send(command)
            assert first["ok"], first
            await wait_for(lambda: collector.of("shoe_started"), 10, "shoe_started")
            instance = collector.retained["status"]["instance"]
            assert instance and all(e["instance"] == instance for e in collector.events)
            await wait_for(lambda: collector.retained.get("state", {}).get("seq"), 10,
                           "state")
            assert collector.retained["state"]["instance"] == instance
            last_seq = collector.events[-1]["seq"]
            stop(proc)
            assert proc.returncode == 0
            # Restarted with the wall clock 25 h ahead: by wall time the answer and the
            # events are past the 24 h memory and the 1-day retention; by uptime, seconds.
            proc, log = start(tmp_path, broker, "after", "+25h")
            procs.append(proc)
            deadline = time.monotonic() + 30
            while '"journal_pruned"' not in log.read_text():  # its first prune has run
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                await asyncio.sleep(0.1)
            again = await collector.send(command)
            assert again == first  # the original answer: not applied a second time
            replay = await collector.send({"request_id": "r2", "command": "replay",
                                           "operator": "pit", "from_seq": 1})
            assert replay["ok"], replay
            await wait_for(lambda: len(collector.replayed) >= last_seq, 10, "the replay")
            assert [e["seq"] for e in collector.replayed][:last_seq] == list(
                range(1, last_seq + 1))
            await asyncio.sleep(0.5)
            actions = [e for e in collector.events if e["type"] == "supervisor_action"
                       and e.get("request_id") == "r1"]
            assert len(actions) == 1, actions
            stop(proc)
            assert proc.returncode == 0
        finally:
            for proc in procs:
                stop(proc)
            task.cancel()
    asyncio.run(main())


@pytest.mark.skipif(not LIBFAKETIME.exists(),
                    reason="libfaketime missing: scripts/bootstrap installs it (faketime)")
@pytest.mark.parametrize(("step", "late_s"), [("-3600", None), ("+3600", 1.5)])
def test_a_wall_clock_step_mid_pull_neither_keeps_it_waiting_nor_times_it_out_early(
        tmp_path: pathlib.Path, broker: PrivateMosquitto, step: str,
        late_s: float | None) -> None:
    """Issue 13 section 4, on the real daemon (the pty shoe, Mosquitto): the wall clock
    stepped while a two-card pull is half received. Stepped back an hour, the missing
    item is still declared missing after the pull timeout (3 s), not an hour later;
    stepped forward an hour, an item that comes 1.5 s later completes the pull (the
    outside review of issue 13 found these tested with injected clocks only)."""
    from shoed.core.pulls import PULL_TIMEOUT_S
    from shoed.sim.shoe import PtyShoe, Script, SimulatedShoe

    async def main() -> None:
        clock = tmp_path / "faketime"
        clock.write_text("+0\n")
        collector = Collector(broker.port, "shoed/FT2")
        task = asyncio.create_task(collector.run())
        shoe = SimulatedShoe(decks=1, seed=3, script=Script(
            pace_s=0.05, multi_pull_rate=1.0, late_upper_after_cards=8, late_upper_s=late_s))
        pty = PtyShoe(shoe, link_path=tmp_path / "shoe")
        pty.plug()
        runner = asyncio.create_task(pty.run())
        config = tmp_path / "shoed.toml"
        config.write_text(f'[table]\nid = "FT2"\nbetting_control = "none"\n'
                          f'[device]\nport = "{tmp_path / "shoe"}"\n'
                          f'[rules]\ndecks = 1\n[mqtt]\nurl = "{broker.url}"\n'
                          f'[state]\ndir = "{tmp_path / "state"}"\n'
                          f'[log]\nformat = "json"\nlevel = "info"\n')
        env = dict(os.environ, LD_PRELOAD=str(LIBFAKETIME), FAKETIME_TIMESTAMP_FILE=str(clock),
                   FAKETIME_NO_CACHE="1", FAKETIME_DONT_FAKE_MONOTONIC="1")
        log = tmp_path / "daemon.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "shoed.cli", "run", "--config",
                                     str(config)], cwd=ROOT, env=env, stdout=out,
                                    stderr=subprocess.STDOUT)
        try:
            await wait_for(collector.connected.is_set, 10, "collector connected")
            # the pull's lower item is in, its upper one held back by the shoe
            await wait_for(lambda: shoe.holding_upper and shoe.link.pending_count == 0, 30,
                           "a half-received pull (its lower item ACKed)")
            clock.write_text(f"{step}\n")
            stepped = time.monotonic()

            def missing() -> list[dict[str, Any]]:
                return [e for e in collector.of("alarm")
                        if e["code"] == "incomplete_pull" and e["active"]]

            if late_s is None:  # stepped back: timed out on the uptime clock
                await wait_for(missing, PULL_TIMEOUT_S + 5, "the incomplete pull")
                assert time.monotonic() - stepped < PULL_TIMEOUT_S + 4
            else:  # stepped forward: the late item completes the pull, nothing missing
                await asyncio.sleep(late_s + PULL_TIMEOUT_S)
                assert missing() == []
                cards = [e for e in collector.of("card") if e["card_index"] is not None]
                assert cards and all(e["position"] is not None for e in cards[-2:])
            assert proc.poll() is None, log.read_text()[-2000:]
        finally:
            stop(proc)
            runner.cancel()
            pty.unplug()
            task.cancel()
    asyncio.run(main())

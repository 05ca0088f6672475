"""Line and device faults against the real daemon (short form; SHOED_FAULTS=long scales up)."""

from __future__ import annotations

import asyncio
import pathlib
import random
import subprocess
import sys

import pytest
from faultlab import scale
from rig import rig, wait_for
from test_daemon_e2e import check_shoe
from test_daemon_faults import _mount_tmpfs

from shoed.sim.broker import PrivateMosquitto
from shoed.sim.shoe import Script

pytestmark = pytest.mark.broker


@pytest.mark.parametrize("fault", ["noise", "truncated", "duplicated", "storm"])
def test_line_faults_lose_and_double_nothing(tmp_path: pathlib.Path, broker: PrivateMosquitto,
                                             fault: str) -> None:
    rates = {"noise": {"noise_rate": 0.2}, "truncated": {"truncate_rate": 0.15},
             "duplicated": {"duplicate_rate": 0.3},
             "storm": {"duplicate_rate": 1.0, "noise_rate": 0.1, "truncate_rate": 0.05}}[fault]

    async def main() -> None:
        for shoe_no in range(scale(1, 5)):
            script = Script(pace_s=0.0, shoes=1, multi_pull_rate=0.2, **rates)
            where = tmp_path / f"{fault}{shoe_no}"
            where.mkdir()
            async with rig(where, broker, decks=1,
                           seed=100 + shoe_no, script=script) as r:
                await wait_for(lambda: r.collector.of("shoe_ended"), 120, "the shoe to end")
                await wait_for(lambda: r.daemon.outbox.depth() == 0, 10, "outbox drained")
                check_shoe(r.collector.events, r.shoe.dealt)
                assert not [a for a in r.collector.of("alarm") if a["code"] == "cards_lost"]
                link = r.daemon.session.link
                assert link is not None
                if fault in ("duplicated", "storm"):
                    assert link.stats["duplicates"] > 0
                else:
                    assert link.discards
    asyncio.run(main())


def test_device_silent_over_5s_and_back(tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    async def main() -> None:
        async with rig(tmp_path, broker, decks=1, seed=31,
                       script=Script(pace_s=0.03, shoes=1)) as r:
            c = r.collector
            await wait_for(lambda: len(c.of("hand_result")) >= 1, 30, "a result")
            runner = r.tasks[-1]  # the simulated shoe's loop: stop it (a hung shoe)
            runner.cancel()
            await wait_for(lambda: any(a["code"] == "device_lost" and a["active"]
                                       for a in c.of("alarm")), 10, "device_lost after 5 s")
            assert r.pty is not None
            r.tasks.append(asyncio.create_task(r.pty.run()))
            await wait_for(lambda: any(a["code"] == "device_lost" and not a["active"]
                                       for a in c.of("alarm")), 10, "device_lost cleared")
            await wait_for(lambda: c.of("shoe_ended"), 60, "the shoe to end")
            check_shoe(c.events, r.shoe.dealt)
    asyncio.run(main())


def test_device_reboot_mid_hand_holds_until_resume(tmp_path: pathlib.Path,
                                                   broker: PrivateMosquitto) -> None:
    async def main() -> None:
        script = Script(pace_s=0.03, shoes=1, reboot_after_cards=16)
        async with rig(tmp_path, broker, decks=1, seed=41, script=script) as r:
            c = r.collector
            await wait_for(lambda: any(a["code"] == "device_rebooted" for a in c.of("alarm")),
                           30, "device_rebooted")
            await wait_for(lambda: c.retained.get("state", {}).get("hold") is not None, 10,
                           "the hold on the state topic")
            assert "device_rebooted" in c.retained["state"]["hold"]["reasons"]
            answer = await c.send({"request_id": "res-1", "command": "resume",
                                   "operator": "pit"})
            assert answer["ok"], answer
            await wait_for(lambda: c.of("shoe_ended") or len(c.of("hand_result")) >= 4, 60,
                           "dealing goes on")
            results = c.of("hand_result")
            assert len({r_["hand_no"] for r_ in results}) == len(results)
            seqs = [e["seq"] for e in c.events]
            assert seqs == list(range(1, len(seqs) + 1))
    asyncio.run(main())


def test_read_only_state_dir_at_start_is_a_clear_refusal(tmp_path: pathlib.Path,
                                                          broker: PrivateMosquitto) -> None:
    """A live flip to read-only cannot be staged here (remount,ro is refused while the
    journal is open for writing); disk full covers the live path. At start-up a
    read-only state directory must give a clear refusal and never an ACK."""
    state = tmp_path / "state"
    if not _mount_tmpfs(state, "4m"):
        pytest.skip("needs root and mount(2)")
    try:
        subprocess.run(["mount", "-o", "remount,ro", str(state)], check=True)
        config = tmp_path / "shoed.toml"
        config.write_text(f'[device]\nport = "{tmp_path / "none"}"\n[mqtt]\nurl = "{broker.url}"'
                          f'\n[state]\ndir = "{state}"\n[log]\nformat = "json"\n')
        done = subprocess.run([sys.executable, "-m", "shoed.cli", "run", "--config",
                               str(config)], capture_output=True, text=True, timeout=30)
        assert done.returncode == 1
        assert "cannot_start" in done.stdout and "read-only" in done.stdout.lower()
    finally:
        subprocess.run(["umount", "-l", str(state)], capture_output=True)


@pytest.mark.parametrize("how", ["kill", "graceful"])
def test_broker_outages_at_random_points(tmp_path: pathlib.Path, broker: PrivateMosquitto,
                                         how: str) -> None:
    rng = random.Random(7 if how == "kill" else 8)
    outages = scale(3, 25)

    async def main() -> None:
        decks = 1 if outages < 10 else 4
        async with rig(tmp_path, broker, decks=decks, seed=61,
                       script=Script(pace_s=0.01, shoes=1)) as r:
            for _ in range(outages):
                await asyncio.sleep(rng.uniform(0.2, 1.0))
                if r.collector.of("shoe_ended"):
                    break
                broker.stop(kill=how == "kill")
                await asyncio.sleep(rng.uniform(0.2, 1.5))
                broker.start()
            engine = r.daemon.recorder.engine
            assert engine is not None
            await wait_for(lambda: engine.public_state()["shoe_state"] == "shoe_ended", 240,
                           "the shoe to end")
            await wait_for(lambda: r.daemon.outbox.depth() == 0, 30, "outbox drained")
            await wait_for(lambda: r.collector.connected.is_set(), 10, "collector back")
            await wait_for(lambda: r.daemon.status.mqtt_connected, 20, "daemon back on the broker")
            await asyncio.sleep(0.5)  # its command subscription is in place
            # Events the broker delivered while the collector was not yet subscribed again
            # (no broker persistence) come back through `replay`, as for any consumer.
            filled = await r.collector.fill_gaps(engine.seq)
            check_shoe(r.collector.events, r.shoe.dealt)
            assert r.collector.events[0]["seq"] == 1
            assert r.collector.events[-1]["seq"] == engine.seq
            print(f"{how}: {outages} outages, {filled} events fetched again by replay")
    asyncio.run(main())

"""`daemon.event_loop`: `shoed run` on the standard library's loop (the default) or uvloop.

Every other test runs the daemon on asyncio's loop. Here: the choice and its fallback,
what the log says, and the whole path (pty, journal, broker) on uvloop with a noisy line,
as the other tests check it on asyncio. The long kill run can be repeated on uvloop with
SHOED_DAEMON__EVENT_LOOP=uvloop (docs/reliability.md)."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
from proc import DaemonProcess
from rig import rig, wait_for
from test_daemon_e2e import check_shoe

from shoed.aio import loop_factory, loop_name
from shoed.config import ConfigError, dump_toml, load_settings
from shoed.sim.broker import PrivateMosquitto
from shoed.sim.shoe import Script

try:
    import uvloop
except ImportError:  # the test extra installs it; without it the uvloop tests skip
    uvloop = None
needs_uvloop = pytest.mark.skipif(uvloop is None, reason="uvloop is not installed")


@needs_uvloop
def test_both_loops_can_be_chosen() -> None:
    assert uvloop is not None
    factory, name = loop_factory("uvloop")
    assert name == "uvloop" and factory is uvloop.new_event_loop
    assert loop_factory("asyncio") == (None, "asyncio")


def test_asyncio_is_the_default() -> None:
    from shoed.config import DaemonSection

    assert DaemonSection().event_loop == "asyncio"


def test_without_uvloop_the_daemon_runs_on_asyncio_and_says_so(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert loop_factory("uvloop") == (None, "asyncio (uvloop is not installed)")


FALLBACK = """
import sys
sys.modules["uvloop"] = None  # as on a machine without it
from shoed import cli
sys.exit(cli.main(["run", "--config", sys.argv[1]]))
"""


def test_shoed_run_asked_for_uvloop_without_it_runs_on_asyncio_and_logs_it(
        tmp_path: pathlib.Path) -> None:
    config = tmp_path / "shoed.toml"
    config.write_text(dump_toml({
        "table": {"id": "T9"}, "device": {"port": str(tmp_path / "no-shoe")},
        "mqtt": {"url": "mqtt://127.0.0.1:9"}, "state": {"dir": str(tmp_path / "state")},
        "log": {"format": "json"}, "daemon": {"event_loop": "uvloop"}}))
    config.chmod(0o600)
    log = tmp_path / "daemon.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", FALLBACK, str(config)], stdout=out,
                                stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 20
        while '"ready"' not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    fallback = [x for x in lines if x.get("event") == "event_loop_fallback"]
    assert fallback and fallback[0]["configured"] == "uvloop"
    assert fallback[0]["running"] == "asyncio (uvloop is not installed)"
    assert [x["event_loop"] for x in lines if x.get("event") == "ready"] == ["asyncio"]


def test_an_unknown_event_loop_is_refused_naming_the_key(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "shoed.toml"
    config.write_text(dump_toml({"daemon": {"event_loop": "tornado"},
                                 "state": {"dir": str(tmp_path / "state")}}))
    config.chmod(0o600)
    with pytest.raises(ConfigError, match=r"daemon\.event_loop"):
        load_settings(config)


@pytest.mark.broker
@pytest.mark.parametrize("kind", [pytest.param("uvloop", marks=needs_uvloop), "asyncio"])
def test_shoed_run_logs_the_loop_it_runs_on(tmp_path: pathlib.Path, broker: PrivateMosquitto,
                                            kind: str) -> None:
    daemon = DaemonProcess(tmp_path, broker.url, daemon={"event_loop": kind})
    try:
        daemon.start()
        deadline = time.monotonic() + 20
        while not daemon.logged("ready") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [line["event_loop"] for line in daemon.logged("ready")] == [kind]
        assert daemon.stop() == 0
    finally:
        daemon.close()


@needs_uvloop
@pytest.mark.broker
def test_a_noisy_shoe_on_uvloop_loses_and_doubles_nothing(tmp_path: pathlib.Path,
                                                           broker: PrivateMosquitto) -> None:
    async def main() -> None:
        assert loop_name() == "uvloop"
        script = Script(pace_s=0.0, shoes=1, multi_pull_rate=0.2, noise_rate=0.1,
                        duplicate_rate=0.2, truncate_rate=0.05)
        async with rig(tmp_path, broker, decks=2, seed=21, script=script) as r:
            await wait_for(lambda: r.collector.of("shoe_ended"), 120, "the shoe to end")
            await wait_for(lambda: r.daemon.outbox.depth() == 0, 10, "outbox drained")
            await r.caught_up()
            check_shoe(r.collector.events, r.shoe.dealt)
            assert not [a for a in r.collector.of("alarm") if a["code"] == "cards_lost"]
            link = r.daemon.session.link
            assert link is not None and link.discards and link.stats["duplicates"] > 0
            last = r.collector.events[-1]["seq"]
            await wait_for(lambda: r.collector.retained.get("state", {}).get("seq") == last,
                           10, "state republished")

    assert uvloop is not None
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())

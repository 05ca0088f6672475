"""The unit file's hardening score and validity, and notify/watchdog/stop behaviour."""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from shoed.sim.broker import PrivateMosquitto
from shoed.store.journal import Journal

ROOT = pathlib.Path(__file__).resolve().parent.parent
UNIT = ROOT / "systemd" / "shoed.service"
needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                   reason="systemd-analyze is not installed")


@needs_analyze
def test_unit_exposure_is_2_or_less() -> None:
    # --threshold counts tenths: 20 is an exposure of 2.0.
    done = subprocess.run(["systemd-analyze", "security", "--offline=true", "--threshold=20",
                           str(UNIT)], capture_output=True, text=True)
    match = re.search(r"Overall exposure level for shoed.service: ([0-9.]+)", done.stdout)
    assert match, done.stdout[-500:] + done.stderr
    assert float(match.group(1)) <= 2.0
    assert done.returncode == 0


@needs_analyze
def test_the_unit_waits_for_the_longest_stop_the_config_allows() -> None:
    """A stop takes at most mqtt.publish_timeout_s + 1 s (the broker hung); the unit's
    TimeoutStopSec must not kill it before, for any value check-config accepts (outside
    review of issue 13: 15 s against a maximum of 120)."""
    from annotated_types import Le

    from shoed.config import MqttSection
    field = MqttSection.model_fields["publish_timeout_s"]
    largest = next(m.le for m in field.metadata if isinstance(m, Le))
    found = re.search(r"^TimeoutStopSec=(\d+)s$", UNIT.read_text(), re.M)
    assert found is not None
    assert int(found.group(1)) >= float(largest) + 1


def test_unit_verifies(tmp_path: pathlib.Path) -> None:
    installed = pathlib.Path(sys.executable).parent / "shoed"
    unit = tmp_path / "shoed.service"
    unit.write_text(UNIT.read_text().replace("/opt/shoed/venv/bin/shoed", str(installed)))
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True)
    problems = [line for line in (done.stdout + done.stderr).splitlines()
                if "shoed.service" in line and "is not executable" not in line]
    assert not problems, problems


@needs_analyze
def test_the_sink_unit_verifies_and_restarts_always(tmp_path: pathlib.Path) -> None:
    """The sink exits when it loses its database (integrating.md section 5): its unit
    starts it again."""
    text = (ROOT / "systemd" / "shoed-sink.service").read_text()
    assert "Restart=always" in text
    installed = pathlib.Path(sys.executable).parent / "shoed"
    unit = tmp_path / "shoed-sink.service"
    unit.write_text(text.replace("/opt/shoed/venv/bin/shoed", str(installed)))
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True)
    problems = [line for line in (done.stdout + done.stderr).splitlines()
                if "shoed-sink.service" in line and "is not executable" not in line]
    assert not problems, problems


def test_udev_rule_names_the_spec_ids() -> None:
    rules = (ROOT / "systemd" / "99-shoed.rules").read_text()
    assert 'ATTR{idVendor}=="1209"' in rules and 'ATTR{idProduct}=="bac0"' in rules
    assert "SYMLINK+=\"shoe\"" in rules and "ID_MM_DEVICE_IGNORE" in rules


@pytest.mark.broker
def test_notify_ready_watchdog_status_and_graceful_stop(tmp_path: pathlib.Path,
                                                        broker: PrivateMosquitto) -> None:
    sock_path = tmp_path / "notify.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(str(sock_path))
    server.settimeout(0.2)
    config = tmp_path / "shoed.toml"
    config.write_text(f"""
[table]
id = "T3"
[device]
port = "{tmp_path / 'no-such-shoe'}"
[mqtt]
url = "{broker.url}"
[state]
dir = "{tmp_path / 'state'}"
[log]
format = "json"
""")
    env = dict(os.environ, NOTIFY_SOCKET=str(sock_path), WATCHDOG_USEC="1000000")
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "shoed.cli", "run", "--config", str(config)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    messages: list[tuple[float, str]] = []
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                messages.append((time.monotonic() - started, server.recv(4096).decode()))
            if sum("WATCHDOG=1" in m for _, m in messages) >= 3:
                break
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
        with_stop = time.monotonic() + 1
        while time.monotonic() < with_stop:
            try:
                messages.append((time.monotonic() - started, server.recv(4096).decode()))
            except TimeoutError:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        server.close()
    texts = [m for _, m in messages]
    assert any("READY=1" in m for m in texts), texts
    # The shoe is absent and yet the daemon is READY: the broker is not a precondition either.
    ready_at = next(t for t, m in messages if "READY=1" in m)
    assert ready_at < 15
    assert sum("WATCHDOG=1" in m for m in texts) >= 3
    assert any(m.startswith("STATUS=device") for m in texts)
    assert any("STOPPING=1" in m for m in texts)
    assert code == 0
    journal = Journal(tmp_path / "state")  # opens only if SQLite's quick_check says ok
    assert journal.meta("instance_id") and journal.outbox_depth() == 0
    journal.close()

"""`shoed demo`, the README's main command: deals, shows results, and stops on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from shoed.broker import free_port


def test_demo_shows_hand_results_and_stops_on_ctrl_c() -> None:
    # A port where nothing answers: the demo starts its own broker. (A broker already on
    # 1883 may be shared with other demos, all of them table DEMO: they would take each
    # other's MQTT session.)
    url = f"mqtt://127.0.0.1:{free_port()}"
    proc = subprocess.Popen([sys.executable, "-m", "shoed.cli", "demo"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1", SHOED_MQTT__URL=url))
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if " -> " in line and "hand 1" in line:  # "hand 1 Player ... -> BANKER ..."
                break
        assert any(" -> " in x for x in seen), "".join(seen[-20:])
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=15)[0]
        assert proc.returncode == 0
        assert time.monotonic() - started < 10
        assert "hand results shown" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

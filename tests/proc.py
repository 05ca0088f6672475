"""The daemon as a real process: its notify socket, its log, its config (for the tests of
supervision, status and stopping)."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from faultlab import HARNESS, start_simulator

from shoed.config import write_config


class Notifications:
    """Everything the daemon sends to $NOTIFY_SOCKET, with arrival times."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self.messages: list[tuple[float, str]] = []
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(str(path))
        self._socket.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                self.messages.append((time.monotonic(), self._socket.recv(4096).decode()))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(1)
        self._socket.close()

    def statuses(self) -> list[str]:
        return [line[7:] for _, m in self.messages for line in m.splitlines()
                if line.startswith("STATUS=")]

    def pings(self, after: float = 0.0) -> list[float]:
        return [t for t, m in self.messages if "WATCHDOG=1" in m and t >= after]

    def first(self, text: str) -> float | None:
        return next((t for t, m in self.messages if text in m), None)


class DaemonProcess:
    def __init__(self, tmp: pathlib.Path, url: str, **sections: Any) -> None:
        self.tmp = tmp
        data: dict[str, dict[str, Any]] = {
            "table": {"id": "T9", "betting_control": "none"},
            "device": {"port": str(tmp / "shoe"), "reconnect_max_s": 0.3},
            "mqtt": {"url": url, "publish_timeout_s": 2.0},
            "rules": {"decks": 1},
            "state": {"dir": str(tmp / "state")},
            "log": {"format": "json", "level": "info"},
        }
        for key, value in sections.items():
            data.setdefault(key, {}).update(value)
        self.config = write_config(tmp / "shoed.toml", data)
        self.log = tmp / "daemon.log"
        self.notifications = Notifications(tmp / f"notify-{time.monotonic_ns()}.sock")
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.simulator: subprocess.Popen[bytes] | None = None

    def start(self, **env: str) -> None:
        self.starts += 1
        environ = dict(os.environ, NOTIFY_SOCKET=str(self.notifications.path),
                       WATCHDOG_USEC="1000000", **env)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, str(HARNESS), "run", "--config",
                                          str(self.config)], stdout=out, stderr=out,
                                         env=environ)

    def start_shoe(self, seed: int = 5, pace: float = 0.05) -> None:
        self.simulator = start_simulator(self.tmp, 1, seed, pace)

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def logged(self, event: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line.get("event") == event]

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM once it is ready (before, its signal handlers are not in place)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while len(self.logged("ready")) < self.starts and time.monotonic() < deadline \
                and self.proc.poll() is None:
            time.sleep(0.05)
        self.proc.terminate()
        return self.proc.wait(timeout=timeout)

    def close(self) -> None:
        for proc in (self.proc, self.simulator):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        self.notifications.close()

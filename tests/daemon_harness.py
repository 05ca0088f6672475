"""`python tests/daemon_harness.py run --config PATH`: the real `shoed run`, with faults
that only tests install, chosen by environment variables (never in the product):

* SHOED_TEST_CRASH_AFTER_COMMIT=N: SIGKILL after the N-th frame is journalled and before
  its ACK (a hook on the recorder's RECORD_HOOKS);
* SHOED_TEST_FAIL=mqtt|device|timer and SHOED_TEST_FAIL_TIMES=N (default: always): that
  loop raises RuntimeError("injected fault") N times, then works;
  SHOED_TEST_FAIL=after_ready: building the MQTT service right after READY raises (as a
  broken install's import of aiomqtt would, decisions.md 127);
* SHOED_TEST_BACKOFF=first,longest: the supervisor's restart back-off, in seconds;
* SHOED_TEST_NO_REPLAY_CONNECTION=1: a replay's own connection cannot be made (it goes
  to a port where nothing listens);
* SHOED_TEST_REPLAY_RATE=N: a replay's pace, N events a second (inbox.REPLAY_EVENTS_PER_S).
"""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import sys
from typing import Any

import aiomqtt

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from shoed import cli, supervisor
from shoed.device.session import DeviceSession
from shoed.mqtt import inbox
from shoed.mqtt.service import MqttService
from shoed.store import recorder


def _crash_after(frames: int) -> None:
    left = [frames]

    def hook() -> None:
        left[0] -= 1
        if left[0] == 0:
            os.kill(os.getpid(), signal.SIGKILL)

    recorder.RECORD_HOOKS.append(hook)


def _failing(cls: Any, method: str, times: int | None) -> None:
    original = getattr(cls, method)
    left = [times]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if left[0] is None or left[0] > 0:
            if left[0] is not None:
                left[0] -= 1
            raise RuntimeError(f"injected fault in {cls.__name__}.{method}")
        return original(*args, **kwargs)

    setattr(cls, method, wrapper)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again: nothing listens there


def install() -> None:
    if crash := int(os.environ.get("SHOED_TEST_CRASH_AFTER_COMMIT", "0") or 0):
        _crash_after(crash)
    if backoff := os.environ.get("SHOED_TEST_BACKOFF"):
        first, longest = (float(x) for x in backoff.split(","))
        supervisor.BACKOFF_S = (first, longest)
    if rate := os.environ.get("SHOED_TEST_REPLAY_RATE"):
        inbox.REPLAY_EVENTS_PER_S = int(rate)
    if os.environ.get("SHOED_TEST_NO_REPLAY_CONNECTION"):
        def nowhere(self: MqttService) -> aiomqtt.Client:
            return aiomqtt.Client("127.0.0.1", _closed_port(), timeout=2.0)

        MqttService.replay_client = nowhere  # type: ignore[method-assign]
    times_text = os.environ.get("SHOED_TEST_FAIL_TIMES")
    times = int(times_text) if times_text else None
    fail = os.environ.get("SHOED_TEST_FAIL")
    if fail == "mqtt":
        _failing(MqttService, "client_args", times)  # raised inside the connection loop
    elif fail == "device":
        _failing(DeviceSession, "run", times)  # the device loop fails as it starts
    elif fail == "timer":
        _failing(DeviceSession, "on_timer", times)  # raised inside the timer's callback
    elif fail == "after_ready":
        from shoed.daemon import Daemon

        _failing(Daemon, "build_mqtt", times)


if __name__ == "__main__":
    install()
    sys.exit(cli.main(sys.argv[1:]))

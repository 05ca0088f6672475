"""sd_notify against a real datagram socket standing in for systemd."""

from __future__ import annotations

import pathlib
import socket

import pytest

from shoed.sdnotify import Notifier


def test_notify_datagrams(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "notify.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(str(path))
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    monkeypatch.setenv("WATCHDOG_USEC", "4000000")
    notifier = Notifier()
    assert notifier.watchdog_interval_s == 2.0
    assert notifier.notify(READY=1, STATUS="journal restored")
    assert server.recv(1024) == b"READY=1\nSTATUS=journal restored"
    server.close()


def test_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind("\0shoed-test-notify")
    monkeypatch.setenv("NOTIFY_SOCKET", "@shoed-test-notify")
    assert Notifier().notify(WATCHDOG=1)
    assert server.recv(64) == b"WATCHDOG=1"
    server.close()


def test_without_systemd_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert Notifier().notify(READY=1) is False


def test_a_receiver_that_does_not_read_never_blocks(tmp_path: pathlib.Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A hung manager: its queue fills up, and notify() drops instead of blocking."""
    import time

    path = tmp_path / "full.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(str(path))
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    notifier = Notifier()
    started = time.monotonic()
    results = [notifier.notify(STATUS=f"status {i}") for i in range(5000)]
    assert time.monotonic() - started < 5
    assert results[0] is True and results[-1] is False  # the queue filled: dropped
    server.close()

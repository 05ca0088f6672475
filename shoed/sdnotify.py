"""sd_notify without a dependency: one datagram to $NOTIFY_SOCKET (systemd's protocol).

A leading '@' names an abstract socket. Without $NOTIFY_SOCKET every call is a no-op,
so the daemon runs the same under systemd, in a terminal and in tests.
"""

from __future__ import annotations

import os
import socket


class Notifier:
    def __init__(self, address: str | None = None) -> None:
        address = address if address is not None else os.environ.get("NOTIFY_SOCKET")
        self.address: str | None = None
        self._socket: socket.socket | None = None
        if address:
            self.address = "\0" + address[1:] if address.startswith("@") else address
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            # Never block the event loop: a receiver that does not read (a hung or slow
            # manager) would otherwise freeze the daemon in sendto() once its queue is full.
            self._socket.setblocking(False)
        self.watchdog_interval_s = self._watchdog_interval()

    @staticmethod
    def _watchdog_interval() -> float | None:
        usec = os.environ.get("WATCHDOG_USEC")
        pid = os.environ.get("WATCHDOG_PID")
        if not usec or (pid and pid != str(os.getpid())):
            return None
        try:
            return int(usec) / 1_000_000 / 2  # ping at half the timeout, as systemd advises
        except ValueError:
            return None

    @property
    def enabled(self) -> bool:
        return self._socket is not None

    def notify(self, **fields: str | int) -> bool:
        """Send e.g. ``notify(READY=1, STATUS="...")``; False if it could not be sent."""
        if self._socket is None or self.address is None:
            return False
        message = "\n".join(f"{k}={v}" for k, v in fields.items()).encode()
        try:
            self._socket.sendto(message, self.address)
        except OSError:  # BlockingIOError included: dropped rather than wait
            return False
        return True

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

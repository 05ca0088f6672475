"""TableStatus: what each part of the daemon says about itself, in one place.

Everyone writes to it (the device session, the recorder, the MQTT service, the
supervisor); the MQTT service's retained `status` topic and systemd's `STATUS=` line
read it. :meth:`set` fires the `changed` listeners only when a value really changed, so
a writer may call it as often as it likes; the outbox depth and the last publish time are
read when a payload is made, not signalled (they change with every card).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from shoed import __version__
from shoed.clock import clock_synchronised


class TableStatus:
    def __init__(self, table_id: str) -> None:
        self.table_id = table_id
        self.instance: str | None = None  # the journal's identity (events carry it too)
        self.run_id = secrets.token_hex(4)  # new at every start (not the journal's instance)
        self.online_since: float | None = None  # first connected to the broker, this run
        self.conflict: str | None = None  # another live daemon holds the root
        self.device_open = False  # the transport is open
        self.device_alive = False  # the engine sees the shoe (hello and no silence)
        self.mqtt_connected = False
        self.mqtt_error: str | None = None  # why the broker cannot be used, if it cannot
        self.broker_url: str | None = None  # the broker of mqtt.url in use (None: none)
        self.storage_ok = True
        self.storage_error: str | None = None
        # The journal failed its integrity check after READY: written on, refused at the
        # next start (what was found, else None).
        self.journal_corrupt: str | None = None
        self.last_seen: float | None = None  # wall time of the shoe's latest frame
        self.last_publish: float | None = None  # wall time of the latest PUBACK
        self.failing: dict[str, str] = {}  # supervised task -> why it is down
        self.outbox_depth: Callable[[], int] = lambda: 0
        self._listeners: list[Callable[[], None]] = []

    def on_change(self, listener: Callable[[], None]) -> None:
        """`listener()` is called (synchronously) after every change of a flag."""
        self._listeners.append(listener)

    def set(self, **values: Any) -> None:
        changed = False
        for key, value in values.items():
            if not hasattr(self, key) or key.startswith("_"):
                raise AttributeError(f"TableStatus has no field {key!r}")
            if getattr(self, key) != value:
                setattr(self, key, value)
                changed = True
        if changed:
            self.changed()

    def changed(self) -> None:
        for listener in self._listeners:
            listener()

    def task_down(self, name: str, why: str) -> None:
        self.failing[name] = why
        self.changed()

    def task_up(self, name: str) -> None:
        if self.failing.pop(name, None) is not None:
            self.changed()

    @property
    def device_connected(self) -> bool:
        return self.device_open and self.device_alive

    def payload(self) -> dict[str, Any]:
        """The retained `{root}/status` body."""
        synced = clock_synchronised()
        warnings = [] if synced is not False else ["system clock not synchronised"]
        if not self.storage_ok:
            warnings.append("journal cannot be written: nothing is ACKed")
        if self.journal_corrupt:
            warnings.append(f"journal corrupt ({self.journal_corrupt}): the next start "
                            f"refuses it; plan a new journal (shoed run --new-journal)")
        warnings += [f"{name} down: {why}" for name, why in sorted(self.failing.items())]
        return {
            "online": True, "table_id": self.table_id, "version": __version__,
            "instance": self.instance, "run_id": self.run_id, "online_since": self.online_since,
            "device_connected": self.device_connected, "mqtt_connected": self.mqtt_connected,
            "broker_url": self.broker_url,
            "storage_ok": self.storage_ok, "storage_error": self.storage_error,
            "journal_corrupt": self.journal_corrupt,
            "outbox": self.outbox_depth(), "last_publish": self.last_publish,
            "clock_synchronised": synced, "warnings": warnings, "ts": time.time(),
        }

    def offline_payload(self) -> dict[str, Any]:
        """The `{root}/status` body of a daemon gone offline: its will (published by the
        broker when the connection is lost) and its farewell (when it stops)."""
        return {"online": False, "table_id": self.table_id, "instance": self.instance,
                "run_id": self.run_id}

    def line(self) -> str:
        """systemd's STATUS= text: every part, one line."""
        broker = (f"connected ({self.broker_url})" if self.broker_url else "connected") \
            if self.mqtt_connected else (
            f"disconnected ({self.mqtt_error})" if self.mqtt_error else "disconnected")
        last = ("never" if self.last_publish is None
                else time.strftime("%H:%M:%S", time.gmtime(self.last_publish)) + "Z")
        text = (f"device {'connected' if self.device_connected else 'disconnected'}, "
                f"broker {broker}, outbox {self.outbox_depth()}, last publish {last}")
        if not self.storage_ok:
            text += ", STORAGE FAILED"
        if self.journal_corrupt:
            text += f", JOURNAL CORRUPT: {self.journal_corrupt}"
        if self.conflict:
            text += f", CONFLICT: {self.conflict}"
        for name, why in sorted(self.failing.items()):
            text += f", {name} DOWN: {why}"
        return text

"""An end-to-end rig: real Mosquitto, the daemon in-process, the simulated shoe on a pty."""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiomqtt

from shoed.config import Settings
from shoed.daemon import Daemon
from shoed.sim.broker import PrivateMosquitto
from shoed.sim.shoe import PtyShoe, Script, SimulatedShoe


def peek(db: pathlib.Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """The rows of `sql` on a journal's database file, read on a connection of the test's
    own (read-only; a live journal's committed rows are visible: it is in WAL mode), not
    through the journal's private one."""
    conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def make_settings(state_dir: pathlib.Path, url: str, port: str = "", **sections: Any
                  ) -> Settings:
    data: dict[str, Any] = {
        "table": {"id": "T9", "betting_control": "none"},
        "device": {"port": port, "reconnect_max_s": 0.5},
        "mqtt": {"url": url, "publish_timeout_s": 3.0},
        "state": {"dir": str(state_dir)},
        "log": {"format": "json", "level": "warning"},
    }
    for key, value in sections.items():
        data.setdefault(key, {}).update(value)
    return Settings.model_validate(data)


class Collector:
    """Subscribes to everything under the root; dedupes events by event_id only."""

    def __init__(self, port: int, root: str) -> None:
        self.port = port
        self.root = root
        self.raw_events: list[dict[str, Any]] = []
        self.responses: dict[str, dict[str, Any]] = {}
        self.retained: dict[str, dict[str, Any]] = {}
        self.replayed: list[dict[str, Any]] = []
        self.roads: list[dict[str, Any]] = []  # every {root}/roads message received
        self.client: aiomqtt.Client | None = None
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    @property
    def events(self) -> list[dict[str, Any]]:
        seen: dict[str, dict[str, Any]] = {}
        for e in self.raw_events:
            seen.setdefault(e["event_id"], e)
        return sorted(seen.values(), key=lambda e: e["seq"])

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    async def run(self) -> None:
        while True:
            try:
                async with aiomqtt.Client("127.0.0.1", self.port,
                                          identifier=f"collector-{uuid.uuid4().hex[:8]}",
                                          clean_session=False) as client:
                    self.client = client
                    await client.subscribe(f"{self.root}/#", qos=1)
                    self.connected.set()
                    async for message in client.messages:
                        self._take(str(message.topic), message.payload)
            except aiomqtt.MqttError:
                self.connected.clear()
                self.client = None
                await asyncio.sleep(0.2)

    def _take(self, topic: str, payload: Any) -> None:
        leaf = topic[len(self.root) + 1:]
        if not payload or leaf == "cmd":
            return  # our own commands (some deliberately not JSON)
        data = json.loads(payload)
        if leaf == "events":
            self.raw_events.append(data)
        elif leaf == "cmd/response":
            self.responses[str(data.get("request_id"))] = data
        elif leaf == "replay":
            self.replayed.append(data)
        elif leaf in ("status", "device", "state", "roads"):
            self.retained[leaf] = data
            if leaf == "roads":
                self.roads.append(data)

    def missing(self, last_seq: int) -> list[int]:
        have = {e["seq"] for e in self.raw_events} | {e["seq"] for e in self.replayed}
        return [s for s in range(1, last_seq + 1) if s not in have]

    async def fill_gaps(self, last_seq: int) -> int:
        """What a consumer does after missing events (a broker restart without
        persistence): ask the daemon to `replay` them. Returns how many were missing."""
        missing = self.missing(last_seq)
        if missing:
            answer = await self.send({"request_id": f"fill-{uuid.uuid4().hex[:8]}",
                                      "command": "replay", "operator": "collector",
                                      "from_seq": missing[0], "to_seq": missing[-1]})
            assert answer["ok"], answer
            await wait_for(lambda: not self.missing(last_seq), 10, "replayed events")
            self.raw_events += self.replayed
        return len(missing)

    async def send(self, payload: dict[str, Any] | str | bytes, timeout: float = 10.0
                   ) -> dict[str, Any]:
        """Publish a command and wait for its answer (by request_id)."""
        assert self.client is not None
        body = payload if isinstance(payload, str | bytes) else json.dumps(payload)
        request_id = payload.get("request_id") if isinstance(payload, dict) else None
        before = len(self.responses)
        await self.client.publish(f"{self.root}/cmd", body, qos=1)
        if request_id is not None:
            self.responses.pop(str(request_id), None)
            await wait_for(lambda: str(request_id) in self.responses, timeout)
            return self.responses[str(request_id)]
        await wait_for(lambda: len(self.responses) > before or "None" in self.responses,
                       timeout)
        return self.responses.pop("None")


async def wait_for(predicate: Callable[[], Any], timeout: float = 20.0,
                   what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)


class Rig:
    def __init__(self, daemon: Daemon, shoe: SimulatedShoe, pty: PtyShoe | None,
                 collector: Collector) -> None:
        self.daemon = daemon
        self.shoe = shoe
        self.pty = pty
        self.collector = collector
        self.tasks: list[asyncio.Task[Any]] = []

    async def caught_up(self, timeout: float = 10.0) -> None:
        """The collector holds every event the daemon has applied so far. The outbox's
        PUBACKs come before the broker's deliveries to the collector: on a loaded machine
        the last events of a drained outbox may still be on their way to it."""
        engine = self.daemon.recorder.engine
        await wait_for(lambda: (events := self.collector.events) != []
                       and events[-1]["seq"] == engine.seq, timeout,
                       "the collector to hold every event up to the daemon's seq")


@contextlib.asynccontextmanager
async def rig(tmp_path: pathlib.Path, broker: PrivateMosquitto, script: Script | None = None,
              decks: int = 1, seed: int = 5, transport_factory: Any = None,
              shoe: SimulatedShoe | None = None, collector: bool = True, **sections: Any
              ) -> AsyncIterator[Rig]:
    loop = asyncio.get_running_loop()
    shoe = shoe or SimulatedShoe(decks=decks, seed=seed, script=script or Script(pace_s=0.0),
                                 now=loop.time())
    pty = None
    port = ""
    if transport_factory is None:
        pty = PtyShoe(shoe, link_path=tmp_path / "shoe")
        pty.plug()
        port = str(tmp_path / "shoe")
    sections.setdefault("rules", {}).setdefault("decks", decks)
    settings = make_settings(tmp_path / "state", broker.url, port, **sections)
    daemon = Daemon(settings, transport_factory=transport_factory)
    collecting = Collector(broker.port, settings.topic_root)
    r = Rig(daemon, shoe, pty, collecting)
    r.tasks.append(asyncio.create_task(collecting.run() if collector else asyncio.sleep(1e9)))
    if collector:
        await wait_for(collecting.connected.is_set, 10, "collector connected")
    r.tasks.append(asyncio.create_task(daemon.run()))
    if pty is not None:
        r.tasks.append(asyncio.create_task(pty.run()))
    try:
        yield r
    finally:
        r.daemon.request_stop()  # the test may have restarted it
        await asyncio.wait(r.tasks[1:2], timeout=10)
        for task in r.tasks:
            task.cancel()
        _, stuck = await asyncio.wait(r.tasks, timeout=15)
        if pty is not None:
            pty.unplug()
        if stuck:  # never hang a test run: say which task would not stop, and where
            for task in stuck:
                task.print_stack()
            raise AssertionError(f"{len(stuck)} task(s) did not stop after cancel")

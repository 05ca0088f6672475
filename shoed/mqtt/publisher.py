"""The live publisher and the retained topics: what MqttService sends on a connection.

The publisher takes from the outbox in seq order and reports every PUBACK
(``outbox.acked(seq)``); an event leaves the outbox only then. One message at a time,
each after the PUBACK of the one before: a batch costs less CPU, but the broker then
answers with PUBACKs back to back, and a broker without TCP_NODELAY (Mosquitto's
default) holds the second until our delayed TCP ACK, up to 40 ms.

An input's first event, when the publisher waits idle with nothing in flight, is sent
by :meth:`Publisher._outbox_ready` from where it was applied (the tty's callback), not
on the loop's next turn; the publisher is woken by its PUBACK (or the connection's loss)
and counts it then, as if it had sent it itself (docs/decisions.md 147).

The retained snapshots (`state`, `roads`) follow the events they reflect; the other
retained topics (`status`, `device`) are sent on every change of the status, at least
every RETAINED_EVERY_S, and again RETAINED_REFRESH_S after a (re)connect. The publisher
lives as long as the daemon; its parts run on each connection (MqttService._connected).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import aiomqtt
from paho.mqtt.properties import Properties
from pydantic_core import to_json

from shoed.aio import Wakeup
from shoed.mqtt.window import PublishWindow, publish_once
from shoed.status import TableStatus
from shoed.store.outbox import Outbox

RETAINED_REFRESH_S = 2.0  # retained topics again this long after a (re)connect
RETAINED_EVERY_S = 30.0  # and at least this often
IDLE_WAKE_S = 5.0  # the publisher looks at the outbox at least this often

#: The scoreboard (roads.md section 7): the seq it reflects (cheap), and its body.
Roads = tuple[Callable[[], int], Callable[[], dict[str, Any]]]


class Publisher:
    def __init__(self, root: str, outbox: Outbox, status: TableStatus,
                 props: Properties | None, publish_timeout_s: float,
                 state: Callable[[], dict[str, Any]],
                 retained: dict[str, Callable[[], dict[str, Any]]],
                 alive: Callable[[], None], stopping: Callable[[], bool],
                 roads: Roads | None = None,
                 state_seq: Callable[[], int] | None = None) -> None:
        self.root = root
        self.outbox = outbox
        self.status = status
        self._props = props  # every publish under MQTT 5 carries them (made once)
        self.publish_timeout_s = publish_timeout_s
        self.state = state
        # The seq the snapshot would carry (cheap): the snapshot is built only when it moved.
        self.state_seq = state_seq
        self.retained = retained  # leaf under {root} -> its body, republished on change
        self.roads = roads
        self._alive = alive  # a sign of life for the watchdog (MqttService.progress)
        self.stopping = stopping  # the daemon stops: farewell has the last word on status
        self._state_seq: int | None = None
        self._roads_seq: int | None = None
        self._outbox_wake = Wakeup()
        self._status_wake = Wakeup()
        self._live_quiet = asyncio.Event()  # the publisher has nothing to send or in flight
        # The publisher's window while it waits idle with nothing in flight (else None),
        # and the event _outbox_ready sent meanwhile, its PUBACK not yet counted.
        self._idle_live: PublishWindow | None = None
        self._early: int | None = None
        self._early_at = 0.0  # time.monotonic() it was sent
        outbox.on_ready = self._outbox_ready
        status.on_change(self._status_wake.set)

    async def live_idle(self) -> None:
        """Returns once the live publisher has nothing to send and no event in flight
        (a retained snapshot may still await its PUBACK; a replay gives way to it
        before each replayed event)."""
        while not self._live_quiet.is_set() or self.outbox.fresh:
            self._live_quiet.clear()
            await self._live_quiet.wait()

    def _outbox_ready(self) -> None:
        """Events were applied. When the publisher waits idle with nothing in flight and
        the first of them follows the last published, it goes out now, from here (the
        tty's callback or a command's step, after the input is durable), not on the
        loop's next turn: the publisher is woken by its PUBACK or the connection's loss
        (:meth:`_idle`). Otherwise, or when it cannot be sent here, the publisher is woken
        to take the events as always."""
        live, outbox = self._idle_live, self.outbox
        if live is not None:
            self._idle_live = None
            fresh = outbox.fresh
            if fresh and fresh[0][0] == outbox.last_published + 1:
                seq, body = fresh[0]
                try:
                    sent = live.send_now(f"{self.root}/events", body, self._props)
                except Exception:  # nothing sent (not connected, too large): the
                    sent = False  # publisher sends it and reports what is wrong
                if sent:
                    del fresh[0]
                    self._early, self._early_at = seq, time.monotonic()
                    self._live_quiet.clear()
                    live.notify = self._outbox_wake.set
                    return
        self._outbox_wake.set()

    async def _idle(self, live: PublishWindow) -> None:
        """The publisher has nothing to send: wait for events (at most IDLE_WAKE_S, and
        never longer than publish_timeout_s, which an event sent meanwhile is held to)."""
        timeout = self.publish_timeout_s
        self._idle_live = live
        try:
            woken = await self._outbox_wake.wait(min(IDLE_WAKE_S, timeout))
        finally:
            self._idle_live = None
        early, self._early = self._early, None
        if early is not None:
            live.notify = None
            # Its PUBACK (usually here already), else the connection is counted as
            # broken publish_timeout_s after the send: nothing is marked then, and the
            # next connection's publisher sends it again from the journal.
            await live.drain(max(0.0, timeout - (time.monotonic() - self._early_at)))
            self.outbox.acked(early)
            self.status.last_publish = self.outbox.last_publish
        elif not woken:
            # idle: a retained snapshot still awaiting its PUBACK gets it now, or the
            # connection is counted as broken (publish_timeout_s), as when it was
            # awaited at once
            await live.drain()

    async def run(self, client: aiomqtt.Client) -> None:
        """The publisher of one connection (a part of MqttService._connected)."""
        outbox, topic = self.outbox, f"{self.root}/events"
        # One at a time, each after the PUBACK of the one before (module docstring).
        live = PublishWindow(client, 1, self.publish_timeout_s)
        props = self._props
        self._early = None  # one sent on the last connection is sent again (take())
        self._live_quiet.clear()  # a replay waits for this connection's backlog to go out
        while True:
            self._outbox_wake.clear()
            rows = outbox.take()
            if not rows:
                await self._publish_state(client, live)
                self._alive()
                if not outbox.fresh:
                    self._live_quiet.set()
                await self._idle(live)
                self._live_quiet.clear()
                continue
            last: int | None = None
            try:
                for seq, body in rows:
                    await live.publish(topic, body, props)
                    last = seq
            finally:
                # Mark what got its PUBACK, also when the connection broke mid-batch.
                if last is not None:
                    outbox.acked(last)
                    self.status.last_publish = outbox.last_publish
            await self._publish_state(client, live)

    def _reflected(self, seq: int | None) -> bool:
        """Every event up to `seq` has its PUBACK (a snapshot never goes before its events,
        mqtt-api.md section 1: after a reconnect with a backlog it waits for the publisher)."""
        outbox = self.outbox
        return seq is None or seq <= outbox.acked_seq or outbox.depth() == 0

    async def _publish_state(self, client: aiomqtt.Client,
                             live: PublishWindow | None = None) -> None:
        """The retained snapshots (`state`, `roads`) once they changed, after the events
        they reflect were published (the publisher calls this after each batch, with its
        window `live`; the window takes one sender at a time, so nobody else passes it)."""
        moved = self.state_seq() if self.state_seq is not None else None
        if moved is None or moved != self._state_seq:  # the snapshot is built only then
            state = self.state()
            if state.get("seq") != self._state_seq and self._reflected(state.get("seq")):
                await self._send_retained(client, "state", to_json(state), live)
                self._state_seq = state.get("seq")
        if self.roads is not None:
            roads_seq, roads_body = self.roads
            moved = roads_seq()
            if moved != self._roads_seq and self._reflected(moved):
                board = roads_body()
                await self._send_retained(client, "roads", to_json(board), live)
                self._roads_seq = board["seq"]

    async def _send_retained(self, client: aiomqtt.Client, leaf: str, body: str | bytes,
                             live: PublishWindow | None) -> None:
        if live is not None:
            # Handed to paho, its PUBACK not awaited here: the window's next send waits
            # for it (a snapshot follows its events, and the next event follows it),
            # and the publisher is not woken only to learn that it came.
            await live.send(f"{self.root}/{leaf}", body, self._props, retain=True)
        else:
            await publish_once(client, f"{self.root}/{leaf}", body, self._props,
                               self.publish_timeout_s, retain=True)

    async def _publish_status_topics(self, client: aiomqtt.Client) -> None:
        """The retained topics that are not snapshots of the stream (`status`, `device`).
        None once stopping: farewell's `{"online": false, ...}` is the last word on `status`
        (a republish due meanwhile, the 2-s one or the 30-s one, came after it and left
        a stopped daemon `online: true`)."""
        for leaf, body in self.retained.items():
            if self.stopping():
                return
            await self._send_retained(client, leaf, json.dumps(body()), None)

    def status_soon(self) -> None:
        """Republish the status topics now (refresh's next turn), as on a change."""
        self._status_wake.set()

    async def publish_retained(self, client: aiomqtt.Client) -> None:
        await self._publish_status_topics(client)
        self._state_seq = self._roads_seq = None
        await self._publish_state(client)

    async def republish_soon(self, client: aiomqtt.Client) -> None:
        """Once, shortly after connect: in case the broker lost its retained messages."""
        await asyncio.sleep(RETAINED_REFRESH_S)
        await self.publish_retained(client)

    async def refresh(self, client: aiomqtt.Client) -> None:
        """Republish the retained topics whenever the status changes (and every 30 s)."""
        while True:
            self._status_wake.clear()
            await self._status_wake.wait(RETAINED_EVERY_S)
            await self._publish_status_topics(client)
            self._alive()

"""QoS 1 publishes with several awaiting their PUBACK, without a task or a future each.

A `replay` page re-sends thousands of events; through aiomqtt's ``publish`` each one is a
coroutine in its own task, awaiting its own future: most of the replay's CPU (about 5 000
events/s on the table PC, docs/performance.md). :class:`PublishWindow` hands the packet to
paho directly and counts PUBACKs in paho's ``on_publish`` (wrapped, aiomqtt's own still
runs): one future for the sender to wait on when the window is full or at the end. The
live publisher uses one of size 1 (send, then drain): no ``asyncio.wait_for`` per
message, which aiomqtt's ``publish`` pays twice a card.

The packets leave in call order and the broker answers in that order; nothing here marks
anything done (the live publisher marks the outbox after each drain, in seq order), so
the order of PUBACKs only matters for knowing that all came. One sender per window: a
second one waiting at once is not supported (a second window is). A connection that
drops, or no PUBACK for `timeout` seconds while some are awaited, raises BrokerError in
the sender.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiomqtt
from paho.mqtt.client import MQTT_ERR_SUCCESS
from paho.mqtt.properties import Properties

from shoed.errors import BrokerError


class PublishWindow:
    """`size` QoS 1 messages awaiting their PUBACK at most, on one client; close() it when
    done. Several windows may share a client (the live publisher's and a replay's on the
    daemon's connection): paho's callbacks are wrapped once per client, and each window
    counts only the mids it sent."""

    def __init__(self, client: aiomqtt.Client, size: int, timeout: float) -> None:
        # aiomqtt documents no way to this; paho's callbacks are public (decisions.md 30).
        self._paho = client._client
        self.size = size
        self.timeout = timeout
        self._awaited: set[int] = set()  # mids sent, PUBACK not yet received
        self._waiter: asyncio.Future[None] | None = None
        self._lost: str | None = None
        self._windows = _windows_of(self._paho)
        self._windows.add(self)

    def close(self) -> None:
        """No more messages through this window (its client's callbacks forget it)."""
        self._windows.discard(self)

    def _acked(self, mid: int) -> None:
        if mid in self._awaited:
            self._awaited.discard(mid)
            self._wake()

    def _connection_lost(self, why: str) -> None:
        self._lost = f"the connection was lost ({why})"
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done() and (
                len(self._awaited) < self.size or self._lost is not None):
            waiter.set_result(None)

    async def send(self, topic: str, payload: str | bytes, properties: Properties | None,
                   retain: bool = False) -> None:
        """Hand one QoS 1 message to paho, once fewer than `size` await their PUBACK."""
        if len(self._awaited) >= self.size or self._lost is not None:
            await self._wait_below(self.size)
        info = self._paho.publish(topic, payload, 1, retain, properties)
        if info.rc != MQTT_ERR_SUCCESS:
            raise BrokerError(f"could not publish on {topic}: paho rc {info.rc}")
        if not info.is_published():
            self._awaited.add(info.mid)

    async def publish(self, topic: str, payload: str | bytes, properties: Properties | None,
                      retain: bool = False) -> None:
        """One message, returning once it has its PUBACK (a window of one's use)."""
        await self.send(topic, payload, properties, retain)
        await self.drain()

    async def drain(self) -> None:
        """Returns once every message sent has its PUBACK."""
        await self._wait_below(1)

    async def _wait_below(self, limit: int) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self._lost is not None:
                raise BrokerError(self._lost)
            if len(self._awaited) < limit:
                return
            awaited = len(self._awaited)
            waiter = self._waiter = loop.create_future()
            handle = loop.call_later(self.timeout, _resolve, waiter)
            try:
                await waiter
            finally:
                handle.cancel()
                self._waiter = None
            if self._lost is None and len(self._awaited) >= awaited:
                raise BrokerError(f"no PUBACK within {self.timeout:g} s "
                                  f"({awaited} messages awaiting one)")


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _windows_of(paho: Any) -> set[PublishWindow]:
    """The windows open on a paho client; its on_publish and on_disconnect are wrapped
    once, the first time (aiomqtt's own callbacks still run after them)."""
    windows: set[PublishWindow] | None = getattr(paho, "_shoed_windows", None)
    if windows is not None:
        return windows
    opened: set[PublishWindow] = set()
    paho._shoed_windows = opened
    inner_publish: Any = paho.on_publish
    inner_disconnect: Any = paho.on_disconnect

    def on_publish(c: Any, userdata: Any, mid: int, *rest: Any) -> None:
        for window in tuple(opened):
            window._acked(mid)
        inner_publish(c, userdata, mid, *rest)

    def on_disconnect(c: Any, userdata: Any, *rest: Any) -> None:
        why = str(rest[1] if len(rest) > 1 else rest)
        for window in tuple(opened):
            window._connection_lost(why)
        inner_disconnect(c, userdata, *rest)

    paho.on_publish = on_publish
    paho.on_disconnect = on_disconnect
    return opened

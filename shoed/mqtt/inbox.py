"""The command side of the MQTT connection: the listener and the replay senders.

Commands arrive on `{root}/cmd` (sender `anonymous`) and `{root}/cmd/by/{user}` (the
sender is the broker user: the ACL lets each user write only their own topic); each is
handed to the desk with what the broker said about it (retained, MQTT 5 expiry left, how
long it waited inside the daemon) and answered on the sender's own answer topic (or the
MQTT 5 response topic within it, with the correlation data). A command is acknowledged to
the broker (manual PUBACK) only once answered, so one in the daemon's hands when the
connection or the daemon stops is delivered again. A `replay` page goes out from its own
task, a few events in flight, so live events interleave with it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from shoed.core.commands import ANONYMOUS
from shoed.desk import Answer, CommandDesk, Incoming, ReplayPage

REPLAY_WINDOW = 4  # replayed events in flight per replay: a live event waits behind few
REPLAYS_AT_ONCE = 2  # replays re-sent at the same time; more wait their turn
#: Awaited before each command is handled (empty in the product; the tests put a delay
#: here to make a command wait inside the daemon, as a busy daemon would).
LISTENER_HOOKS: list[Callable[[], Awaitable[None]]] = []


class StampedQueue(asyncio.Queue[aiomqtt.Message]):
    """aiomqtt's incoming queue, noting when each message reached the daemon (the time a
    command then waits inside it counts against its MQTT 5 message expiry)."""

    def put_nowait(self, item: aiomqtt.Message) -> None:
        item.arrived = time.monotonic()  # type: ignore[attr-defined]
        super().put_nowait(item)


def publish_properties(content_type: str = "application/json",
                       correlation: bytes | None = None) -> Properties:
    props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    props.ContentType = content_type
    props.PayloadFormatIndicator = 1  # UTF-8 text
    if correlation is not None:
        props.CorrelationData = correlation
    return props


class Inbox:
    def __init__(self, root: str, desk: CommandDesk, props: Properties | None, log: Any,
                 alive: Callable[[], None]) -> None:
        self.root = root
        self.desk = desk
        self.v5 = props is not None
        self._props = props  # made once, on everything published under MQTT 5
        self.log = log
        self._alive = alive
        self._replays: set[asyncio.Task[None]] = set()
        self._replay_turns = asyncio.Semaphore(REPLAYS_AT_ONCE)

    def take_replays(self) -> set[asyncio.Task[None]]:
        """The replays in flight (the connection ends: the caller cancels them)."""
        replays, self._replays = self._replays, set()
        return replays

    def sender_of(self, topic: str) -> str | None:
        """The command topic's sender: a user of `cmd/by/{user}`, anonymous on `cmd`."""
        if topic == f"{self.root}/cmd":
            return ANONYMOUS
        prefix = f"{self.root}/cmd/by/"
        user = topic[len(prefix):] if topic.startswith(prefix) else ""
        # A broker user named "anonymous" would take the bare topic's role: never.
        if user and "/" not in user and user != ANONYMOUS:
            return user
        return None

    def answer_topic(self, sender: str, asked: str | None) -> str:
        """Where an answer goes: the sender's own answer topic, or the MQTT 5 response
        topic the client set when it lies within that topic (anything else would let a
        client make the daemon publish, say, a fake event under its root)."""
        own = f"{self.root}/cmd/response" + ("" if sender == ANONYMOUS else f"/{sender}")
        if asked and (asked == own or (sender != ANONYMOUS and asked.startswith(own + "/"))):
            return asked
        return own

    async def listen(self, client: aiomqtt.Client) -> None:
        loop = asyncio.get_running_loop()
        async for message in client.messages:
            sender = self.sender_of(str(message.topic))
            if sender is None:
                self.log.error("command_topic_refused", topic=str(message.topic),
                               action="not answered: rename the broker user")
                self._ack(client, message)
                continue
            for hook in LISTENER_HOOKS:
                await hook()
            payload = message.payload if isinstance(message.payload, bytes | str) else b""
            props = message.properties
            expiry = getattr(props, "MessageExpiryInterval", None) if self.v5 else None
            arrived = getattr(message, "arrived", None)
            waited = max(0.0, time.monotonic() - arrived) if arrived is not None else 0.0
            answer = self.desk.handle(Incoming(payload, sender, bool(message.retain),
                                               float(expiry) if expiry is not None else None,
                                               waited))
            asked = getattr(props, "ResponseTopic", None) if self.v5 else None
            correlation = getattr(props, "CorrelationData", None) if self.v5 else None
            topic = self.answer_topic(sender, asked)
            if asked and topic != asked:
                self.log.warning("response_topic_refused", sender=sender, asked=asked,
                                 used=topic)
            answer_props = self._props if correlation is None or not self.v5 else \
                publish_properties(correlation=bytes(correlation))
            if answer.replay is not None and answer.body is not None:
                task = loop.create_task(self._send_replay(client, answer, topic, answer_props,
                                                          message), name="mqtt.replay")
                self._replays.add(task)
                task.add_done_callback(self._replay_done)
                continue
            if answer.body is not None:
                await client.publish(topic, json.dumps(answer.body), qos=1,
                                     properties=answer_props)
            self._ack(client, message)
            self._alive()

    def _ack(self, client: aiomqtt.Client, message: aiomqtt.Message) -> None:
        if message.qos > 0:
            client._client.ack(message.mid, message.qos)

    async def _send_replay(self, client: aiomqtt.Client, answer: Answer, topic: str,
                           props: Properties | None, message: aiomqtt.Message) -> None:
        """A replay's events on `{root}/replay`, then its answer: from their own task, a
        few in flight at a time, so the live publisher's events interleave with them."""
        page: ReplayPage | None = answer.replay
        assert page is not None
        async with self._replay_turns:
            for chunk in self.desk.replay_chunks(page):
                for start in range(0, len(chunk), REPLAY_WINDOW):
                    await asyncio.gather(*(
                        client.publish(f"{self.root}/replay", body, qos=1,
                                       properties=self._props)
                        for body in chunk[start:start + REPLAY_WINDOW]))
        await client.publish(topic, json.dumps(answer.body), qos=1, properties=props)
        self._ack(client, message)

    def _replay_done(self, task: asyncio.Task[None]) -> None:
        self._replays.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            self.log.error("replay_failed", error=f"{type(error).__name__}: {error}")

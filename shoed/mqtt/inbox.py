"""The command side of the MQTT connection: the listener and the replay senders.

Commands arrive on `{root}/cmd` (sender `anonymous`) and `{root}/cmd/by/{user}` (the
sender is the broker user: the ACL lets each user write only their own topic); each is
handed to the desk with what the broker said about it (retained, MQTT 5 expiry left, how
long it waited inside the daemon) and answered on the sender's own answer topic (or the
MQTT 5 response topic within it, with the correlation data). A command is acknowledged to
the broker (manual PUBACK) only once answered, so one in the daemon's hands when the
connection or the daemon stops is delivered again.

A `replay` page goes out from its own task on a connection of its own (client id
`<client_id>-replay-<random>`, a clean session, no will), REPLAY_IN_FLIGHT events
awaiting their PUBACK at a time, and gives way to the live publisher: before each
replayed event it waits until the publisher has nothing to send and nothing in flight.
On its own connection the broker's PUBACKs for the replay never hold the live event's
(a broker without TCP_NODELAY, Mosquitto's default, sends a second small packet only
once the first is acknowledged: up to 40 ms). Its answer goes on the daemon's own
connection once every replayed event has its PUBACK. When the replay connection cannot
be made, the page goes out on the daemon's connection, REPLAY_WINDOW at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from shoed.core.commands import ANONYMOUS
from shoed.desk import (
    RESPONSE_PROPERTIES_MAX,
    Answer,
    CommandDesk,
    Incoming,
    ReplayPage,
    refusal,
)
from shoed.errors import PublishRefused
from shoed.mqtt.reads import read_buffered
from shoed.mqtt.window import PublishWindow, publish_once
from shoed.mqtt.writes import ack_at_once

REPLAY_IN_FLIGHT = 32  # replayed events awaiting PUBACK at once, on the replay connection
REPLAY_WINDOW = 4  # the same on the daemon's own connection (no replay connection)
REPLAY_YIELD_EVERY = 8  # replayed events handed over between two turns of the loop
# At most this many replayed events a second: unpaced, a replay ran at ~32 000 events/s
# on the table PC and took the CPU (the daemon's and the broker's) from the cards dealt
# meanwhile (their card-to-event p99 2-6x); paced, a card keeps its time
# (docs/performance.md, "A big replay").
REPLAY_EVENTS_PER_S = 15_000
REPLAY_BURST_S = 0.05  # time spent waiting (for live events, PUBACKs) is not saved up past this
REPLAYS_AT_ONCE = 2  # replays re-sent at the same time; more wait their turn
# An answer sent again after the connection was lost on it: larger, it goes as too_large
# (MQTT 3.1.1 brokers' limits are not known to the daemon; Mosquitto's smallest in use
# here is 64 KiB)
UNDELIVERED_ANSWER_MAX = 16 * 1024
#: Awaited before each command is handled (empty in the product; the tests put a delay
#: here to make a command wait inside the daemon, as a busy daemon would).
LISTENER_HOOKS: list[Callable[[], Awaitable[None]]] = []


async def _ignored(payload: bytes | str) -> None:
    """`Inbox.on_status` until the MQTT service sets its own."""


def replay_pace(started: float, sent: int, now: float, rate: float,
                burst: float) -> tuple[float, float]:
    """A replay's pace after `sent` events: the time it is paced from, and how long to
    wait now (negative: it is behind). At most `rate` events a second from `started`;
    time it lost (waiting for live events or PUBACKs) is made up at most `burst`
    seconds' worth at once: `started` moves up so that it is never further behind."""
    due = sent / rate
    started = max(started, now - due - burst)
    return started, started + due - now


class StampedQueue(asyncio.Queue[aiomqtt.Message]):
    """aiomqtt's incoming queue, noting when each message reached the daemon (the time a
    command then waits inside it counts against its MQTT 5 message expiry)."""

    def put_nowait(self, item: aiomqtt.Message) -> None:
        item.arrived = time.monotonic()  # type: ignore[attr-defined]
        super().put_nowait(item)


class PackedOnce(Properties):
    """PUBLISH properties that do not change once made: paho packs properties for every
    publish (a walk of all 40 property names, 0.1 ms under the profiler, twice a card);
    these are packed on the first and the bytes reused."""

    def pack(self) -> bytes:
        packed: bytes | None = self.__dict__.get("_packed")
        if packed is None:
            packed = bytes(super().pack())  # type: ignore[no-untyped-call]
            object.__setattr__(self, "_packed", packed)
        return packed


def publish_properties(content_type: str = "application/json",
                       correlation: bytes | None = None,
                       packet_type: int = PacketTypes.PUBLISH) -> Properties:
    """The properties of what the daemon publishes under MQTT 5 (set once, then packed
    once: do not change them after the first publish); `packet_type`
    PacketTypes.WILLMESSAGE for its will."""
    props = PackedOnce(packet_type)  # type: ignore[no-untyped-call]
    props.ContentType = content_type
    props.PayloadFormatIndicator = 1  # UTF-8 text
    if correlation is not None:
        props.CorrelationData = correlation
    return props


class Inbox:
    def __init__(self, root: str, desk: CommandDesk, props: Properties | None, log: Any,
                 alive: Callable[[], None],
                 replay_client: Callable[[], aiomqtt.Client] | None = None,
                 live_idle: Callable[[], Awaitable[None]] | None = None,
                 publish_timeout: float = 5.0) -> None:
        self.root = root
        self.desk = desk
        self.v5 = props is not None
        self._props = props  # made once, on everything published under MQTT 5
        self.log = log
        self._alive = alive
        self._replays: set[asyncio.Task[None]] = set()
        self._replaying: set[tuple[str, str]] = set()  # (sender, request_id) being sent
        # (sender, payload) of commands whose answer was being published when the
        # connection was lost: how many times (_delivery)
        self._undelivered: dict[tuple[str, bytes | str], int] = {}
        # The daemon is stopping: commands that still arrive are neither handled nor
        # acknowledged (the broker keeps them in the session for the next start).
        self.stopping = False
        self._replay_turns = asyncio.Semaphore(REPLAYS_AT_ONCE)
        self._replay_client = replay_client  # a connection of the replay's own
        self._live_idle = live_idle  # returns once the live publisher is idle
        self.publish_timeout = publish_timeout  # no PUBACK for this long: the replay fails
        # `{root}/status` as the connection sees it (the root's watch, MqttService): it
        # may raise (RootTaken), which ends the connection.
        self.on_status: Callable[[bytes | str], Awaitable[None]] = _ignored

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
        # Not a topic name a PUBLISH may carry (a wildcard, NUL): the broker would drop
        # the daemon's connection on it (outside review: a table taken offline for good).
        if asked and any(c in asked for c in "+#\x00"):
            return own
        if asked and (asked == own or (sender != ANONYMOUS and asked.startswith(own + "/"))):
            return asked
        return own

    async def listen(self, client: aiomqtt.Client) -> None:
        loop = asyncio.get_running_loop()
        async for message in client.messages:
            if self.stopping:
                continue
            topic = str(message.topic)
            if topic == f"{self.root}/status":
                self._ack(client, message)
                await self.on_status(message.payload
                                     if isinstance(message.payload, bytes | str) else b"")
                continue
            sender = self.sender_of(topic)
            if sender is None:
                self.log.error("command_topic_refused", topic=str(message.topic),
                               action="not answered: rename the broker user")
                self._ack(client, message)
                continue
            for hook in LISTENER_HOOKS:
                await hook()
            if self.stopping:
                continue
            payload = message.payload if isinstance(message.payload, bytes | str) else b""
            props = message.properties
            expiry = getattr(props, "MessageExpiryInterval", None) if self.v5 else None
            arrived = getattr(message, "arrived", None)
            waited = max(0.0, time.monotonic() - arrived) if arrived is not None else 0.0
            asked = getattr(props, "ResponseTopic", None) if self.v5 else None
            correlation = getattr(props, "CorrelationData", None) if self.v5 else None
            # What the answer would carry: a response topic only where it is honoured.
            size = len(asked.encode()) if asked and self.answer_topic(sender, asked) == asked \
                else 0
            size += len(correlation) if correlation is not None else 0
            answer = self.desk.handle(Incoming(
                payload, sender, bool(message.retain),
                float(expiry) if expiry is not None else None, waited, size))
            if size > RESPONSE_PROPERTIES_MAX:
                asked = correlation = None  # the answer goes without them (desk.py)
            topic = self.answer_topic(sender, asked)
            if asked and topic != asked:
                self.log.warning("response_topic_refused", sender=sender, asked=asked,
                                 used=topic)
            answer_props = self._props if correlation is None or not self.v5 else \
                publish_properties(correlation=bytes(correlation))
            if answer.replay is not None and answer.body is not None:
                key = (sender, str(answer.body.get("request_id")))
                if key in self._replaying:
                    # The same replay, asked again while its page is still going out (a
                    # feed asks again after 5 s without an answer): that send answers it.
                    self._ack(client, message)
                    continue
                self._replaying.add(key)
                task = loop.create_task(self._send_replay(client, answer, topic, answer_props,
                                                          message), name="mqtt.replay")
                self._replays.add(task)
                task.add_done_callback(self._replay_done)
                task.add_done_callback(functools.partial(self._replay_ended, key))
                continue
            if answer.body is not None:
                delivery = self._delivery(sender, payload, answer.body, topic, answer_props)
                if delivery is None:  # twice the connection was lost on its answer
                    self._ack(client, message)
                    continue
                tried = (sender, payload)
                self._undelivered[tried] = self._undelivered.get(tried, 0) + 1
                await self._answer(client, *delivery)
                self._undelivered.pop(tried, None)
            self._ack(client, message)
            self._alive()

    def _delivery(self, sender: str, payload: bytes | str, body: dict[str, Any], topic: str,
                  props: Properties | None
                  ) -> tuple[str, dict[str, Any], Properties | None] | None:
        """Where and what to answer. A command is acknowledged only once answered, so an
        answer the broker will not take (it drops the connection: a packet over its limit
        that an MQTT 3.1.1 daemon cannot know) would have the command delivered again and
        again, and the table offline (outside review). Once the connection was lost on a
        command's answer, the next delivery answers on the sender's own answer topic,
        an answer over UNDELIVERED_ANSWER_MAX bytes replaced by `too_large`; after a
        second loss the command is acknowledged unanswered (logged at error; it was
        handled, and a repeat of it gets its answer from the journal)."""
        tries = self._undelivered.get((sender, payload), 0)
        if tries == 0:
            return topic, body, props
        request_id = body.get("request_id")
        if tries >= 2:
            self.log.error("answer_undeliverable", sender=sender, request_id=request_id,
                           command=body.get("command"),
                           action="acknowledged unanswered: the broker dropped the "
                                  "connection on its answer twice (its packet size limit? "
                                  "[commands] max_packet_size under MQTT 3.1.1)")
            self._undelivered.pop((sender, payload), None)
            return None
        size = len(json.dumps(body).encode())
        if size > UNDELIVERED_ANSWER_MAX:
            body = refusal(request_id, "too_large",
                           f"the answer ({size} bytes) was not delivered: the broker "
                           f"dropped the connection on it; ask for less (a recall of fewer "
                           f"hands), or set [commands] max_packet_size to the broker's "
                           f"limit (MQTT 3.1.1)", body.get("command"), sender)
        self.log.warning("answer_after_a_lost_connection", sender=sender,
                         request_id=request_id, bytes=size,
                         action="answered on the sender's own topic" + (
                             ", as too_large" if size > UNDELIVERED_ANSWER_MAX else ""))
        return self.answer_topic(sender, None), body, self._props

    async def _answer(self, client: aiomqtt.Client, topic: str, body: Any,
                      props: Properties | None) -> None:
        """An answer, once it has its PUBACK. One the broker refuses (its ACL does not let
        the table write `topic`) is logged, and the command is acknowledged all the
        same: it is journalled and answered, and sent again it would be refused again."""
        try:
            await publish_once(client, topic, json.dumps(body), props, self.publish_timeout)
        except PublishRefused as error:
            self.log.error("answer_refused", topic=topic, reason=error.reason,
                           code=f"0x{error.code:02X}",
                           request_id=body.get("request_id") if isinstance(body, dict)
                           else None,
                           action="not answered: let the table's broker user write "
                                  "the answer topic")

    def _ack(self, client: aiomqtt.Client, message: aiomqtt.Message) -> None:
        if message.qos > 0:
            client._client.ack(message.mid, message.qos)

    async def _send_replay(self, client: aiomqtt.Client, answer: Answer, topic: str,
                           props: Properties | None, message: aiomqtt.Message) -> None:
        """A replay's events on `{root}/replay`, then its answer (module docstring)."""
        page: ReplayPage | None = answer.replay
        assert page is not None
        body = answer.body or {}
        async with self._replay_turns:
            started = time.monotonic()
            own = await self._open_replay_connection()
            try:
                if own is not None:
                    sent = await self._stream(own, page, REPLAY_IN_FLIGHT)
                else:
                    sent = await self._stream(client, page, REPLAY_WINDOW)
            except Exception as error:  # any: a command is never left unanswered
                # Answered and acknowledged all the same (outside review: unanswered and
                # never acknowledged, failed replays filled the broker's window of
                # unacknowledged commands, and the daemon got no command at all). A
                # lost connection of the daemon's own fails the answer too: then the
                # command is not acknowledged, and the broker delivers it again.
                why = f"{type(error).__name__}: {error}" if str(error) else repr(error)
                self.log.error("replay_failed", request_id=body.get("request_id"),
                               error=why, from_seq=page.from_seq, to_seq=page.to_seq,
                               action="answered replay_failed" + (
                                   f": let the table's broker user write {self.root}/replay"
                                   if isinstance(error, PublishRefused) else ""))
                body = refusal(body.get("request_id"), "replay_failed",
                               f"the events {page.from_seq}..{page.to_seq} could not all be "
                               f"re-sent on {self.root}/replay ({why}); nothing is lost: "
                               "ask again (the same request_id re-sends the page)",
                               "replay", str(body.get("authenticated_as", ANONYMOUS)))
            else:
                took = time.monotonic() - started
                self.log.info("replay_sent", request_id=body.get("request_id"), events=sent,
                              connection="own" if own is not None else "shared",
                              took_s=round(took, 3),
                              events_per_s=round(sent / took) if took else None)
            finally:
                if own is not None:
                    with contextlib.suppress(Exception):
                        await own.__aexit__(None, None, None)
        await self._answer(client, topic, body, props)
        self._ack(client, message)

    async def _open_replay_connection(self) -> aiomqtt.Client | None:
        if self._replay_client is None:
            return None
        own = self._replay_client()
        try:
            await own.__aenter__()
        except (aiomqtt.MqttError, OSError) as error:
            self.log.warning("replay_connection_failed", error=str(error) or repr(error),
                             action=f"replayed on the daemon's connection, {REPLAY_WINDOW} "
                                    "in flight")
            return None
        read_buffered(own)  # its PUBACKs come back to back: read together
        ack_at_once(own)  # and none waits for our delayed ACK
        return own

    async def _stream(self, via: aiomqtt.Client, page: ReplayPage, in_flight: int) -> int:
        """The page's events in seq order, `in_flight` awaiting their PUBACK, each only
        once the live publisher is idle, a loop turn every REPLAY_YIELD_EVERY events (a
        card's frame that came in meanwhile is handled then), at most
        REPLAY_EVENTS_PER_S; returns how many once all
        have their PUBACK (raises when the connection is lost or a PUBACK is late)."""
        window = PublishWindow(via, in_flight, self.publish_timeout)
        topic, props, live_idle = f"{self.root}/replay", self._props, self._live_idle
        # time.monotonic(), not loop.time(): uvloop's clock is read once a loop turn, in
        # whole milliseconds, and a turn that sends a burst would see the pace ahead of
        # itself and sleep too long (decisions.md 139)
        started = time.monotonic()
        sent = 0
        try:
            for chunk in self.desk.replay_chunks(page):
                for body in chunk:
                    if live_idle is not None:
                        await live_idle()
                    await window.send(topic, body, props)
                    sent += 1
                    if sent % REPLAY_YIELD_EVERY == 0:
                        # ahead of the pace: wait (whole milliseconds, as the loop
                        # sleeps); else just a turn
                        started, ahead = replay_pace(started, sent, time.monotonic(),
                                                     REPLAY_EVENTS_PER_S, REPLAY_BURST_S)
                        await asyncio.sleep(ahead if ahead >= 0.001 else 0)
            await window.drain()
        finally:
            window.close()
        return sent

    def _replay_ended(self, key: tuple[str, str], task: asyncio.Task[None]) -> None:
        self._replaying.discard(key)

    def _replay_done(self, task: asyncio.Task[None]) -> None:
        self._replays.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            self.log.error("replay_unanswered", error=f"{type(error).__name__}: {error}",
                           action="not acknowledged: the broker delivers it again")

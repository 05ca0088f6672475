"""MqttService: the connection, the publisher, the retained topics (commands: inbox.py).

One connection at a time, reconnected with back-off for as long as the daemon runs. Its
parts (publisher, listener, retained refresher) are tasks watched with ``asyncio.wait``
and cancelled explicitly when one ends: no TaskGroup, no ``asyncio.timeout`` around
them (their cancellation semantics differ between 3.11 patch releases, see shoed.aio),
and a CancelledError that nobody asked for is logged and followed by a reconnect, never
the end of publishing.

The publisher takes from the outbox in seq order and reports every PUBACK
(``outbox.acked(seq)``); an event leaves the outbox only then. One message at a time,
each after the PUBACK of the one before: a batch costs less CPU, but the broker then
answers with PUBACKs back to back, and a broker without TCP_NODELAY (Mosquitto's
default) holds the second until our delayed TCP ACK, up to 40 ms.

An input's first event, when the publisher waits idle with nothing in flight, is sent
by :meth:`MqttService._outbox_ready` from where it was applied (the tty's callback), not
on the loop's next turn; the publisher is woken by its PUBACK (or the connection's loss)
and counts it then, as if it had sent it itself (docs/decisions.md 147).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions
from pydantic_core import to_json

from shoed.aio import Wakeup, cancel_and_wait, clear_stray_cancel, task_names
from shoed.config import Settings
from shoed.desk import CommandDesk
from shoed.errors import BrokerError, NotABroker, PublishRefused
from shoed.mqtt import acks
from shoed.mqtt.brokers import BrokerList
from shoed.mqtt.claim import (
    SESSION_TAKEN_OVER,
    RootClaim,
    RootTaken,
    SessionTakenOver,
    check_root,
    side_connection_args,
)
from shoed.mqtt.inbox import (
    REPLAY_IN_FLIGHT,
    Inbox,
    StampedQueue,
    publish_properties,
)
from shoed.mqtt.reads import read_buffered
from shoed.mqtt.window import PublishWindow, publish_once
from shoed.mqtt.writes import ack_at_once, send_when_queued
from shoed.status import TableStatus
from shoed.store.outbox import Outbox

RETAINED_REFRESH_S = 2.0  # retained topics again this long after a (re)connect
RETAINED_EVERY_S = 30.0  # and at least this often
IDLE_WAKE_S = 5.0  # the publisher looks at the outbox at least this often
CONNECT_TIMEOUT_S = 5.0  # no CONNACK by then: whatever answers is not a usable broker
BACKOFF_S = (0.5, 10.0)  # first and longest wait between connection attempts
CONFLICT_BACKOFF_S = 10.0  # another daemon holds the root: look again this much later
# A broker that closes a connection taken over without saying why: this many closes
# within this window, each of a connection younger than SHORT_CONNECTION_S, mean a
# session taken over (a reconnect storm of two clients with one client id).
TAKEOVER_DROPS = 3
TAKEOVER_WINDOW_S = 30.0
SHORT_CONNECTION_S = 10.0
SESSION_EXPIRY_S = 86400  # the broker keeps our session (and queues commands) this long


class MqttService:
    def __init__(self, settings: Settings, outbox: Outbox, status: TableStatus,
                 desk: CommandDesk, state: Callable[[], dict[str, Any]],
                 retained: dict[str, Callable[[], dict[str, Any]]], log: Any,
                 roads: tuple[Callable[[], int], Callable[[], dict[str, Any]]] | None = None,
                 state_seq: Callable[[], int] | None = None) -> None:
        acks.install()  # plain PUBACKs without paho's per-packet objects (acks.py)
        self.settings = settings
        self.root = settings.topic_root
        self.brokers = BrokerList.of(settings.mqtt.urls)  # mqtt.url: one, or a list
        self.outbox = outbox
        self.status = status
        self.desk = desk
        self.state = state
        # The seq the snapshot would carry (cheap): the snapshot is built only when it moved.
        self.state_seq = state_seq
        self.retained = retained  # leaf under {root} -> its body, republished on change
        # The scoreboard (roads.md section 7): the seq it reflects, and its body.
        self.roads = roads
        self._roads_seq: int | None = None
        self.log = log
        self.claim = RootClaim(desk.recorder, self.root, status.run_id, log)
        self.client: aiomqtt.Client | None = None
        self.connects = 0
        self.progress: float | None = None  # loop time of the latest sign of life
        self.stopping = False
        self._outbox_wake = Wakeup()
        self._status_wake = Wakeup()
        self._state_seq: int | None = None
        self.v5 = settings.mqtt.protocol == "5"
        # Made once: every publish under MQTT 5 carries them (no cost per card).
        self._props: Properties | None = publish_properties() if self.v5 else None
        self._connack: Any = None  # CONNACK properties (MQTT 5)
        self._disconnect_reason: Any = None  # the broker's DISCONNECT reason (MQTT 5)
        # The last connection ended with our session taken over: the conflict is over
        # only once a new connection has held for CONFLICT_BACKOFF_S.
        self._taken_over = False
        self._connected_at: float | None = None  # loop time this connection was made
        self._short_drops: list[float] = []  # loop times of short connections' ends
        self.session_present: bool | None = None
        self._live_quiet = asyncio.Event()  # the publisher has nothing to send or in flight
        # The publisher's window while it waits idle with nothing in flight (else None),
        # and the event _outbox_ready sent meanwhile, its PUBACK not yet counted.
        self._idle_live: PublishWindow | None = None
        self._early: int | None = None
        self._early_at = 0.0  # time.monotonic() it was sent
        self.inbox = Inbox(self.root, desk, self._props, log, self._alive,
                           replay_client=self.replay_client, live_idle=self.live_idle,
                           publish_timeout=settings.mqtt.publish_timeout_s)
        outbox.on_ready = self._outbox_ready
        status.on_change(self._status_wake.set)

    def client_args(self) -> dict[str, Any]:
        mqtt = self.settings.mqtt
        host, port = self.brokers.current.host_port
        args: dict[str, Any] = {
            "hostname": host, "port": port, "keepalive": mqtt.keepalive,
            "identifier": mqtt.client_id or f"shoed-{self.settings.table.id}",
            "protocol": aiomqtt.ProtocolVersion.V5 if mqtt.protocol == "5"
            else aiomqtt.ProtocolVersion.V311,
            "will": aiomqtt.Will(f"{self.root}/status",
                                 json.dumps(self.status.offline_payload()), qos=1, retain=True,
                                 properties=publish_properties(
                                     packet_type=PacketTypes.WILLMESSAGE)
                                 if mqtt.protocol == "5" else None),
            # The CONNACK wait and the other operations without their own timeout.
            "timeout": min(mqtt.publish_timeout_s, CONNECT_TIMEOUT_S),
            # Command answers can go out while an event awaits its PUBACK: without
            # TCP_NODELAY, Nagle would hold one until the broker's TCP ACK (tens of ms).
            "socket_options": [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            # A persistent session: commands sent while the daemon is down or reconnecting
            # are queued by the broker and delivered when it is back (docs/install.md).
            "queue_type": StampedQueue,
        }
        if mqtt.protocol == "5":
            args["clean_start"] = False
            connect = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            connect.SessionExpiryInterval = SESSION_EXPIRY_S
            args["properties"] = connect
        else:
            args["clean_session"] = False
        args.update(mqtt.client_auth())
        return args

    def replay_client(self) -> aiomqtt.Client:
        """A connection for a replay's events (inbox.py): the broker and login of this
        connection, its own client id, a clean session, no will."""
        args = side_connection_args(self.client_args(), f"replay-{secrets.token_hex(4)}")
        args["max_inflight_messages"] = REPLAY_IN_FLIGHT
        return aiomqtt.Client(**args)

    async def live_idle(self) -> None:
        """Returns once the live publisher has nothing to send and no event in flight
        (a retained snapshot may still await its PUBACK; a replay gives way to it
        before each replayed event)."""
        while not self._live_quiet.is_set() or self.outbox.fresh:
            self._live_quiet.clear()
            await self._live_quiet.wait()

    @property
    def url(self) -> str:
        """The broker this connection (or attempt) is on."""
        return self.brokers.current.url

    def _alive(self) -> None:
        self.progress = asyncio.get_running_loop().time()

    # -- the connection loop (a supervised task) ---------------------------------------------

    async def run(self) -> None:
        backoff = BACKOFF_S[0]
        while True:
            self._alive()
            connects = self.connects
            conflicted = refused = False
            try:
                await self._connection()
            except asyncio.CancelledError:
                if self.stopping:
                    raise
                # Nobody asked this task to stop: never let it end publishing.
                stray = clear_stray_cancel()
                self.log.error("mqtt_cancelled_unexpectedly", url=self.url, cancels=stray,
                               action="reconnecting", outbox=self.outbox.depth())
                self.status.set(mqtt_error="connection task cancelled unexpectedly")
            except RootTaken as error:
                conflicted = True
                taken = isinstance(error, SessionTakenOver)
                self._taken_over = self._taken_over or taken
                self.log.error("table_id_conflict", root=self.root, run_id=self.status.run_id,
                               other_run_id=error.other_run_id, retry_in_s=CONFLICT_BACKOFF_S,
                               cause="session_taken_over" if taken else "root_status",
                               client_id=getattr(error, "client_id", None),
                               evidence=getattr(error, "evidence", None),
                               action="not publishing under the root; the shoe is served and "
                               "journalled")
                self.status.set(conflict=str(error), mqtt_error="root taken")
                self.claim.taken(error)  # table_id_conflict raised (journalled, not published)
            except PublishRefused as error:
                refused = True
                self.log.error("mqtt_publish_refused", url=self.url, topic=error.topic,
                               reason=error.reason, code=f"0x{error.code:02X}",
                               retry_in_s=backoff, outbox=self.outbox.depth(),
                               action="nothing refused is marked published: it stays in "
                                      "the journal; let the table's broker user write "
                                      "its topics (ACL, topic_prefix)")
                self.status.set(mqtt_error=str(error))
            except NotABroker as error:
                self.log.error("mqtt_not_a_broker", url=self.url, error=str(error),
                               retry_in_s=backoff)
                self.status.set(mqtt_error=str(error))
            except (aiomqtt.MqttError, BrokerError) as error:
                self.log.warning("mqtt_disconnected", url=self.url, error=str(error),
                                 retry_in_s=backoff, outbox=self.outbox.depth())
                self.status.set(mqtt_error=str(error) or type(error).__name__)
            except (OSError, ssl.SSLError) as error:
                self.log.warning("mqtt_unreachable", url=self.url, error=str(error),
                                 retry_in_s=backoff)
                self.status.set(mqtt_error=str(error))
            finally:
                self.client = None
                self.status.set(mqtt_connected=False, broker_url=None)
            if self.connects > connects and not refused:
                backoff = BACKOFF_S[0]  # it was connected: start the back-off afresh
            # The next broker of the list; wait only after a drop or a whole round failed,
            # and always after a conflict (no reconnect storm).
            if self.brokers.advance(was_connected=self.connects > connects) or conflicted \
                    or refused:
                await asyncio.sleep(CONFLICT_BACKOFF_S if conflicted else backoff)
                if not conflicted:
                    backoff = min(backoff * 2, BACKOFF_S[1])

    async def _connection(self) -> None:
        """One connection, until it breaks (raises)."""
        args = self.client_args()
        try:
            await check_root(args, self.root, self.status.run_id, self.status.online_since,
                             self.status.instance)
            if not self._taken_over:
                self._conflict_over()
            client = aiomqtt.Client(**args)
            self._watch_connack(client)
            await client.__aenter__()
        except aiomqtt.MqttCodeError:
            raise  # a broker that answered and refused (credentials, ACL, protocol)
        except aiomqtt.MqttError as error:
            raise self._not_a_broker(error, args["timeout"]) from error
        try:
            await self._connected(client)
        except PublishRefused:
            raise  # the broker's ACL, not another client: it answered, and said no
        except (aiomqtt.MqttError, BrokerError) as error:
            evidence = self._takeover_evidence()
            if evidence is not None:
                raise SessionTakenOver(self.root, self.status.run_id, args["identifier"],
                                       evidence) from error
            raise
        finally:
            if not self.stopping:
                self._say_offline(client)
            with contextlib.suppress(Exception):
                await client.__aexit__(None, None, None)

    def _say_offline(self, client: aiomqtt.Client) -> None:
        """This connection ends while the daemon runs on (a part failed: no PUBACK in
        time, a cancel nobody asked for). Our DISCONNECT makes the broker drop the will,
        so say what it would have said, before it: QoS 0 (nothing to wait for, no
        in-flight slot), written at once (send_when_queued). On a dead socket this goes
        nowhere, and the broker publishes the will itself."""
        with contextlib.suppress(Exception):
            client._client.publish(f"{self.root}/status",
                                   json.dumps(self.status.offline_payload()), 0, True,
                                   self._props)

    def _takeover_evidence(self) -> str | None:
        """Why a connection that ended was taken over by another client, or None."""
        if getattr(self._disconnect_reason, "value", None) == SESSION_TAKEN_OVER:
            return "the broker said so: MQTT 5 DISCONNECT 0x8E, session taken over"
        now = asyncio.get_running_loop().time()
        if self._connected_at is None or now - self._connected_at >= SHORT_CONNECTION_S:
            return None
        self._short_drops = [t for t in self._short_drops if now - t < TAKEOVER_WINDOW_S]
        self._short_drops.append(now)
        if len(self._short_drops) < TAKEOVER_DROPS:
            return None
        return (f"the broker closed the connection {len(self._short_drops)} times within "
                f"{TAKEOVER_WINDOW_S:g} s, each less than {SHORT_CONNECTION_S:g} s after "
                "it was made")

    def _conflict_over(self) -> None:
        """Alone on the root: `table_id_conflict` cleared (if it was raised)."""
        self.claim.alone()
        if self.status.conflict:
            self.log.warning("table_id_conflict_over", root=self.root,
                             run_id=self.status.run_id)
            self.status.set(conflict=None)

    async def _settle(self) -> None:
        """After a session takeover: alone once this connection held CONFLICT_BACKOFF_S
        (the other client did not take the session back)."""
        if self._taken_over:
            await asyncio.sleep(CONFLICT_BACKOFF_S)
            self._taken_over = False
            self._conflict_over()

    async def _connected(self, client: aiomqtt.Client) -> None:
        send_when_queued(client)  # the event's bytes leave without a loop turn
        read_buffered(client)  # what the broker sent, in one recv(2), not one per byte
        ack_at_once(client)  # the broker's next packet never waits for our delayed ACK
        self._connected_at = asyncio.get_running_loop().time()
        self.client = client
        self.connects += 1
        self.brokers.connected()
        limit = getattr(self._connack, "MaximumPacketSize", None) if self.v5 else None
        self.desk.max_packet = int(limit or self.settings.commands.max_packet_size)
        # Retain As Published: a retained command shows its flag (and is never applied).
        options = SubscribeOptions(qos=1, retainAsPublished=True, retainHandling=1) \
            if self.v5 else None
        for topic in (f"{self.root}/cmd", f"{self.root}/cmd/by/+"):
            if options is not None:
                await client.subscribe(topic, options=options)
            else:
                await client.subscribe(topic, qos=1)
        # Connected means commands are taken: only once the broker has our subscriptions
        # (a new session has none before; a command sent earlier is lost at the broker).
        self.status.set(mqtt_connected=True, mqtt_error=None, broker_url=self.url,
                        online_since=self.status.online_since or time.time())
        self.log.info("mqtt_connected", url=self.url, root=self.root,
                      session_present=self.session_present, max_packet=self.desk.max_packet)
        await self.publish_retained(client)
        parts = {asyncio.create_task(coro, name=f"mqtt.{name}") for name, coro in (
            ("publisher", self._publisher(client)), ("listener", self._listener(client)),
            ("retained", self._retained(client)))}
        # Parts that end by themselves when their work is done.
        once = {asyncio.create_task(self._republish_soon(client), name="mqtt.republish"),
                asyncio.create_task(self._settle(), name="mqtt.settle")}
        pending = parts | once
        try:
            while pending:
                done, pending = await asyncio.wait(pending,
                                                   return_when=asyncio.FIRST_COMPLETED)
                ended = [_outcome(task) for task in done if task not in once or
                         task.cancelled() or task.exception() is not None]
                if ended:
                    raise ended[0]
        finally:
            pending |= self.inbox.take_replays()
            # Cancelled again while they run on: a publish's cancel can be swallowed on
            # 3.11 (shoed.aio.cancel_and_wait), and this connection must still end.
            await cancel_and_wait(pending, on_stuck=self._cancel_repeated)

    def _cancel_repeated(self, tasks: set[asyncio.Future[Any]]) -> None:
        self.log.warning("mqtt_cancel_repeated", url=self.url, tasks=task_names(tasks))

    def _watch_connack(self, client: aiomqtt.Client) -> None:
        """Keep the CONNACK's session-present flag and properties, and the reason of a
        DISCONNECT from the broker (aiomqtt drops them)."""
        paho = client._client
        inner: Any = paho.on_connect
        inner_disconnect: Any = paho.on_disconnect
        self._disconnect_reason = None

        def on_connect(c: Any, userdata: Any, flags: Any, reason: Any,
                       properties: Any = None) -> None:
            self.session_present = bool(getattr(flags, "session_present", False))
            self._connack = properties
            inner(c, userdata, flags, reason, properties)

        def on_disconnect(c: Any, userdata: Any, flags: Any, reason: Any,
                          properties: Any = None) -> None:
            self._disconnect_reason = reason
            inner_disconnect(c, userdata, flags, reason, properties)

        paho.on_connect = on_connect
        paho.on_disconnect = on_disconnect
        # A command is acknowledged to the broker only once answered: one that was in
        # the daemon's hands when it stopped is delivered again (and answered from the
        # (sender, request_id) memory if it had been).
        paho.manual_ack_set(True)

    def _not_a_broker(self, error: aiomqtt.MqttError, timeout: float) -> Exception:
        """What a failed connect means: unreachable (the socket's error), or something
        that is not an MQTT broker (no CONNACK, or bytes that are not MQTT)."""
        text = str(error)
        if text == "timed out":  # the socket's connect (aiomqtt passes its OSError on)
            return BrokerError(f"mqtt.url {self.url}: the connection was not answered in "
                               "time: the host is off or unreachable, or a firewall drops "
                               "it")
        if "timed out" in text:  # aiomqtt's wait for the CONNACK
            return NotABroker(f"mqtt.url {self.url} accepted the connection but sent no "
                              f"MQTT CONNACK within {timeout:g} s: is it an MQTT broker?")
        if text.startswith("[Errno") or "SSL" in text or "certificate" in text:
            return error  # refused, unreachable, TLS: the message says which
        return NotABroker(f"mqtt.url {self.url} did not answer as an MQTT broker: {text}")

    # -- the parts of a connection -------------------------------------------------------

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
        timeout = self.settings.mqtt.publish_timeout_s
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

    async def _publisher(self, client: aiomqtt.Client) -> None:
        outbox, topic = self.outbox, f"{self.root}/events"
        # One at a time, each after the PUBACK of the one before (module docstring).
        live = PublishWindow(client, 1, self.settings.mqtt.publish_timeout_s)
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
                               self.settings.mqtt.publish_timeout_s, retain=True)

    async def _publish_status_topics(self, client: aiomqtt.Client) -> None:
        """The retained topics that are not snapshots of the stream (`status`, `device`).
        None once stopping: farewell's `{"online": false, ...}` is the last word on `status`
        (a republish due meanwhile, the 2-s one or the 30-s one, came after it and left
        a stopped daemon `online: true`)."""
        for leaf, body in self.retained.items():
            if self.stopping:
                return
            await self._send_retained(client, leaf, json.dumps(body()), None)

    async def publish_retained(self, client: aiomqtt.Client) -> None:
        await self._publish_status_topics(client)
        self._state_seq = self._roads_seq = None
        await self._publish_state(client)

    async def _republish_soon(self, client: aiomqtt.Client) -> None:
        """Once, shortly after connect: in case the broker lost its retained messages."""
        await asyncio.sleep(RETAINED_REFRESH_S)
        await self.publish_retained(client)

    async def _retained(self, client: aiomqtt.Client) -> None:
        """Republish the retained topics whenever the status changes (and every 30 s)."""
        while True:
            self._status_wake.clear()
            await self._status_wake.wait(RETAINED_EVERY_S)
            await self._publish_status_topics(client)
            self._alive()

    async def _listener(self, client: aiomqtt.Client) -> None:
        await self.inbox.listen(client)

    # -- stopping -----------------------------------------------------------------------

    async def farewell(self, drain_s: float) -> None:
        """Stopping: let the publisher drain the outbox for up to `drain_s`, then the
        retained offline status (all within publish_timeout_s). What is not published stays
        in the journal for the next start."""
        self.stopping = self.inbox.stopping = True
        loop = asyncio.get_running_loop()
        started = loop.time()
        while self.client is not None and self.outbox.depth() > 0 \
                and loop.time() < started + drain_s:
            await asyncio.sleep(0.02)
        client = self.client
        left = self.settings.mqtt.publish_timeout_s - (loop.time() - started)
        if client is not None:
            with contextlib.suppress(Exception):
                await client.publish(f"{self.root}/status",
                                     json.dumps(self.status.offline_payload()),
                                     qos=1, retain=True, timeout=max(left, 0.1),
                                     properties=self._props)


def _outcome(task: asyncio.Task[None]) -> BaseException:
    """Why a part of the connection ended (its exception is retrieved here)."""
    if task.cancelled():
        return BrokerError(f"{task.get_name()} was cancelled")
    error = task.exception()
    return error if error is not None else BrokerError(f"{task.get_name()} ended")

"""MqttService: the connection (what it sends: publisher.py; commands: inbox.py).

One connection at a time, reconnected with back-off for as long as the daemon runs. Its
parts (publisher, listener, retained refresher) are tasks watched with ``asyncio.wait``
and cancelled explicitly when one ends: no TaskGroup, no ``asyncio.timeout`` around
them (their cancellation semantics differ between 3.11 patch releases, see shoed.aio),
and a CancelledError that nobody asked for is logged and followed by a reconnect, never
the end of publishing. The service also owns the root's claim (claim.py: one daemon
under a root) and the goodbye (`farewell`).
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

from shoed.aio import cancel_and_wait, clear_stray_cancel, task_names
from shoed.config import Settings
from shoed.desk import CommandDesk
from shoed.errors import BrokerError, NotABroker, PublishRefused
from shoed.mqtt import acks
from shoed.mqtt.brokers import BrokerList, connect_failure
from shoed.mqtt.claim import (
    CONFIRM_S,
    RootClaim,
    RootTaken,
    SessionTakenOver,
    StatusesSeen,
    TakeoverWatch,
    check_root,
    side_connection_args,
    status_verdict,
)
from shoed.mqtt.inbox import (
    REPLAY_IN_FLIGHT,
    Inbox,
    StampedQueue,
    publish_properties,
)
from shoed.mqtt.publisher import Publisher, Roads
from shoed.mqtt.reads import read_buffered
from shoed.mqtt.writes import ack_at_once, send_when_queued
from shoed.status import TableStatus
from shoed.store.outbox import Outbox

CONNECT_TIMEOUT_S = 5.0  # no CONNACK by then: whatever answers is not a usable broker
BACKOFF_S = (0.5, 10.0)  # first and longest wait between connection attempts
CONFLICT_BACKOFF_S = 10.0  # another daemon holds the root: look again this much later
SESSION_EXPIRY_S = 86400  # the broker keeps our session (and queues commands) this long


class MqttService:
    def __init__(self, settings: Settings, outbox: Outbox, status: TableStatus,
                 desk: CommandDesk, state: Callable[[], dict[str, Any]],
                 retained: dict[str, Callable[[], dict[str, Any]]], log: Any,
                 roads: Roads | None = None,
                 state_seq: Callable[[], int] | None = None) -> None:
        acks.install()  # plain PUBACKs without paho's per-packet objects (acks.py)
        self.settings = settings
        self.root = settings.topic_root
        self.brokers = BrokerList.of(settings.mqtt.urls)  # mqtt.url: one, or a list
        self.outbox = outbox
        self.status = status
        self.desk = desk
        self.log = log
        self.claim = RootClaim(desk.recorder, self.root, status.run_id, log)
        self.client: aiomqtt.Client | None = None
        self.connects = 0
        self.progress: float | None = None  # loop time of the latest sign of life
        self.stopping = False
        self.v5 = settings.mqtt.protocol == "5"
        # Made once: every publish under MQTT 5 carries them (no cost per card).
        self._props: Properties | None = publish_properties() if self.v5 else None
        self._connack: Any = None  # CONNACK properties (MQTT 5)
        self._disconnect_reason: Any = None  # the broker's DISCONNECT reason (MQTT 5)
        # The last connection ended with our session taken over: the conflict is over
        # only once a new connection has held for CONFLICT_BACKOFF_S.
        self._taken_over = False
        self.takeovers = TakeoverWatch()
        self._answered: set[str] = set()  # broker URLs that sent a CONNACK this run
        self.statuses_seen = StatusesSeen()  # other daemons' status ts, when first seen
        self.session_present: bool | None = None
        self.publisher = Publisher(self.root, outbox, status, self._props,
                                   settings.mqtt.publish_timeout_s, state, retained,
                                   alive=self._alive, stopping=lambda: self.stopping,
                                   roads=roads, state_seq=state_seq)
        self.inbox = Inbox(self.root, desk, self._props, log, self._alive,
                           replay_client=self.replay_client,
                           live_idle=self.publisher.live_idle,
                           publish_timeout=settings.mqtt.publish_timeout_s)
        self.inbox.on_status = self._root_status

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
            # In a conflict, a root without any status is watched before it is taken
            # (a broker that lost its retained messages: the other daemon says so again).
            await check_root(args, self.root, self.status.run_id, self.status.online_since,
                             self.status.instance, seen=self.statuses_seen,
                             confirm_s=CONFIRM_S if self.claim.raised else 0.0,
                             alive=self._alive)
            if not self._taken_over:
                self._conflict_over()
            client = aiomqtt.Client(**args)
            self._watch_connack(client)
            await client.__aenter__()
        except RootTaken:
            raise
        except aiomqtt.MqttCodeError:
            self.takeovers.attempt_failed()
            raise  # a broker that answered and refused (credentials, ACL, protocol)
        except aiomqtt.MqttError as error:
            self.takeovers.attempt_failed()
            raise connect_failure(self.url, error, args["timeout"],
                                  answered_before=self.url in self._answered) from error
        except (OSError, BrokerError):
            self.takeovers.attempt_failed()
            raise
        yielded = False
        try:
            await self._connected(client)
        except PublishRefused:
            raise  # the broker's ACL, not another client: it answered, and said no
        except RootTaken:
            yielded = True  # the root's watch: another daemon keeps it
            raise
        except (aiomqtt.MqttError, BrokerError) as error:
            evidence = self.takeovers.evidence(self._disconnect_reason,
                                               asyncio.get_running_loop().time())
            if evidence is not None:
                raise SessionTakenOver(self.root, self.status.run_id, args["identifier"],
                                       evidence) from error
            raise
        finally:
            if not self.stopping and not yielded:  # the root's status is not ours then
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

    async def _root_status(self, payload: bytes | str) -> None:
        """A status on our root while we hold it: another live daemon online before us
        takes it back (RootTaken ends this connection, without our offline status: the
        root is not ours), once a look at the root's retained status confirms it (a
        status the broker kept queued for this session may be minutes old: outside
        review); one online after us (it found the root empty, a broker that lost its
        retained status) is told by our status, republished now."""
        try:
            body = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            return
        if not isinstance(body, dict):
            return
        status = self.status
        verdict = status_verdict(body, status.run_id, status.online_since, status.instance,
                                 self.statuses_seen, asyncio.get_running_loop().time())
        if verdict == "taken":
            # Raises RootTaken when the root's current status shows the other daemon.
            await check_root(self.client_args(), self.root, status.run_id,
                             status.online_since, status.instance, seen=self.statuses_seen)
            self.log.info("root_claim_not_current", root=self.root,
                          other_run_id=body.get("run_id"),
                          action="the root's retained status shows no other live daemon: "
                                 "this daemon keeps it")
            return
        if verdict == "later":
            self.log.warning("root_claimed_by_a_later_daemon", root=self.root,
                             run_id=status.run_id, other_run_id=body.get("run_id"),
                             action="this daemon keeps the root (online first): its "
                                    "status republished, the other backs off")
            self.publisher.status_soon()

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
        self.takeovers.connected_at = asyncio.get_running_loop().time()
        self.client = client
        self.connects += 1
        self.brokers.connected()
        self._answered.add(self.url)
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
        # The root's watch: another daemon's status while this one holds the root (one
        # that connected while this one was away, behind a broker that lost its retained
        # status: outside review of issue 13). MQTT 5: not our own (no local). QoS 0: the
        # persistent session must not queue the other's statuses while this daemon is
        # off the root (they came back as a flood of stale claims at the next connect).
        if self.v5:
            await client.subscribe(f"{self.root}/status",
                                   options=SubscribeOptions(qos=0, noLocal=True))
        else:
            await client.subscribe(f"{self.root}/status", qos=0)
        # Connected means commands are taken: only once the broker has our subscriptions
        # (a new session has none before; a command sent earlier is lost at the broker).
        self.status.set(mqtt_connected=True, mqtt_error=None, broker_url=self.url,
                        online_since=self.status.online_since or time.time())
        self.log.info("mqtt_connected", url=self.url, root=self.root,
                      session_present=self.session_present, max_packet=self.desk.max_packet)
        publisher = self.publisher
        await publisher.publish_retained(client)
        parts = {asyncio.create_task(coro, name=f"mqtt.{name}") for name, coro in (
            ("publisher", publisher.run(client)), ("listener", self.inbox.listen(client)),
            ("retained", publisher.refresh(client)))}
        # Parts that end by themselves when their work is done.
        once = {asyncio.create_task(publisher.republish_soon(client), name="mqtt.republish"),
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

"""`shoed run`: the link, the engine, the journal and MQTT, wired together.

The order of things for every frame from the shoe (spec section 3, durability rule):
decode -> engine input(s) -> one journal transaction (input, events, dedup state) ->
ACK. For every command: validate -> one transaction (input, events, answer) -> answer.
Events leave the on-disk outbox only after the broker's PUBACK, so a dead broker, a
kill -9 or a noisy line loses nothing and applies nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import ssl
import time
from collections.abc import Callable
from typing import Any

import aiomqtt

from firmware_protocol import (
    Card,
    CardUnread,
    CutCard,
    DedupState,
    Delivered,
    Dropped,
    Fault,
    FrameRejected,
    GetInfo,
    Hello,
    Link,
    Malformed,
    MessageReceived,
    PeerAlive,
    PeerLost,
    ProtocolMismatch,
    Role,
    SetGate,
    SetIndicator,
    ShoeLoaded,
)
from firmware_protocol.messages import Capability, OpticalCode, RfidCode, UnidentifiedCode

from . import __version__, logs
from .aio import wait_event
from .clock import clock_synchronised
from .config import Settings, load_manifest
from .core.commands import Command, CommandRejection, Replay, parse_command
from .core.engine import Engine, EngineConfig, Output
from .core.inputs import (
    INPUT_ADAPTER,
    CommandInput,
    DeviceFault,
    DeviceGap,
    DeviceHello,
    DeviceItem,
    DeviceLink,
    DeviceShoeLoaded,
    Input,
    Notice,
    StorageStatus,
    Tick,
)
from .journal import Journal, StorageError
from .sdnotify import Notifier
from .transport import SerialTransport, Transport, TransportLost, UsbTransport

PULL_TYPES = (Card.TYPE, CardUnread.TYPE, CutCard.TYPE)
RETAINED_REFRESH_S = 2.0


def message_to_inputs(message: Any, at: float, manifest: dict[str, str] | None,
                      min_quality: int) -> list[Input]:
    """Translate one decoded device message into engine inputs (maybe none)."""
    if isinstance(message, Hello):
        return [DeviceHello(at=at, boot_id=message.boot_id, capabilities=message.capabilities,
                            fw_version=message.fw_version, serial_no=message.serial_no)]
    if isinstance(message, ShoeLoaded):
        return [DeviceShoeLoaded(at=at)]
    if isinstance(message, Fault):
        return [DeviceFault(at=at, code=message.code, active=bool(message.active))]
    if isinstance(message, Card):
        identity = message.identity
        problem = message.payload_problem
        base = {"at": at, "pull_id": message.pull_id, "pull_pos": message.pull_pos,
                "pull_size": message.pull_size, "device_card_index": message.card_index,
                "problem": problem}
        if isinstance(identity, OpticalCode):
            if message.quality < min_quality:
                return [DeviceItem(item="unread", **base)]
            return [DeviceItem(item="card", card=identity.notation, **base)]
        if isinstance(identity, RfidCode):
            card = (manifest or {}).get(identity.uid_hex)
            if card is None:
                return [DeviceItem(item="card", status="foreign", uid=identity.uid_hex, **base)]
            if message.quality < min_quality:
                return [DeviceItem(item="unread", uid=identity.uid_hex, **base)]
            return [DeviceItem(item="card", card=card, uid=identity.uid_hex, **base)]
        assert isinstance(identity, UnidentifiedCode)
        return [DeviceItem(item="unread", **base)]
    if isinstance(message, CardUnread):
        return [DeviceItem(at=at, item="unread", pull_id=message.pull_id,
                           pull_pos=message.pull_pos, pull_size=message.pull_size,
                           device_card_index=message.card_index,
                           problem=message.payload_problem)]
    if isinstance(message, CutCard):
        return [DeviceItem(at=at, item="cut", pull_id=message.pull_id, pull_pos=message.pull_pos,
                           pull_size=message.pull_size, problem=message.payload_problem)]
    if isinstance(message, Malformed):
        problem = f"type 0x{message.type_code:02x}: {message.problem}"
        if message.type_code in PULL_TYPES:
            # Pull fields unreadable: an item left the shoe, the pull is incomplete.
            item = "cut" if message.type_code == CutCard.TYPE else "unread"
            return [DeviceItem(at=at, item=item, pull_id=None, pull_pos=None, pull_size=None,
                               problem=problem)]
        return [Notice(at=at, code="bad_payload", message=problem)]
    return []  # HEARTBEAT: its content need not be kept


class Daemon:
    """One table's daemon. `transport_factory` lets tests hand in a simulated USB backend."""

    def __init__(self, settings: Settings, *,
                 transport_factory: Callable[[], Transport] | None = None,
                 notifier: Notifier | None = None) -> None:
        self.settings = settings
        self.root = settings.topic_root
        self.log = logs.get("shoed").bind(table=settings.table.id)
        self.notifier = notifier or Notifier()
        self._transport_factory = transport_factory or self._default_transport
        self.manifest = (load_manifest(settings.cards.manifest)
                         if settings.cards.manifest else None)
        rules = settings.rules
        self.engine_config = EngineConfig(
            table_id=settings.table.id, decks=rules.decks, table_type=rules.table_type,
            unnecessary_cards=rules.unnecessary_cards,
            betting_control=settings.table.betting_control, paytable=rules.paytable())
        self.journal: Journal | None = None
        self.engine: Engine | None = None
        self.link: Link | None = None
        self.transport: Transport | None = None
        self.device_connected = False
        self.mqtt_connected = False
        self.storage_ok = True
        self.storage_error: str | None = None
        self.storage_failed_at: float | None = None
        self.last_seen: float | None = None
        self._outbox_wake = asyncio.Event()
        self._status_dirty = asyncio.Event()
        self._timer_wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._accepting = True
        self._inputs_since_snapshot = 0
        self._client: aiomqtt.Client | None = None
        self._wrong_device = False
        self._last_status = ""
        self._unapplied: list[tuple[int, Input]] = []  # recorded, effect not yet written
        self._fresh: list[tuple[int, str]] = []  # events just written, for the publisher
        self._last_published = -1  # unknown until the outbox has been read once
        self._log_info = settings.log.level in ("debug", "info")
        self._crash_after = int(os.environ.get("SHOED_TEST_CRASH_AFTER_COMMIT", "0") or 0)
        self.stats: dict[str, int] = {"frames": 0, "published": 0, "commands": 0,
                                      "storage_failures": 0}

    # -- start-up ------------------------------------------------------------------------

    def _default_transport(self) -> Transport:
        device = self.settings.device
        if device.transport == "usb":
            return UsbTransport(device.vid, device.pid)
        return SerialTransport(device.port, device.baudrate)

    def restore(self) -> None:
        """Open the journal and rebuild the engine and the link's duplicate detection."""
        journal = Journal(self.settings.state.dir)
        self.journal = journal
        snapshot = journal.latest_snapshot()
        if snapshot is None:
            engine = Engine(self.engine_config, instance_id=journal.instance_id)
            after = 0
        else:
            after, state = snapshot
            engine = Engine.restore(self.engine_config, state)
        replayed = 0
        recovered = journal.event_range()[1]
        with journal.transaction():
            for _, body in journal.inputs_after(after):
                # Recorded inputs whose effect was not yet written (a crash between the
                # record and its effect) regenerate their events here; the others are
                # already in the outbox and are left as they are.
                for event in engine.handle(INPUT_ADAPTER.validate_json(body)).events:
                    journal.add_event(event.seq, event.event_id, event.type,
                                      event.model_dump_json())
                replayed += 1
        recovered = journal.event_range()[1] - recovered
        self.engine = engine
        last_event = journal.event_range()[1]
        if last_event and engine.seq != last_event:
            self.log.error("journal_replay_mismatch", engine_seq=engine.seq,
                           journal_seq=last_event)
        boot, last = json.loads(journal.meta("dedup") or "[null, null]")
        dedup = DedupState(boot, last)
        self.link = Link(Role.HOST, time.monotonic(), dedup=dedup)
        self.log.info("journal_restored", path=str(journal.path), snapshot_input=after,
                      replayed_inputs=replayed, events_recovered=recovered, seq=engine.seq,
                      outbox=journal.outbox_depth(), dedup_boot_id=dedup.boot_id,
                      dedup_last_seq=dedup.last_seq,
                      shoe_state=engine.public_state()["shoe_state"])

    # -- the durable step ----------------------------------------------------------------

    def commit(self, inputs: list[Input], dedup: DedupState | None = None,
               request_id: str | None = None) -> list[Output] | None:
        """Apply inputs and make them durable in one transaction; None if storage failed.

        On failure the engine is rolled back, so memory never runs ahead of the disk.
        """
        engine, journal = self.engine, self.journal
        assert engine is not None
        if journal is None or (not self.storage_ok and not self._storage_retry()):
            return None
        if self._unapplied:  # recorded frames first: their effect comes before this input
            self.apply_recorded([])
            if self._unapplied:
                return None
        rollback = None
        outputs: list[Output] = []
        try:
            with journal.transaction():
                for inp in inputs:
                    input_id = journal.add_input(inp.at, inp.model_dump_json())
                    out = self._apply_in_transaction(input_id, inp)
                    rollback = rollback or engine.last_rollback
                    outputs.append(out)
                    if request_id is not None:
                        journal.add_response(request_id, self._answer(request_id, out))
                if dedup is not None:
                    journal.set_meta("dedup", json.dumps([dedup.boot_id, dedup.last_seq]))
        except StorageError as error:
            if rollback is not None:
                engine.s = rollback()
            self._storage_failed(str(error))
            return None
        return outputs

    def _apply_in_transaction(self, input_id: int, inp: Input) -> Output:
        """Inside a journal transaction: apply one recorded input, put its events into the
        outbox, and save a snapshot when one is due."""
        engine, journal = self.engine, self.journal
        assert engine is not None and journal is not None
        out = engine.handle(inp)
        for event in out.events:
            journal.add_event(event.seq, event.event_id, event.type, event.model_dump_json())
        self._inputs_since_snapshot += 1
        if self._inputs_since_snapshot >= self.settings.state.snapshot_every:
            journal.save_snapshot(input_id, engine.snapshot())
            self._inputs_since_snapshot = 0
        return out

    def record(self, inputs: list[Input], dedup: DedupState) -> list[tuple[int, Input]] | None:
        """The durable step before a device frame's ACK (spec section 3): the frame's
        inputs and the new duplicate-detection state, in one fsynced transaction.
        Returns the recorded inputs with their ids, or None if storage failed."""
        journal = self.journal
        if journal is None or (not self.storage_ok and not self._storage_retry()):
            return None
        try:
            with journal.transaction():
                recorded = [(journal.add_input(inp.at, inp.model_dump_json()), inp)
                            for inp in inputs]
                journal.set_meta("dedup", json.dumps([dedup.boot_id, dedup.last_seq]))
        except StorageError as error:
            self._storage_failed(str(error))
            return None
        return recorded

    def apply_recorded(self, recorded: list[tuple[int, Input]]) -> list[Output]:
        """The game effect of recorded inputs: engine, events into the outbox, snapshot.

        Not fsynced on its own: all of it can be derived again from the record (restore()
        replays recorded inputs and regenerates missing events, same seq and event_id).
        If it cannot be written now, the inputs wait and are applied when storage is back.
        """
        engine, journal = self.engine, self.journal
        assert engine is not None and journal is not None
        self._unapplied.extend(recorded)
        if not self.storage_ok:
            return []
        pending, self._unapplied = self._unapplied, []
        rollback = None
        outputs: list[Output] = []
        try:
            with journal.transaction(durable=False):
                for input_id, inp in pending:
                    outputs.append(self._apply_in_transaction(input_id, inp))
                    rollback = rollback or engine.last_rollback
        except StorageError as error:
            if rollback is not None:
                engine.s = rollback()
            self._unapplied = pending + self._unapplied
            self._storage_failed(str(error))
            return []
        for out in outputs:
            self._after_output(out)
        return outputs

    def commit_and_apply(self, inputs: list[Input], dedup: DedupState | None = None,
                         request_id: str | None = None) -> list[Output] | None:
        """:meth:`commit`, then the effects that may follow the durable write."""
        outputs = self.commit(inputs, dedup, request_id)
        for out in outputs or ():
            self._after_output(out)
        return outputs

    def _storage_failed(self, message: str) -> None:
        if self.storage_ok:
            self.stats["storage_failures"] += 1
            self.storage_failed_at = time.time()
            self.log.error("storage_failed", error=message,
                           action="no ACK to the shoe, commands refused, gate locked")
        self.storage_ok = False
        self.storage_error = message
        self._lock_gate_directly()
        self._status_dirty.set()

    def _storage_retry(self) -> bool:
        """Storage was failing: try to journal the alarm's raise and clear now."""
        assert self.engine is not None and self.journal is not None
        at = self.storage_failed_at or time.time()
        rollback = None
        outputs = []
        try:
            with self.journal.transaction():
                for inp in (StorageStatus(at=at, ok=False, message=self.storage_error or ""),
                            StorageStatus(at=time.time(), ok=True, message="storage back")):
                    input_id = self.journal.add_input(inp.at, inp.model_dump_json())
                    outputs.append(self._apply_in_transaction(input_id, inp))
                    rollback = rollback or self.engine.last_rollback
        except StorageError:
            if rollback is not None:
                self.engine.s = rollback()
            return False
        self.storage_ok = True
        self.storage_error = None
        self.log.warning("storage_recovered")
        for out in outputs:
            self._after_output(out)
        self._status_dirty.set()
        if self._unapplied:
            self.apply_recorded([])
        return self.storage_ok

    def _after_output(self, out: Output) -> None:
        for event in out.events:
            self._log_event(event)
        if out.events:
            self._fresh.extend((e.seq, e.model_dump_json()) for e in out.events)
            del self._fresh[:-1024]  # a backlog is read from the outbox instead
            self._outbox_wake.set()
        assert self.link is not None
        for request in out.device:
            message = SetGate(request.value) if request.kind == "gate" \
                else SetIndicator(request.value)
            self.link.send(message, time.monotonic(), coalesce=True)
        self._flush()
        self._timer_wake.set()

    def _lock_gate_directly(self) -> None:
        engine, link = self.engine, self.link
        caps = engine.s.device.capabilities if engine else None
        if link is not None and caps is not None and caps & Capability.EXIT_GATE:
            link.send(SetGate(1), time.monotonic(), coalesce=True)
            self._flush()

    LOGGED_FIELDS = ("seq", "shoe_id", "hand_no", "card_index", "position", "card", "winner",
                     "player_total", "banker_total", "code", "active", "message", "rule",
                     "action", "reason", "operator", "command", "request_id")

    def _log_event(self, event: Any) -> None:
        alarm = event.type == "alarm" and event.active
        if not alarm and not self._log_info:
            return  # filtered anyway: skip building the fields (the per-card hot path)
        fields = {k: v for k in self.LOGGED_FIELDS if (v := getattr(event, k, None)) is not None}
        getattr(self.log, "warning" if alarm else "info")(f"event_{event.type}", **fields)

    @staticmethod
    def _answer(request_id: str | None, out: Output) -> dict[str, Any]:
        error = None if out.error is None else {"code": out.error.code,
                                                "message": out.error.message}
        return {"request_id": request_id, "ok": bool(out.ok), "error": error,
                "result": out.result if out.ok else None}

    # -- the device side ------------------------------------------------------------------

    def _flush(self) -> None:
        link, transport = self.link, self.transport
        if link is None:
            return
        data = link.data_to_send()
        if data and transport is not None and self.device_connected:
            transport.write(data)

    def on_bytes(self, data: bytes) -> None:
        """Bytes from the shoe: decode, journal, then ACK."""
        link = self.link
        assert link is not None
        now = time.monotonic()
        link.receive_data(data, now)
        self._drain_link()
        self._flush()

    def _drain_link(self) -> None:
        link = self.link
        assert link is not None
        while (event := link.next_event()) is not None:
            if isinstance(event, MessageReceived):
                self._on_frame(event)
            elif isinstance(event, ProtocolMismatch):
                self.log.warning("protocol_mismatch", detail=event.detail, seq=event.seq)
                self.commit_and_apply([Notice(at=time.time(), code="protocol_mismatch",
                                    message=event.detail)], dedup=event.dedup_after)
            elif isinstance(event, FrameRejected):
                self.log.info("frame_rejected", reason=event.reason, detail=event.detail)
            elif isinstance(event, PeerLost):
                self.log.warning("device_silent", seconds=5)
                self.commit_and_apply([DeviceLink(at=time.time(), connected=False)])
                self._status_dirty.set()
            elif isinstance(event, PeerAlive):
                self.commit_and_apply([DeviceLink(at=time.time(), connected=True)])
                self._status_dirty.set()
            elif isinstance(event, Dropped):
                self.log.warning("host_frame_dropped", message=repr(event.message))
            elif isinstance(event, Delivered):
                pass  # our GET_INFO / SET_GATE / SET_INDICATOR arrived

    def _device_link(self, connected: bool) -> None:
        """Raise/clear device_lost when the engine's view differs from what we now know."""
        engine = self.engine
        if engine is not None and engine.s.device.connected != connected:
            self.commit_and_apply([DeviceLink(at=time.time(), connected=connected)])
            self._status_dirty.set()

    def _on_frame(self, event: MessageReceived) -> None:
        link = self.link
        assert link is not None
        message = event.message
        self.stats["frames"] += 1
        self.last_seen = time.time()
        if not self._accepting:
            link.refuse(event.seq)  # stopping: the shoe keeps it for the next start
            return
        at = time.time()
        inputs: list[Input] = []
        engine = self.engine
        if engine is not None and not engine.s.device.connected \
                and not isinstance(message, Hello):
            inputs.append(DeviceLink(at=at, connected=True))  # Hello reconnects by itself
        if event.gap:
            self.log.warning("cards_lost", lost=event.gap, seq=event.seq)
            inputs.append(DeviceGap(at=at, lost=event.gap))
        inputs += message_to_inputs(message, at, self.manifest, self.settings.cards.min_quality)
        if isinstance(message, Hello):
            self._status_dirty.set()
            expected = self.settings.device.serial_no
            wrong = bool(expected) and message.serial_no != expected
            if wrong and not self._wrong_device:
                self.log.error("wrong_device", expected=expected, got=message.serial_no,
                               action="nothing from it is ACKed or applied")
                self.commit_and_apply([Notice(at=at, code="protocol_mismatch",
                                              message=f"expected shoe {expected}, "
                                            f"got {message.serial_no}: refused")])
            self._wrong_device = wrong
        if self._wrong_device:
            link.refuse(event.seq)  # not our shoe: no ACK, nothing applied
            return
        recorded = self.record(inputs, event.dedup_after)
        if recorded is None:
            link.refuse(event.seq)
            return
        self._maybe_crash()
        link.ack(event.seq)
        self._flush()  # the ACK leaves before the effect is worked out
        self.apply_recorded(recorded)
        if isinstance(message, Malformed) and message.type_code == Hello.TYPE:
            link.send(GetInfo(), time.monotonic())
        if isinstance(message, Hello | Fault):
            self._status_dirty.set()  # heartbeats only refresh last_seen (sent every 30 s)

    def _maybe_crash(self) -> None:
        """Fault injection for the kill tests: SHOED_TEST_CRASH_AFTER_COMMIT=N kills the
        process (SIGKILL) after the N-th frame is journalled and before its ACK."""
        if self._crash_after:
            self._crash_after -= 1
            if self._crash_after == 0:
                os.kill(os.getpid(), signal.SIGKILL)

    async def device_loop(self) -> None:
        backoff = 0.25
        while not self._stopping.is_set():
            transport = self._transport_factory()
            try:
                await transport.open()
            except TransportLost as error:
                self.log.warning("device_open_failed", error=str(error), retry_in_s=backoff)
                await self._sleep(backoff)
                backoff = min(backoff * 2, self.settings.device.reconnect_max_s)
                continue
            self.transport = transport
            self.device_connected = True
            backoff = 0.25
            self.log.info("device_opened", transport=transport.description)
            assert self.link is not None
            self.link.send(GetInfo(), time.monotonic())  # the host opens the link
            self._flush()
            self._status_dirty.set()
            try:
                while True:
                    data = await transport.read()
                    try:
                        self.on_bytes(data)
                    except Exception:  # a bug must not stop the shoe being served
                        self.log.exception("frame_handling_failed", bytes=data[:64].hex())
            except TransportLost as error:
                self.log.warning("device_lost", error=str(error))
                self._device_link(False)
            finally:
                self.device_connected = False
                self.transport = None
                await transport.close()
                self._status_dirty.set()
            await self._sleep(backoff)

    async def timer_loop(self) -> None:
        """Link retransmissions and liveness, and the engine's pull timeout."""
        link, engine = self.link, self.engine
        assert link is not None and engine is not None
        while not self._stopping.is_set():
            now_mono = time.monotonic()
            deadlines = []
            if (t := link.get_timer()) is not None:
                deadlines.append(t - now_mono)
            if (d := engine.next_deadline()) is not None:
                deadlines.append(d - time.time())
            delay = max(0.0, min(deadlines)) if deadlines else 1.0
            self._timer_wake.clear()
            await wait_event(self._timer_wake, min(delay, 1.0))
            link.handle_timer(time.monotonic())
            self._drain_link()
            deadline = engine.next_deadline()
            if deadline is not None and time.time() >= deadline:
                self.commit_and_apply([Tick(at=time.time())])
            self._flush()

    # -- MQTT ----------------------------------------------------------------------------

    def _client_args(self) -> dict[str, Any]:
        mqtt = self.settings.mqtt
        host, port = mqtt.host_port
        args: dict[str, Any] = {
            "hostname": host, "port": port, "keepalive": mqtt.keepalive,
            "identifier": mqtt.client_id or f"shoed-{self.settings.table.id}",
            "protocol": aiomqtt.ProtocolVersion.V5 if mqtt.protocol == "5"
            else aiomqtt.ProtocolVersion.V311,
            "will": aiomqtt.Will(f"{self.root}/status", json.dumps({"online": False}),
                                 qos=1, retain=True),
            "timeout": mqtt.publish_timeout_s,
        }
        if mqtt.username:
            args["username"] = mqtt.username
        if mqtt.password_file:
            args["password"] = mqtt.password_file.read_text().strip()
        if mqtt.tls:
            context = ssl.create_default_context(
                cafile=str(mqtt.ca_file) if mqtt.ca_file else None)
            if mqtt.cert_file:
                context.load_cert_chain(str(mqtt.cert_file),
                                        str(mqtt.key_file) if mqtt.key_file else None)
            args["tls_context"] = context
        return args

    async def mqtt_loop(self) -> None:
        backoff = 0.5
        while not self._stopping.is_set():
            try:
                async with aiomqtt.Client(**self._client_args()) as client:
                    self._client = client
                    self.mqtt_connected = True
                    backoff = 0.5
                    self.log.info("mqtt_connected", url=self.settings.mqtt.url, root=self.root)
                    await client.subscribe(f"{self.root}/cmd", qos=1)
                    await self._publish_retained(client)
                    async with asyncio.TaskGroup() as group:
                        group.create_task(self._publisher(client))
                        group.create_task(self._listener(client))
                        group.create_task(self._retained_refresher(client))
                        group.create_task(self._republish_after_connect(client))
            except* aiomqtt.MqttError as errors:
                self.log.warning("mqtt_disconnected", error=str(errors.exceptions[0]),
                                 retry_in_s=backoff, outbox=self._outbox_depth())
            except* (OSError, ssl.SSLError) as errors:
                self.log.warning("mqtt_unreachable", error=str(errors.exceptions[0]),
                                 retry_in_s=backoff)
            finally:
                self._client = None
                self.mqtt_connected = False
            if self._stopping.is_set():
                break
            await self._sleep(backoff)
            backoff = min(backoff * 2, 10.0)

    def _outbox_depth(self) -> int:
        try:
            return self.journal.outbox_depth() if self.journal else 0
        except StorageError:
            return -1

    async def _publisher(self, client: aiomqtt.Client) -> None:
        """Drain the outbox in seq order; an event leaves it only after its PUBACK."""
        journal = self.journal
        assert journal is not None
        timeout = self.settings.mqtt.publish_timeout_s
        while not self._stopping.is_set():
            self._outbox_wake.clear()
            rows = self._take_fresh()
            if rows is None:
                try:
                    rows = journal.unpublished()
                except StorageError:
                    rows = []
            if not rows:
                await self._publish_state(client)
                await wait_event(self._outbox_wake, 5.0)
                continue
            last_acked: int | None = None
            try:
                for seq, body in rows:
                    await client.publish(f"{self.root}/events", body, qos=1, timeout=timeout)
                    last_acked = seq
                    self._last_published = seq
                    self.stats["published"] += 1
            finally:
                # Mark what got its PUBACK, also when the connection broke mid-batch.
                if last_acked is not None:
                    with contextlib.suppress(StorageError):
                        journal.mark_published(last_acked)
            await self._publish_state(client)

    def _take_fresh(self) -> list[tuple[int, str]] | None:
        """Events just written, when they follow the last one published without a gap
        (the common case: no backlog); None means read the outbox."""
        fresh, self._fresh = self._fresh, []
        if fresh and fresh[0][0] == self._last_published + 1 and all(
                b[0] == a[0] + 1 for a, b in itertools.pairwise(fresh)):
            return fresh
        return None

    async def _publish_state(self, client: aiomqtt.Client) -> None:
        assert self.engine is not None
        state = self.engine.public_state()
        if state.get("seq") != getattr(self, "_state_published_seq", None):
            await client.publish(f"{self.root}/state", json.dumps(state), qos=1, retain=True)
            self._state_published_seq = state.get("seq")

    def status_payload(self) -> dict[str, Any]:
        synced = clock_synchronised()
        return {
            "online": True, "table_id": self.settings.table.id, "version": __version__,
            "device_connected": self.device_connected and bool(
                self.engine and self.engine.s.device.connected),
            "storage_ok": self.storage_ok, "storage_error": self.storage_error,
            "outbox": self._outbox_depth(), "clock_synchronised": synced,
            "warnings": ([] if synced is not False else ["system clock not synchronised"])
            + ([] if self.storage_ok else ["journal cannot be written: nothing is ACKed"]),
            "ts": time.time(),
        }

    def device_payload(self) -> dict[str, Any]:
        assert self.engine is not None
        device = self.engine.s.device
        caps = device.capabilities or 0
        return {
            "connected": self.device_connected and device.connected,
            "transport": self.settings.device.transport,
            "firmware": device.fw_version, "serial_no": device.serial_no,
            "boot_id": device.boot_id,
            "capabilities": [c.name.lower() for c in Capability if caps & c.value and c.name],
            "last_seen": self.last_seen, "faults": list(device.faults),
            "storage_ok": self.storage_ok,
        }

    async def _publish_retained(self, client: aiomqtt.Client) -> None:
        await client.publish(f"{self.root}/status", json.dumps(self.status_payload()), qos=1,
                             retain=True)
        await client.publish(f"{self.root}/device", json.dumps(self.device_payload()), qos=1,
                             retain=True)
        self._state_published_seq = None
        await self._publish_state(client)

    async def _republish_after_connect(self, client: aiomqtt.Client) -> None:
        """Once, shortly after connect: in case the broker lost its retained messages."""
        await asyncio.sleep(RETAINED_REFRESH_S)
        await self._publish_retained(client)

    async def _retained_refresher(self, client: aiomqtt.Client) -> None:
        """Republish status and device whenever they change (and every 30 s)."""
        while not self._stopping.is_set():
            self._status_dirty.clear()
            await wait_event(self._status_dirty, 30.0)
            await client.publish(f"{self.root}/status", json.dumps(self.status_payload()),
                                 qos=1, retain=True)
            await client.publish(f"{self.root}/device", json.dumps(self.device_payload()),
                                 qos=1, retain=True)
            self._notify_status()

    async def _listener(self, client: aiomqtt.Client) -> None:
        async for message in client.messages:
            if message.topic.matches(f"{self.root}/cmd"):
                payload = message.payload if isinstance(message.payload, bytes | str) else b""
                answer = self.handle_command(payload)
                if answer is not None:
                    await self._respond(client, answer)

    async def _respond(self, client: aiomqtt.Client, answer: dict[str, Any]) -> None:
        replay = answer.pop("_replay", None)
        if replay:
            for body in replay:
                await client.publish(f"{self.root}/replay", body, qos=1)
        await client.publish(f"{self.root}/cmd/response", json.dumps(answer), qos=1)

    def handle_command(self, payload: bytes | str) -> dict[str, Any] | None:
        """Validate, journal and apply one command; return its single answer."""
        self.stats["commands"] += 1
        parsed = parse_command(payload)
        if isinstance(parsed, CommandRejection):
            self.log.warning("command_rejected", request_id=parsed.request_id,
                             code=parsed.code, message=parsed.message)
            return {"request_id": parsed.request_id, "ok": False,
                    "error": {"code": parsed.code, "message": parsed.message}, "result": None}
        command: Command = parsed
        journal, engine = self.journal, self.engine
        assert journal is not None and engine is not None
        log = self.log.bind(request_id=command.request_id, command=command.command,
                            operator=command.operator)
        try:
            previous = journal.response(command.request_id)
        except StorageError:
            previous = None
        if previous is not None:
            log.info("command_repeated")
            return previous
        if not self.storage_ok and not self._storage_retry():
            return {"request_id": command.request_id, "ok": False,
                    "error": {"code": "storage_failed",
                              "message": f"the journal cannot be written: {self.storage_error}"},
                    "result": None}
        if isinstance(command, Replay):
            return self._replay(command)
        outputs = self.commit_and_apply([CommandInput(at=time.time(), command=command)],
                                        request_id=command.request_id)
        if outputs is None:
            return {"request_id": command.request_id, "ok": False,
                    "error": {"code": "storage_failed", "message": self.storage_error},
                    "result": None}
        answer = self._answer(command.request_id, outputs[0])
        log.info("command_answered", ok=answer["ok"], error=answer["error"])
        return answer

    def _replay(self, command: Replay) -> dict[str, Any]:
        journal = self.journal
        assert journal is not None
        first, last = journal.event_range()
        to_seq = command.to_seq or last
        bodies: list[str] = []
        if first == 0 or command.from_seq < first or command.from_seq > last or to_seq < \
                command.from_seq:
            answer = {"request_id": command.request_id, "ok": False,
                      "error": {"code": "out_of_range",
                                "message": f"expected from_seq..to_seq within {first}..{last}, "
                                           f"got {command.from_seq}..{command.to_seq}"},
                      "result": None}
        else:
            bodies = journal.events_between(command.from_seq, to_seq)
            answer = {"request_id": command.request_id, "ok": True, "error": None,
                      "result": {"from_seq": command.from_seq,
                                 "to_seq": command.from_seq + len(bodies) - 1,
                                 "count": len(bodies)}}
        with contextlib.suppress(StorageError), journal.transaction():
            journal.add_response(command.request_id, answer)
        return {**answer, "_replay": bodies}

    # -- housekeeping, notify, run ----------------------------------------------------------

    def _notify_status(self) -> None:
        status = (f"device {'connected' if self.device_connected else 'disconnected'}, "
                  f"broker {'connected' if self.mqtt_connected else 'disconnected'}, "
                  f"outbox {self._outbox_depth()}"
                  + ("" if self.storage_ok else ", STORAGE FAILED"))
        if status != self._last_status:  # systemd needs changes, not repetitions
            self._last_status = status
            self.notifier.notify(STATUS=status)

    async def housekeeping_loop(self) -> None:
        interval = self.notifier.watchdog_interval_s
        last_prune = 0.0
        while not self._stopping.is_set():
            await self._sleep(min(interval or 10.0, 10.0))
            if interval:
                self.notifier.notify(WATCHDOG=1)  # from the loop itself: a hung loop is seen
            self._notify_status()
            if time.time() - last_prune > 3600 and self.journal is not None:
                last_prune = time.time()
                with contextlib.suppress(StorageError):
                    self.journal.prune(self.settings.state.retention_days, time.time())

    async def _sleep(self, seconds: float) -> None:
        await wait_event(self._stopping, seconds)

    def request_stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        self.restore()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
        tasks = [asyncio.create_task(coro) for coro in (
            self.device_loop(), self.timer_loop(), self.mqtt_loop(), self.housekeeping_loop())]
        self.notifier.notify(READY=1, STATUS="journal restored; device transport started")
        self.log.info("ready", root=self.root, instance=self.engine.s.instance_id
                      if self.engine else None)
        await self._stopping.wait()
        await self._shutdown(tasks)

    async def _shutdown(self, tasks: list[asyncio.Task[None]]) -> None:
        """Stop taking cards, flush what the broker takes, close the link, snapshot."""
        self.notifier.notify(STOPPING=1, STATUS="stopping")
        self.log.info("stopping", outbox=self._outbox_depth())
        self._accepting = False
        deadline = time.monotonic() + 3.0
        while self.mqtt_connected and self._outbox_depth() > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.publish(f"{self.root}/status",
                                           json.dumps({"online": False}), qos=1, retain=True,
                                           timeout=1.0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.transport is not None:
            await self.transport.close()
        if self.journal is not None and self.engine is not None and self.storage_ok:
            with contextlib.suppress(StorageError), self.journal.transaction():
                last = self.journal.last_input_id()
                if last:
                    self.journal.save_snapshot(last, self.engine.snapshot())
            self.journal.close()
        self.log.info("stopped")

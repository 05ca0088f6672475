"""`shoed run`: the link, the engine, the journal and MQTT, wired together.

The order of things for every frame from the shoe (spec section 3, durability rule):
decode -> engine input(s) -> one fsynced journal transaction (inputs, dedup state) ->
ACK -> engine -> events to the publisher -> PUBACK -> their outbox rows (fsynced then,
where no card waits; a crash before them regenerates them from the record, same seq and
event_id). For every command: validate -> one fsynced transaction (input, events,
answer) -> answer. An event counts as delivered only after the broker's PUBACK, so a
dead broker, a kill -9 or a noisy line loses nothing and applies nothing twice
(docs/decisions.md 28).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import os
import signal
import socket
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
from .core.config import EngineConfig
from .core.engine import DeviceRequest, Engine, Output
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
from .mqtt_writes import send_when_queued
from .sdnotify import Notifier
from .transport import SerialTransport, Transport, TransportLost, UsbTransport

PULL_TYPES = (Card.TYPE, CardUnread.TYPE, CutCard.TYPE)
RETAINED_REFRESH_S = 2.0
OUTBOX_BATCH = 256  # events read from the outbox at once when catching up
EFFECT_WRITE_DELAY_S = 0.2  # the longest an effect waits in memory when the broker is away


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
            betting_control=settings.table.betting_control, paytable=rules.paytable(),
            integrity=settings.integrity.thresholds(),
            on_unshuffled=settings.integrity.on_unshuffled,
            roads_rows=settings.roads.rows, roads_tail_mode=settings.roads.tail_mode)
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
        self._timer_due = 0.0  # when the timer loop wakes up by itself
        self._state_published_seq: int | None = None
        self._roads_published_seq: int | None = None
        self._device_requests: list[DeviceRequest] = []  # gate/indicator, sent next turn
        self._unlogged: list[Any] = []  # events applied, logged next turn
        self._stopping = asyncio.Event()
        self._accepting = True
        self._inputs_since_snapshot = 0
        self._client: aiomqtt.Client | None = None
        self._wrong_device = False
        self._last_status = ""
        # Applied in memory, not yet in the outbox: (seq, event_id, type, body).
        self._unwritten: list[tuple[int, str, str, str]] = []
        self._last_applied_input = 0
        self._acked_seq = 0  # the newest event with a PUBACK (all before it have one)
        self._marked_seq = 0  # the newest event marked published on disk
        self._effects_timer: asyncio.TimerHandle | None = None
        self._fresh: list[tuple[int, str]] = []  # events just applied, for the publisher
        self._last_published = -1  # unknown until the outbox has been read once
        self._log_info = settings.log.level in ("debug", "info")
        self._log_debug = settings.log.level == "debug"
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
        journal = Journal(self.settings.state.dir, new_journal=self.settings.state.new_journal)
        self.journal = journal
        if journal.moved_aside is not None:
            self.log.warning("journal_moved_aside", damage=journal.damage,
                             moved_to=str(journal.moved_aside), instance=journal.instance_id)
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
    #
    # Three kinds of writes, by what they protect:
    # * the record (fsynced): a device frame's inputs and the dedup state, before its ACK;
    #   a command with its events and answer, before the answer;
    # * the effect (fsynced after the publish): the events a recorded device input produced,
    #   publish marks and snapshots. All of it can be derived again from the record:
    #   restore() replays recorded inputs and inserts the events that are missing (same
    #   seq, same event_id). So the effect is written after the events have been handed
    #   to the broker, batched, off the card-to-event path;
    # * a command's durable transaction also carries any effect still unwritten.

    def commit(self, inputs: list[Input], dedup: DedupState | None = None,
               request_id: str | None = None) -> list[Output] | None:
        """Apply inputs and make them durable in one transaction; None if storage failed.

        On failure the engine is rolled back, so memory never runs ahead of the record.
        """
        if self.journal is None or (not self.storage_ok and not self._storage_retry()):
            return None
        try:
            return self._durable_apply(inputs, dedup, request_id)
        except StorageError as error:
            self._storage_failed(str(error))
            return None

    def _durable_apply(self, inputs: list[Input], dedup: DedupState | None = None,
                       request_id: str | None = None) -> list[Output]:
        """Record and apply `inputs`, their events, a command's answer and any effect
        still unwritten, in one fsynced transaction. On StorageError the engine and the
        pending effects are as before the call, and the error is raised."""
        engine, journal = self.engine, self.journal
        assert engine is not None and journal is not None
        before = (len(self._unwritten), len(self._fresh), self._inputs_since_snapshot,
                  self._last_applied_input)
        rollback = None
        outputs: list[Output] = []
        try:
            with journal.transaction():
                for inp in inputs:
                    input_id = journal.add_input(inp.at, inp.model_dump_json())
                    outputs.append(self._apply(input_id, inp))
                    rollback = rollback or engine.last_rollback
                    if request_id is not None:
                        journal.add_response(request_id, self._answer(request_id, outputs[-1]))
                if dedup is not None:
                    journal.set_meta("dedup", json.dumps([dedup.boot_id, dedup.last_seq]))
                written = self._write_effects_in_transaction()
        except StorageError:
            if rollback is not None:
                engine.roll_back(rollback)
            del self._unwritten[before[0]:]
            del self._fresh[before[1]:]  # not handed over: the publisher runs only after us
            self._inputs_since_snapshot, self._last_applied_input = before[2:]
            raise
        self._effects_written(*written)
        return outputs

    def _apply(self, input_id: int, inp: Input) -> Output:
        """Apply one recorded input in memory; its events join the unwritten effect and
        the publisher's queue (which it reads once the caller has returned)."""
        engine = self.engine
        assert engine is not None
        out = engine.handle(inp)
        for event in out.events:
            body = event.model_dump_json()  # once: for the outbox and for the publisher
            self._unwritten.append((event.seq, event.event_id, event.type, body))
            self._fresh.append((event.seq, body))
        self._last_applied_input = input_id
        self._inputs_since_snapshot += 1
        return out

    def _write_effects_in_transaction(self) -> tuple[int, int, bool]:
        """Inside a journal transaction: the unwritten events (marked published when their
        PUBACK came first), publish marks, a due snapshot. Returns what to forget after
        the commit: (events written, seq marked, snapshot saved)."""
        journal, engine = self.journal, self.engine
        assert journal is not None and engine is not None
        acked = self._acked_seq
        for seq, event_id, type_, body in self._unwritten:
            journal.add_event(seq, event_id, type_, body, published=seq <= acked)
        if acked > self._marked_seq:
            journal.mark_published(acked)
        snapshot = (self._inputs_since_snapshot >= self.settings.state.snapshot_every
                    and self._last_applied_input > 0)
        if snapshot:
            journal.save_snapshot(self._last_applied_input, engine.snapshot())
        return len(self._unwritten), acked, snapshot

    def _effects_written(self, events: int, marked: int, snapshot: bool) -> None:
        del self._unwritten[:events]
        self._marked_seq = max(self._marked_seq, marked)
        if snapshot:
            self._inputs_since_snapshot = 0

    def write_effects(self) -> bool:
        """Write the pending effect now (one fsynced transaction). False when storage
        is failing; the effect then stays in memory and is written once storage is back."""
        if self._effects_timer is not None:
            self._effects_timer.cancel()
            self._effects_timer = None
        journal = self.journal
        if journal is None or not (self._unwritten or self._acked_seq > self._marked_seq):
            return True
        if not self.storage_ok and not self._storage_retry():
            return False  # the retry's own transaction wrote the effect when it succeeded
        try:
            # fsynced here, after the publish, where nothing waits: left unsynced, its
            # pages would be flushed by the next card's record, before that card's ACK.
            with journal.transaction():
                written = self._write_effects_in_transaction()
            self._effects_written(*written)
            journal.checkpoint_if_due()  # here, after the publish: nothing waits on it
        except StorageError as error:
            self._storage_failed(str(error))
            return False
        return True

    def _effects_later(self) -> None:
        """Make sure the effect is written soon even when the broker is away (normally the
        publisher writes it right after the PUBACKs)."""
        if self._effects_timer is None:
            self._effects_timer = asyncio.get_running_loop().call_later(
                EFFECT_WRITE_DELAY_S, self.write_effects)

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
        """The game effect of recorded inputs: engine, events to the publisher at once;
        their outbox rows follow (see the section comment)."""
        outputs = [self._apply(input_id, inp) for input_id, inp in recorded]
        for out in outputs:
            self._after_output(out)
        if self._unwritten:
            self._effects_later()
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
        at = self.storage_failed_at or time.time()
        try:
            outputs = self._durable_apply([
                StorageStatus(at=at, ok=False, message=self.storage_error or ""),
                StorageStatus(at=time.time(), ok=True, message="storage back")])
        except StorageError:
            return False
        self.storage_ok = True
        self.storage_error = None
        self.log.warning("storage_recovered")
        for out in outputs:
            self._after_output(out)
        self._status_dirty.set()
        return True

    def _after_output(self, out: Output) -> None:
        if out.events:
            del self._fresh[:-1024]  # a backlog is read from the outbox instead
            self._outbox_wake.set()
        if not (out.events or out.device):
            return
        # Gate/indicator frames and the log lines follow on the loop's next turn, after
        # the publisher (woken just above) has sent the events: a dealer's light or a
        # log line may come a fraction of a millisecond later, the event not.
        if not (self._device_requests or self._unlogged):
            asyncio.get_running_loop().call_soon(self._after_publisher_turn)
        self._device_requests += out.device
        self._unlogged += out.events

    def _after_publisher_turn(self) -> None:
        if self._device_requests:
            self._send_device_requests()
        events, self._unlogged = self._unlogged, []
        for event in events:
            self._log_event(event)
        if self.engine is not None:
            self.engine.prepare_checkpoint()  # the next card's, while nothing waits

    def _send_device_requests(self) -> None:
        assert self.link is not None
        requests, self._device_requests = self._device_requests, []
        for request in requests:
            message = SetGate(request.value) if request.kind == "gate" \
                else SetIndicator(request.value)
            self.link.send(message, time.monotonic(), coalesce=True)
        self._flush()
        self._wake_timer_if_sooner()

    def _lock_gate_directly(self) -> None:
        engine, link = self.engine, self.link
        caps = engine.state.device.capabilities if engine else None
        if link is not None and caps is not None and caps & Capability.EXIT_GATE:
            link.send(SetGate(1), time.monotonic(), coalesce=True)
            self._flush()

    LOGGED_FIELDS = ("seq", "shoe_id", "hand_no", "card_index", "position", "card", "winner",
                     "player_total", "banker_total", "code", "active", "message", "rule",
                     "action", "reason", "operator", "command", "request_id")

    def _log_event(self, event: Any) -> None:
        """Alarms at warning, a card at debug (it is in the journal and on the broker; a
        line per card would double the disk writes per card under journald), the rest
        (hands, shoes, procedure, commands) at info."""
        if event.type == "alarm" and event.active:
            level = "warning"
        elif event.type == "card":
            if not self._log_debug:
                return  # filtered anyway: skip building the fields (the per-card path)
            level = "debug"
        elif self._log_info:
            level = "info"
        else:
            return
        fields = {k: v for k in self.LOGGED_FIELDS if (v := getattr(event, k, None)) is not None}
        getattr(self.log, level)(f"event_{event.type}", **fields)

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

    def _on_device_bytes(self, data: bytes) -> None:
        try:
            self.on_bytes(data)
        except Exception:  # a bug must not stop the shoe being served
            self.log.exception("frame_handling_failed", bytes=data[:64].hex())

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
        if engine is not None and engine.state.device.connected != connected:
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
        if engine is not None and not engine.state.device.connected \
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
            transport.receive_with(self._on_device_bytes)
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
                while True:  # chunks go to _on_device_bytes; read() reports the loss
                    self._on_device_bytes(await transport.read())
            except TransportLost as error:
                self.log.warning("device_lost", error=str(error))
                self._device_link(False)
            finally:
                self.device_connected = False
                self.transport = None
                await transport.close()
                self._status_dirty.set()
            await self._sleep(backoff)

    def _timer_delay(self) -> float:
        """Seconds until the link or the engine has something due (at most 1)."""
        link, engine = self.link, self.engine
        assert link is not None and engine is not None
        delay = 1.0
        if (t := link.get_timer()) is not None:
            delay = min(delay, t - time.monotonic())
        if (d := engine.next_deadline()) is not None:
            delay = min(delay, d - time.time())
        return max(0.0, delay)

    def _wake_timer_if_sooner(self) -> None:
        """Wake the timer loop only when something became due sooner than it sleeps (a
        wake-up per card would cost a task switch on the card-to-event path)."""
        if time.monotonic() + self._timer_delay() < self._timer_due:
            self._timer_wake.set()

    async def timer_loop(self) -> None:
        """Link retransmissions and liveness, and the engine's pull timeout."""
        link, engine = self.link, self.engine
        assert link is not None and engine is not None
        while not self._stopping.is_set():
            delay = self._timer_delay()
            self._timer_due = time.monotonic() + delay
            self._timer_wake.clear()
            await wait_event(self._timer_wake, delay)
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
            # Command answers can go out while an event awaits its PUBACK: without
            # TCP_NODELAY, Nagle would hold one until the broker's TCP ACK (tens of ms).
            "socket_options": [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
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
                    send_when_queued(client)  # the event's bytes leave without a loop turn
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
            except* Exception as errors:  # a bug must not end publishing for good
                self.log.error("mqtt_loop_failed", error=repr(errors.exceptions[0]),
                               retry_in_s=backoff, exc_info=errors.exceptions[0])
            finally:
                self._client = None
                self.mqtt_connected = False
            if self._stopping.is_set():
                break
            await self._sleep(backoff)
            backoff = min(backoff * 2, 10.0)

    def _outbox_depth(self) -> int:
        """Events not yet acknowledged by the broker, on disk or still in memory (-1: the
        journal cannot be read)."""
        acked = self._acked_seq
        try:
            on_disk = self.journal.outbox_depth(after_seq=acked) if self.journal else 0
        except StorageError:
            return -1
        return on_disk + sum(1 for row in self._unwritten if row[0] > acked)

    async def _publisher(self, client: aiomqtt.Client) -> None:
        """Drain the outbox in seq order; an event leaves it only after its PUBACK.

        One message at a time, each after the PUBACK of the one before. Sending a batch
        at once costs less CPU, but then the broker answers with PUBACKs back to back,
        and a broker without TCP_NODELAY (Mosquitto's default) holds the second until
        our delayed TCP ACK, up to 40 ms, which the next card's event would wait behind.
        """
        while not self._stopping.is_set():
            self._outbox_wake.clear()
            rows = self._take_fresh()
            if rows is None:
                rows = self._outbox_rows()
            if not rows:
                await self._publish_state(client)
                await wait_event(self._outbox_wake, 5.0)
                continue
            last_acked: int | None = None
            try:
                for seq, body in rows:
                    await client.publish(f"{self.root}/events", body, qos=1,
                                         timeout=self.settings.mqtt.publish_timeout_s)
                    last_acked = seq
                    self._last_published = seq
                    self.stats["published"] += 1
            finally:
                # Mark what got its PUBACK, also when the connection broke mid-batch; the
                # same write puts the batch's events into the outbox if they were not yet.
                if last_acked is not None:
                    self._acked_seq = max(self._acked_seq, last_acked)
                    self.write_effects()
            await self._publish_state(client)

    def _outbox_rows(self, limit: int = OUTBOX_BATCH) -> list[tuple[int, str]]:
        """The oldest unpublished events in seq order: the outbox on disk, followed by
        those still in memory when storage is failing."""
        self.write_effects()
        try:
            rows = self.journal.unpublished(limit) if self.journal else []
        except StorageError:
            rows = []
        if len(rows) < limit:
            after = rows[-1][0] if rows else self._acked_seq
            rows += [(seq, body) for seq, _, _, body in self._unwritten if seq > after]
        return rows[:limit]

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
        if state.get("seq") != self._state_published_seq:
            await client.publish(f"{self.root}/state", json.dumps(state), qos=1, retain=True)
            self._state_published_seq = state.get("seq")
        if self.engine.roads_seq != self._roads_published_seq:  # roads.md section 7
            roads = self.engine.roads_message()
            await client.publish(f"{self.root}/roads", json.dumps(roads), qos=1, retain=True)
            self._roads_published_seq = roads["seq"]

    def status_payload(self) -> dict[str, Any]:
        synced = clock_synchronised()
        return {
            "online": True, "table_id": self.settings.table.id, "version": __version__,
            "instance": self.journal.instance_id if self.journal else None,
            "device_connected": self.device_connected and bool(
                self.engine and self.engine.state.device.connected),
            "storage_ok": self.storage_ok, "storage_error": self.storage_error,
            "outbox": self._outbox_depth(), "clock_synchronised": synced,
            "warnings": ([] if synced is not False else ["system clock not synchronised"])
            + ([] if self.storage_ok else ["journal cannot be written: nothing is ACKed"]),
            "ts": time.time(),
        }

    def device_payload(self) -> dict[str, Any]:
        assert self.engine is not None
        device = self.engine.state.device
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
        self._roads_published_seq = None
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
        self.write_effects()  # events still in memory belong to the range too
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
        last_prune = -3600.0
        while not self._stopping.is_set():
            await self._sleep(min(interval or 10.0, 10.0))
            if interval:
                self.notifier.notify(WATCHDOG=1)  # from the loop itself: a hung loop is seen
            self._notify_status()
            if self.journal is not None and self.storage_ok:
                with contextlib.suppress(StorageError):  # commands alone also grow the WAL
                    self.journal.checkpoint_if_due()
            elif self.journal is not None:
                # Storage failed: try again now, not only when the next frame or command
                # comes (with the gate locked, the shoe may send nothing for a while).
                self._storage_retry()
            if self.journal is not None and self.storage_ok:
                with contextlib.suppress(StorageError):  # kill -9 loses at most 5 s of it
                    self.journal.save_uptime()
            if time.monotonic() - last_prune > 3600 and self.journal is not None:
                last_prune = time.monotonic()
                with contextlib.suppress(StorageError):  # old by wall time AND uptime
                    pruned = self.journal.prune(self.settings.state.retention_days)
                    self.log.info("journal_pruned", events=pruned,
                                  uptime=round(self.journal.uptime.now()))

    async def integrity_check(self) -> None:
        """SQLite's full integrity check once after READY, in a thread on a read-only
        connection of its own: it never holds up READY or a card (docs/reliability.md).
        A problem is logged and recorded beside the journal: the next start refuses it."""
        if self.journal is None:
            return
        found = await asyncio.to_thread(self.journal.integrity_check)
        if found:
            self.log.error("journal_corrupt", path=str(self.journal.path), problems=found)

    async def _sleep(self, seconds: float) -> None:
        await wait_event(self._stopping, seconds)

    def request_stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        self.restore()
        # What exists now (modules, schemas, the restored state) lives as long as the
        # process: keep it out of the collector's full passes, which would otherwise walk
        # it every few thousand allocations and stall a card by milliseconds.
        gc.collect()
        gc.freeze()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
        tasks = [asyncio.create_task(coro) for coro in (
            self.device_loop(), self.timer_loop(), self.mqtt_loop(), self.housekeeping_loop(),
            self.integrity_check())]
        self.notifier.notify(READY=1, STATUS="journal restored; device transport started")
        self.log.info("ready", root=self.root, instance=self.engine.state.instance_id
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
                # The snapshot covers every applied input: their events go in first.
                self._write_effects_in_transaction()
                last = self.journal.last_input_id()
                if last:
                    self.journal.save_snapshot(last, self.engine.snapshot())
            self.journal.close()
        self.log.info("stopped")

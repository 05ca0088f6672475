"""DeviceSession: the shoe's side of the daemon.

For every frame: link -> inputs -> ``recorder.record(inputs, dedup)`` -> ``link.ack(seq)``
-> ``recorder.apply(recorded)`` (spec section 3: ACK only after durable). The link's
retransmissions and liveness and the engine's pull timeout share one timer, a single
``loop.call_at`` re-armed after every firing and whenever something falls due sooner (as
aioquic's asyncio protocol does with its connection's get_timer()); the link runs on the
monotonic clock, the engine's deadlines on the wall time its inputs carry.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from firmware_protocol import (
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
)
from firmware_protocol.messages import Capability
from shoed.config import Settings
from shoed.core.engine import DeviceRequest, Output
from shoed.core.inputs import DeviceGap, DeviceLink, Input, Notice, Tick
from shoed.device.inputs import card_input, card_record, message_to_inputs, stamp
from shoed.device.transports import TRANSPORTS, Transport
from shoed.device.usb import UsbTransport
from shoed.errors import TransportLost
from shoed.eventlog import EventLog
from shoed.status import TableStatus
from shoed.store.recorder import Recorder

REJECTS_EVERY_S = 10.0  # rejected frames: one log line at most this often
TIMER_MAX_S = 1.0  # the timer fires at least this often (liveness of the timer itself)
LINE_STABLE_S = 2.0  # a line served at least this long was good: the next reopen comes soon


class DeviceSession:
    def __init__(self, settings: Settings, recorder: Recorder, status: TableStatus,
                 log: Any, *, transport_factory: Callable[[], Transport] | None = None,
                 manifest: dict[str, str] | None = None) -> None:
        self.settings = settings
        self.recorder = recorder
        self.status = status
        self.log = log
        self.events = EventLog(log, settings.log.level)
        self.manifest = manifest
        self.min_quality = settings.cards.min_quality
        self.transport_factory = transport_factory or (
            lambda: TRANSPORTS[settings.device.transport](settings.device))
        self.link = Link(Role.HOST, time.monotonic(), dedup=recorder.dedup())
        self.transport: Transport | None = None
        self.frames = 0
        self.timer_fired: float | None = None  # monotonic time of the latest good firing
        # monotonic time the device loop last stepped (an open tried, a transport served):
        # a loop stuck outside serving (an open or a close that never returns) stops here
        self.loop_stepped: float | None = None
        self.on_timer_failed: Callable[[BaseException], None] = lambda error: None
        self.on_timer_ok: Callable[[], None] = lambda: None
        self._accepting = True
        self._wrong_device = False
        self._refused_usb: set[tuple[int, int]] = set()
        self._opened = False  # a transport was opened before: the next one reopens the link
        self._device_requests: list[DeviceRequest] = []
        self._unlogged: list[Any] = []
        self._timer: asyncio.TimerHandle | None = None
        self._rejects: dict[str, int] = {}  # frames rejected since the last log line
        self._rejects_logged_at = -REJECTS_EVERY_S
        recorder.on_output = self.after_output
        recorder.on_storage_failed = self.lock_gate

    def on_bytes(self, data: bytes) -> None:
        """Bytes from the shoe: decode, journal, then ACK."""
        link = self.link
        link.receive_data(data, time.monotonic())
        self._drain_link()
        self._flush()
        if not link.idle:  # a frame of ours in flight (a NAK may have moved its time)
            self.arm_timer()

    def _receive(self, data: bytes) -> None:
        try:
            self.on_bytes(data)
        except Exception:  # a bug must not stop the shoe being served
            self.log.exception("frame_handling_failed", bytes=data[:64].hex())

    def _commit(self, inputs: list[Input], dedup: Any = None) -> list[Any] | None:
        """The recorder's commit, then the status; None if storage failed."""
        outputs = self.recorder.commit(inputs, dedup)
        self._sync_status()
        return outputs

    def _drain_link(self) -> None:
        link = self.link
        while (event := link.next_event()) is not None:
            if isinstance(event, MessageReceived):
                self._on_frame(event)
            elif isinstance(event, ProtocolMismatch):
                self.log.warning("protocol_mismatch", detail=event.detail, seq=event.seq)
                stamped = stamp(self.recorder.uptime)
                lost: list[Input] = []
                if event.gap:  # frames lost before it (spec section 3: continuity)
                    self.log.warning("cards_lost", lost=event.gap, seq=event.seq)
                    lost.append(DeviceGap(**stamped, lost=event.gap))
                if self._commit([*lost, Notice(**stamped, code="protocol_mismatch",
                                               message=event.detail)],
                                event.dedup_after) is None:
                    link.forget_unknown()  # not recorded: its copies are not ACKed
            elif isinstance(event, FrameRejected):
                self._rejected_frame(event)
            elif isinstance(event, PeerLost):
                self.log.warning("device_silent", seconds=5)
                self._commit([DeviceLink(**stamp(self.recorder.uptime), connected=False)])
            elif isinstance(event, PeerAlive):
                self._commit([DeviceLink(**stamp(self.recorder.uptime), connected=True)])
            elif isinstance(event, Dropped):
                self.log.warning("host_frame_dropped", message=repr(event.message))
            elif isinstance(event, Delivered):
                pass  # our GET_INFO / SET_GATE / SET_INDICATOR arrived

    def _rejected_frame(self, event: FrameRejected) -> None:
        """A line with noise (a wrong baud rate: a thousand a second) must not flood the
        log, where journald's rate limit would then drop every other line too: the first
        is logged, the rest counted and summed up every REJECTS_EVERY_S."""
        now = time.monotonic()
        if now - self._rejects_logged_at >= REJECTS_EVERY_S and not self._rejects:
            self._rejects_logged_at = now
            self.log.info("frame_rejected", reason=event.reason, detail=event.detail)
            return
        self._rejects[event.reason] = self._rejects.get(event.reason, 0) + 1

    def _log_rejects(self) -> None:
        if self._rejects and time.monotonic() - self._rejects_logged_at >= REJECTS_EVERY_S:
            rejects, self._rejects = self._rejects, {}
            self._rejects_logged_at = time.monotonic()
            total = sum(rejects.values())
            (self.log.warning if total >= 100 else self.log.info)(
                "frames_rejected", count=total, reasons=rejects,
                seconds=REJECTS_EVERY_S, hint="noise on the line, or a wrong baud rate"
                if total >= 100 else None)

    def _on_frame(self, event: MessageReceived) -> None:
        link, message = self.link, event.message
        self.frames += 1
        self.status.last_seen = time.time()  # not signalled: a frame at least every 2 s
        if not self._accepting:
            link.refuse(event.seq)  # stopping: the shoe keeps it for the next start
            return
        stamped = stamp(self.recorder.uptime)
        if not event.gap and self.recorder.state.device.connected:
            body = card_record(message, stamped, self.min_quality)
            if body is not None:  # a plain card (most frames)
                self._plain_card(event, stamped["at"], body)
                return
        inputs: list[Input] = []
        if not self.recorder.state.device.connected and not isinstance(message, Hello):
            inputs.append(DeviceLink(**stamped, connected=True))  # Hello reconnects itself
        if event.gap:
            self.log.warning("cards_lost", lost=event.gap, seq=event.seq)
            inputs.append(DeviceGap(**stamped, lost=event.gap))
        inputs += message_to_inputs(message, stamped, self.manifest, self.min_quality)
        if isinstance(message, Hello):
            self._check_serial_no(message, stamped)
        if self._wrong_device:
            link.refuse(event.seq)  # not our shoe: no ACK, nothing applied
            return
        recorded = self.recorder.record(inputs, event.dedup_after)
        if recorded is None:
            link.refuse(event.seq)
            return
        link.ack(event.seq)
        self._flush()  # the ACK leaves before the effect is worked out
        self.recorder.apply(recorded)
        if isinstance(message, Malformed) and message.type_code == Hello.TYPE:
            link.send(GetInfo(), time.monotonic())
        if isinstance(message, Hello | Fault):
            self._sync_status(force=True)
        elif inputs and isinstance(inputs[0], DeviceLink):
            self._sync_status()  # the shoe is back (frames after a silence)

    def _plain_card(self, event: MessageReceived, at: float, body: str) -> None:
        """A plain card's frame: its input's JSON recorded, the ACK, and only then its
        model built from that JSON and applied (the same input, the same journal bytes as
        message_to_inputs makes, built a step later)."""
        link = self.link
        if self._wrong_device:
            link.refuse(event.seq)  # not our shoe: no ACK, nothing applied
            return
        ids = self.recorder.record_bodies([(at, body)], event.dedup_after)
        if ids is None:
            link.refuse(event.seq)
            return
        link.ack(event.seq)
        self._flush()  # the ACK leaves before the input's model and its effect
        self.recorder.apply([(ids[0], card_input(body))])

    def _check_serial_no(self, message: Hello, stamped: dict[str, Any]) -> None:
        expected = self.settings.device.serial_no
        wrong = bool(expected) and message.serial_no != expected
        if wrong and not self._wrong_device:
            self.log.error("wrong_device", expected=expected, got=message.serial_no,
                           action="nothing from it is ACKed or applied")
            refused = f"expected shoe {expected}, got {message.serial_no}: refused"
            self._commit([Notice(**stamped, code="protocol_mismatch", message=refused)])
            line = self.transport
            if isinstance(line, UsbTransport) and line.refuse_device():
                # another device of the VID/PID is plugged: try it (decisions.md 225)
                line.drop(f"shoe {message.serial_no} is not {expected}; another device "
                          f"with the VID/PID is plugged")
        self._wrong_device = wrong

    # -- bytes out --------------------------------------------------------------------------

    def _flush(self) -> None:
        data = self.link.data_to_send()
        if data and self.transport is not None:
            self.transport.write(data)

    def after_output(self, out: Output) -> None:
        """Gate/indicator frames and the log lines follow the events' send: at once when
        the outbox has handed every event over (the idle publisher's first event leaves
        from the apply, decisions.md 147), else on the loop's next turn, after the
        publisher (woken by the outbox) has sent them: a dealer's light or a log line
        may come a fraction of a millisecond later, the event not."""
        scheduled = bool(self._device_requests or self._unlogged)
        self._device_requests += out.device
        self._unlogged += out.events
        if scheduled:
            return  # the turn already asked for takes these too
        if self.recorder.outbox.fresh:
            asyncio.get_running_loop().call_soon(self._after_publisher_turn)
        else:
            self._after_publisher_turn()  # no loop turn of its own (one less a card)

    def _after_publisher_turn(self) -> None:
        if self._device_requests:
            requests, self._device_requests = self._device_requests, []
            for request in requests:
                message = SetGate(request.value) if request.kind == "gate" \
                    else SetIndicator(request.value)
                self.link.send(message, time.monotonic(), coalesce=True)
            self._flush()
        events, self._unlogged = self._unlogged, []
        for event in events:
            self.events.write(event)
        self.arm_timer()  # a retransmission or a pull timeout may be due sooner now
        self.recorder.engine.prepare_checkpoint()  # the next card's, while nothing waits

    def lock_gate(self) -> None:
        """Storage failed: lock the gate now, not through the engine (nothing can be
        journalled)."""
        caps = self.recorder.state.device.capabilities
        if caps is not None and caps & Capability.EXIT_GATE:
            self.link.send(SetGate(1), time.monotonic(), coalesce=True)
            self._flush()

    def stop_accepting(self) -> None:
        self._accepting = False  # stopping: frames are refused (the shoe keeps them)

    def _sync_status(self, force: bool = False) -> None:
        self.status.set(device_alive=bool(self.recorder.state.device.connected))
        if force:
            self.status.changed()

    def device_payload(self) -> dict[str, Any]:
        """The retained `{root}/device` body."""
        device = self.recorder.state.device
        caps = device.capabilities or 0
        return {
            "connected": self.status.device_open and device.connected,
            "transport": self.settings.device.transport,
            "firmware": device.fw_version, "serial_no": device.serial_no,
            "boot_id": device.boot_id,
            "capabilities": [c.name.lower() for c in Capability if caps & c.value and c.name],
            "last_seen": self.status.last_seen, "faults": list(device.faults),
            "storage_ok": self.status.storage_ok,
        }

    # -- the device loop (a supervised task) -------------------------------------------------

    async def run(self) -> None:
        """Open the transport, serve it until it is lost, again, with back-off."""
        backoff = 0.25
        while True:
            self.loop_stepped = time.monotonic()
            transport = self.transport_factory()
            transport.receive_with(self._receive)
            if isinstance(transport, UsbTransport):
                transport.refused = self._refused_usb  # across reopens
            try:
                await transport.open()
            except TransportLost as error:
                self.log.warning("device_open_failed", error=str(error), retry_in_s=backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.settings.device.reconnect_max_s)
                continue
            opened = time.monotonic()
            await self.serve(transport)
            # A line that fails as soon as it opens (no endpoint, EIO at once) backs off
            # as a failed open does; one that served a while starts again at 0.25 s.
            stable = time.monotonic() - opened >= LINE_STABLE_S
            backoff = 0.25 if stable else min(backoff * 2, self.settings.device.reconnect_max_s)
            await asyncio.sleep(backoff)

    async def serve(self, transport: Transport) -> None:
        """One open transport, until it is lost (TransportLost is handled here)."""
        self.transport = transport
        self.status.set(device_open=True)
        self.log.info("device_opened", transport=transport.description)
        try:
            # The host opens the link: anew on a reopened line, GET_INFO first (seq 0).
            if self._opened:
                self.link.reopen(time.monotonic())
            self._opened = True
            if self._wrong_device:  # a new line: its HELLO waits behind its frame in
                # flight, so frames before it are the configured shoe's (decisions.md 222)
                self.log.info("device_reopened_after_wrong_device")
                self._wrong_device = False
            self.link.send(GetInfo(), time.monotonic())
            self._flush()
            self.arm_timer()  # its retransmission is due in 250 ms, not at the next second
            while True:  # chunks go to _receive; read() reports the loss
                self._receive(await transport.read())
        except TransportLost as error:
            self.log.warning("device_lost", error=str(error))
            if self.recorder.state.device.connected:
                self._commit([DeviceLink(**stamp(self.recorder.uptime), connected=False,
                                         reason=f"the shoe's line went away ({error})")])
        finally:
            self.transport = None
            self.loop_stepped = time.monotonic()  # a close that never returns: stuck
            self.status.set(device_open=False)
            await transport.close()

    def loop_stuck(self, limit_s: float) -> bool:
        """The device loop is neither serving a transport nor has it stepped (tried an
        open) for `limit_s`: an open or a close that never returns (the watchdog's
        check; a shoe that is silent while its line is open is the link's liveness)."""
        stepped = self.loop_stepped
        return self.transport is None and stepped is not None and \
            time.monotonic() - stepped > limit_s

    # -- the timer -------------------------------------------------------------------------

    def arm_timer(self) -> None:
        """(Re)arm the one timer for whatever is due first (at most TIMER_MAX_S away)."""
        if not self._accepting:
            return  # stopping: the journal is about to close
        loop = asyncio.get_running_loop()
        delay = TIMER_MAX_S
        if (t := self.link.get_timer()) is not None:
            delay = min(delay, t - time.monotonic())
        if (d := self.recorder.engine.next_deadline()) is not None:
            delay = min(delay, d - self.recorder.uptime.now())
        due = loop.time() + max(0.0, delay)
        handle = self._timer
        if handle is not None:
            if handle.when() <= due:
                return
            handle.cancel()
        self._timer = loop.call_at(due, self._fire)

    def stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None

    def _fire(self) -> None:
        self._timer = None
        try:
            self.on_timer()
            self.timer_fired = time.monotonic()
            self.on_timer_ok()
        except Exception as error:
            self.log.error("timer_failed", error=repr(error), exc_info=error)
            self.on_timer_failed(error)
        self.arm_timer()

    def on_timer(self) -> None:
        """Link retransmissions and liveness, and the engine's pull timeout."""
        self.link.handle_timer(time.monotonic())
        self._drain_link()
        self._log_rejects()
        deadline = self.recorder.engine.next_deadline()
        if deadline is not None and self.recorder.uptime.now() >= deadline:
            self._commit([Tick(**stamp(self.recorder.uptime))])
        self._flush()

"""The simulated shoe: firmware_protocol in the device role, with a dealer at the table.

:class:`SimulatedShoe` is sans-IO like the link it wraps: `receive_data(data, now)`,
`data_to_send()`, `poll(now)` (deal when it is time) and `next_wakeup()`. Adapters put it
on a pseudo-terminal (:class:`PtyShoe`), a TCP port (:class:`TcpShoe`, for pyserial's
``socket://``) or a pyusb backend (:mod:`shoed.usb_sim`).

The dealer deals seeded shuffled shoes and follows the procedure: commencement card and
its burns, then a burn and the hand's cards, as the drawing rules ask (it mirrors the
host's rules with its own engine). It waits while the exit gate is locked (betting open
in ``commands`` mode, a hold). Scripted faults: multi-card pulls sent in sensor order
(lowest first), unnecessary cards, unread cards, RFID codes, line noise, a reboot.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import random
import tty
from dataclasses import dataclass, field
from typing import Any

from firmware_protocol import (
    BufferFull,
    Card,
    CardUnread,
    CutCard,
    Fault,
    GetInfo,
    Heartbeat,
    Hello,
    Link,
    MessageReceived,
    Role,
    SetGate,
    SetIndicator,
    ShoeLoaded,
    optical_code,
)
from firmware_protocol.messages import Capability

from .aio import wait_event
from .core.cards import ALL_CARDS
from .core.config import EngineConfig
from .core.engine import Engine
from .core.errors import RulesError
from .core.game import PB_POSITIONS, next_needed
from .core.inputs import DeviceItem, DeviceShoeLoaded
from .core.integrity import DETECTORS, IntegrityThresholds

CUT = "CUT"
ALL_CAPS = int(Capability.OPTICAL_READER | Capability.EXIT_GATE | Capability.INDICATOR_LIGHT
               | Capability.CUT_CARD_SENSOR)


WATCH_OFF = IntegrityThresholds(**dict.fromkeys(DETECTORS, 0))


@dataclass
class Script:
    """What the simulated dealer and shoe do besides dealing cleanly."""

    pace_s: float = 1.0  # between pulls; 0 = full speed (next pull once the link is idle)
    multi_pull_rate: float = 0.0  # a pull takes two cards (sensor order: lowest first)
    unnecessary_rate: float = 0.0  # an extra card after a hand
    unread_rate: float = 0.0
    noise_rate: float = 0.0  # chance per write of corrupting a byte on the line
    duplicate_rate: float = 0.0  # chance per write of the line delivering it twice
    truncate_rate: float = 0.0  # chance per write of losing its tail
    reboot_after_cards: int | None = None
    cut_card_from_end: int = 14
    rfid: dict[str, str] | None = None  # card -> UID hex (then code_kind 2)
    shoes: int = 1  # how many shoes to deal (0 = forever)
    betting_s: float = 0.0  # commands mode: how long the simulated game server waits
    unshuffled: bool = False  # every pack in new-deck order (the shoe-order watch's case)


@dataclass
class SimulatedShoe:
    decks: int = 8
    seed: int = 1
    capabilities: int = ALL_CAPS
    script: Script = field(default_factory=Script)
    serial_no: str = "SIM-0001"
    fw_version: str = "sim-1.0"
    now: float = 0.0
    record_to: Any = None  # a text file: every dealt card, one a line (for fault tests)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        # Line faults draw from their own stream: how often the line is written depends on
        # timing (retransmissions), and must not change which cards the seed deals.
        self.line_rng = random.Random(self.seed ^ 0x11E5EED)
        self.gate_locked = False
        self.indicator = 0
        self.cards_dealt = 0
        self.dealt: list[str] = []  # every card that left the shoe, upper card of a pull first
        self.shoes_dealt = 0
        self.finished = False
        self._boot(self.now)
        self._shoe: list[str] = []
        self._next_pull_at = self.now + 0.2
        self._pull_id = 0
        self._mirror: Engine | None = None
        self._mirror_pull_id = 0

    # -- boot and the link ----------------------------------------------------------------

    def _boot(self, now: float) -> None:
        self.boot_id = self.rng.getrandbits(32)
        self.link = Link(Role.DEVICE, now)
        self.uptime0 = now
        self.card_index = 0
        self.gate_locked = False
        self._last_heartbeat = now
        self._send(Hello(1, self.boot_id, self.capabilities, self.fw_version, self.serial_no),
                   now)

    def reboot(self, now: float) -> None:
        """Power cycle: pending frames are lost, seq and card_index restart."""
        self._boot(now)

    def _uptime(self, now: float) -> int:
        return int((now - self.uptime0) * 1000) & 0xFFFFFFFF

    def _send(self, message: Any, now: float) -> bool:
        try:
            self.link.send(message, now)
        except BufferFull:
            self.link.spend_seq()  # no gate to stop the dealer: the item is lost, seq spent
            return False
        return True

    def receive_data(self, data: bytes, now: float) -> None:
        self.link.receive_data(data, now)
        while (event := self.link.next_event()) is not None:
            self.on_link_event(event, now)

    def on_link_event(self, event: Any, now: float) -> None:
        """What the device does with a link event (benchmarks extend this to time ACKs)."""
        if isinstance(event, MessageReceived):
            message = event.message
            if isinstance(message, GetInfo):
                self._send(Hello(1, self.boot_id, self.capabilities, self.fw_version,
                                 self.serial_no), now)
            elif isinstance(message, SetGate):
                self.gate_locked = bool(message.locked)
            elif isinstance(message, SetIndicator):
                self.indicator = message.pattern

    def data_to_send(self) -> bytes:
        """The bytes for the line, with the script's line faults applied."""
        data = self.link.data_to_send()
        if not data:
            return data
        script, rng = self.script, self.line_rng
        if script.noise_rate and rng.random() < script.noise_rate:
            i = rng.randrange(len(data))
            data = data[:i] + bytes([rng.randrange(1, 256)]) + data[i + 1:]
        if script.truncate_rate and rng.random() < script.truncate_rate:
            data = data[: rng.randrange(len(data))]
        if script.duplicate_rate and rng.random() < script.duplicate_rate:
            data = data + data
        return data

    def next_wakeup(self) -> float:
        """When poll() next has something to do (never 'now' forever: no busy loop)."""
        # A heartbeat goes only on an idle link; while busy, the link's timer wakes us.
        candidates = [self._last_heartbeat + 1.0] if self.link.idle else []
        can_deal = not self.finished and (not self.gate_locked or self._between_shoes()) and (
            self.script.pace_s > 0 or self.link.pending_count < 2)
        if can_deal:
            candidates.append(self._next_pull_at)
        if (t := self.link.get_timer()) is not None:
            candidates.append(t)
        return min(candidates, default=self._last_heartbeat + 1.0)

    # -- the dealer ---------------------------------------------------------------------

    def _new_shoe(self, now: float) -> None:
        shoe = list(ALL_CARDS) * self.decks  # new-deck order: AS..KS, AH..KH, AD.., AC..
        if not self.script.unshuffled:
            self.rng.shuffle(shoe)
        shoe.insert(max(1, len(shoe) - self.script.cut_card_from_end), CUT)
        self._shoe = shoe
        self.card_index = 0
        # The dealer's own view of the procedure: no shoe-order watch (it would hold where
        # the dealer, waiting for the gate, simply deals on once the host lets him).
        self._mirror = Engine(EngineConfig(table_id="sim", decks=self.decks,
                                           betting_control="none", integrity=WATCH_OFF))
        self._mirror.handle(DeviceShoeLoaded(at=now))
        self._send(ShoeLoaded(self._uptime(now)), now)

    def poll(self, now: float) -> None:
        """Retransmit, heartbeat, and deal the next pull when it is time."""
        self.link.handle_timer(now)
        while (event := self.link.next_event()) is not None:
            self.on_link_event(event, now)
        if self.finished:
            self._heartbeat(now)
            return
        if now >= self._next_pull_at and (not self.gate_locked or self._between_shoes()):
            full_speed = self.script.pace_s <= 0
            if not full_speed or self.link.pending_count < 2:
                self._deal(now)
                pace = self.script.pace_s
                self._next_pull_at = now + (pace * self.rng.uniform(0.7, 1.3) if pace else 0.0)
        self._heartbeat(now)

    def _between_shoes(self) -> bool:
        """No shoe in the device, or the last one ended: loading a shoe is not a draw,
        so the exit gate (locked after the last hand) does not stop it."""
        mirror = self._mirror
        return mirror is None or mirror.public_state()["shoe_state"] in ("shoe_ended",
                                                                          "shoe_voided")

    def _heartbeat(self, now: float) -> None:
        if self.link.idle and now - self._last_heartbeat >= 1.0:
            status = int(self.gate_locked) << 1 | (1 if self._shoe else 0)
            self.link.send(Heartbeat(self._uptime(now), status), now)
            self._last_heartbeat = now

    def _deal(self, now: float) -> None:
        if self._mirror is None or not self._shoe:
            if self.script.shoes and self.shoes_dealt >= self.script.shoes:
                self.finished = True
                return
            self._new_shoe(now)
            return
        mirror = self._mirror
        state = mirror.public_state()
        if state["shoe_state"] in ("shoe_ended", "shoe_voided"):
            self.shoes_dealt += 1
            self._shoe = []
            self._mirror = None
            self._next_pull_at = now + max(self.script.pace_s * 3, 0.0)
            return
        count = 1
        if state["shoe_state"] == "dealing" and self.rng.random() < self.script.multi_pull_rate:
            count = 2
        cards = self._shoe[:count]
        del self._shoe[:count]
        if (state["shoe_state"] == "dealing" and CUT not in cards and self._shoe
                and self._shoe[0] != CUT and self.rng.random() < self.script.unnecessary_rate
                and self._completes_hand(state, cards)):
            # The dealer pulls one card too many with the hand's last card: unnecessary.
            cards.append(self._shoe.pop(0))
        self._pull(cards, now)
        self._mirror_feed(cards, now)

    @staticmethod
    def _completes_hand(state: dict[str, Any], cards: list[str]) -> bool:
        dealt = [c["card"] for c in state["cards"] if c["position"] in PB_POSITIONS]
        if None in dealt:
            return False
        try:
            return next_needed(dealt + cards) is None
        except RulesError:
            return True

    def _mirror_feed(self, cards: list[str], now: float) -> list[Any]:
        assert self._mirror is not None
        events = []
        size = len(cards)
        self._mirror_pull_id += 1
        pull_id = self._mirror_pull_id
        for pos, card in enumerate(cards, start=1):
            item = (DeviceItem(at=now, item="cut", pull_id=pull_id, pull_pos=pos,
                               pull_size=size) if card == CUT else
                    DeviceItem(at=now, item="card", card=card, pull_id=pull_id,
                               pull_pos=pos, pull_size=size))
            events += self._mirror.handle(item).events
        return events

    def _pull(self, cards: list[str], now: float) -> None:
        """One physical draw: items numbered upper first, sent lowest first (sensor order)."""
        self._pull_id = (self._pull_id + 1) % 65536
        size = len(cards)
        items: list[Any] = []
        for pos, card in enumerate(cards, start=1):
            up = self._uptime(now)
            if card == CUT:
                if self.capabilities & Capability.CUT_CARD_SENSOR:
                    items.append(CutCard(up, self._pull_id, pos, size))
                continue
            self.card_index += 1
            self.cards_dealt += 1
            self.dealt.append(card)
            if self.record_to is not None:  # card, then when it left (CLOCK_MONOTONIC)
                self.record_to.write(f"{card}\t{now:.6f}\n")
            if self.rng.random() < self.script.unread_rate:
                items.append(CardUnread(up, self.card_index, self._pull_id, pos, size, 1))
            elif self.script.rfid is not None:
                uid = bytes.fromhex(self.script.rfid[card])
                items.append(Card(up, self.card_index, self._pull_id, pos, size, 2, uid, 95))
            else:
                items.append(Card(up, self.card_index, self._pull_id, pos, size, 1,
                                  optical_code(card), self.rng.randint(80, 100)))
        for item in reversed(items):
            self._send(item, now)
        reboot_at = self.script.reboot_after_cards
        if reboot_at is not None and self.cards_dealt >= reboot_at:
            self.script.reboot_after_cards = None
            self.reboot(now)

    def raise_fault(self, code: int, active: bool, now: float) -> None:
        self._send(Fault(self._uptime(now), code, int(active)), now)


def rfid_manifest(decks: int, seed: int = 7) -> tuple[dict[str, str], str]:
    """A deck manifest for RFID simulation: card -> UID, and its CSV text (uid,card)."""
    rng = random.Random(seed)
    uids: dict[str, str] = {}
    for card in ALL_CARDS:
        uids[card] = "04" + rng.getrandbits(48).to_bytes(6, "big").hex().upper()
    lines = ["uid,card"] + [f"{uid},{card}" for card, uid in uids.items()]
    del decks  # every copy of a card carries the same UID in this simulation
    return uids, "\n".join(lines) + "\n"


# --- adapters -----------------------------------------------------------------------------


class PtyShoe:
    """The simulated shoe on a pseudo-terminal, as a USB-serial adapter would appear.

    `link_path` (optional) is kept as a symlink to the current pty, like a udev
    `/dev/shoe` symlink, so that `unplug()`/`replug()` can give the daemon a new pty.
    """

    def __init__(self, shoe: SimulatedShoe, link_path: pathlib.Path | None = None) -> None:
        self.shoe = shoe
        self.link_path = link_path
        self.master: int | None = None
        self.slave: int | None = None
        self.path = ""
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def plug(self) -> str:
        master, slave = os.openpty()
        tty.setraw(slave)  # no echo, no line discipline: a binary line like a real adapter
        tty.setraw(master)
        os.set_blocking(master, False)
        self.master, self.slave = master, slave
        self.path = os.ttyname(slave)
        if self.link_path is not None:
            tmp = self.link_path.with_suffix(".tmp")
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            tmp.symlink_to(self.path)
            tmp.replace(self.link_path)
        asyncio.get_running_loop().add_reader(master, self._readable)
        return self.path

    def unplug(self) -> None:
        if self.master is None:
            return
        asyncio.get_running_loop().remove_reader(self.master)
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)  # type: ignore[arg-type]
        self.master = self.slave = None

    def _readable(self) -> None:
        assert self.master is not None
        try:
            data = os.read(self.master, 4096)
        except BlockingIOError:
            return
        except OSError:
            return
        self.shoe.receive_data(data, asyncio.get_running_loop().time())
        self._wake.set()

    def _write(self) -> None:
        data = self.shoe.data_to_send()
        if data and self.master is not None:
            with contextlib.suppress(OSError):
                os.write(self.master, data)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self.shoe.poll(loop.time())
            self._write()
            delay = max(0.0, self.shoe.next_wakeup() - loop.time())
            self._wake.clear()
            await wait_event(self._wake, min(delay, 0.5))


class TcpShoe:
    """The simulated shoe behind a serial server: the daemon uses ``socket://host:port``."""

    def __init__(self, shoe: SimulatedShoe) -> None:
        self.shoe = shoe
        self._writer: asyncio.StreamWriter | None = None
        self._wake = asyncio.Event()

    async def serve(self, host: str, port: int) -> asyncio.Server:
        return await asyncio.start_server(self._client, host, port)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        loop = asyncio.get_running_loop()
        while data := await reader.read(4096):
            self.shoe.receive_data(data, loop.time())
            self._wake.set()
        self._writer = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self.shoe.poll(loop.time())
            data = self.shoe.data_to_send()
            if data and self._writer is not None:
                self._writer.write(data)
            delay = max(0.0, self.shoe.next_wakeup() - loop.time())
            self._wake.clear()
            await wait_event(self._wake, min(delay, 0.5))

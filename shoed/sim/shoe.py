"""The simulated shoe: firmware_protocol in the device role, with a dealer at the table.

:class:`SimulatedShoe` is sans-IO like the link it wraps: `receive_data(data, now)`,
`data_to_send()`, `poll(now)` (deal when it is time) and `next_wakeup()`. Adapters put it
on a pseudo-terminal (:class:`PtyShoe`), a TCP port (:class:`TcpShoe`, for pyserial's
``socket://``) or a pyusb backend (:mod:`shoed.sim.usb`).

The dealer deals seeded shuffled shoes and follows the procedure: commencement card and
its burns, then a burn and the hand's cards, as the drawing rules ask, until the cut card
(:class:`DealerModel`: the dealer's own small model of dealing-rules.md, sharing no code
with the host's engine, so that the simulated shoe is an independent check of it). It
waits while the exit gate is locked (betting open in ``commands`` mode, a hold).
Scripted faults: multi-card pulls sent in sensor order (lowest first), unnecessary cards,
unread cards, RFID codes, line noise, a reboot.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
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
from firmware_protocol.link import DEVICE_BUFFER
from firmware_protocol.messages import Capability, FaultCode
from shoed.aio import wait_set
from shoed.core.cards import ALL_CARDS

CUT = "CUT"
ALL_CAPS = int(Capability.OPTICAL_READER | Capability.EXIT_GATE | Capability.INDICATOR_LIGHT
               | Capability.CUT_CARD_SENSOR)


def points(card: str) -> int:
    """Baccarat value of a card: A = 1, 2..9 as marked, 10 and faces 0."""
    rank = card[0]
    return 1 if rank == "A" else int(rank) if rank.isdigit() else 0


# The banker's third-card table (dealing-rules.md section 1) once the player has drawn:
# banker's two-card total -> values of the player's third card on which the banker draws.
BANKER_DRAWS = {0: set(range(10)), 1: set(range(10)), 2: set(range(10)),
                3: set(range(10)) - {8}, 4: set(range(2, 8)), 5: set(range(4, 8)),
                6: {6, 7}, 7: set()}


def hand_complete(hand: list[str]) -> bool:
    """Whether a hand's cards in draw order (P1 B1 P2 B2 [P3] [B3]) need no more."""
    if len(hand) < 4:
        return False
    player = (points(hand[0]) + points(hand[2])) % 10
    banker = (points(hand[1]) + points(hand[3])) % 10
    if player >= 8 or banker >= 8:  # a natural: nobody draws
        return True
    if player >= 6:  # the player stands; the banker draws on 0..5
        return banker >= 6 or len(hand) >= 5
    if len(hand) < 5:
        return False  # the player draws
    banker_draws = banker <= 7 and points(hand[4]) in BANKER_DRAWS[banker]
    return len(hand) >= (6 if banker_draws else 5)


@dataclass
class DealerModel:
    """What the dealer at a stand-alone table knows of the procedure (dealing-rules.md
    section 3): the commencement card and as many burns as its value (tens and faces 10),
    a burn before every hand, the hand's cards as the drawing rules ask, and the cut card:
    between hands it ends the shoe at once, during a hand that hand is the last, during
    commencement it is ignored. Surplus cards of a pull become the next hand's burn (then
    its P1), as the host's default profile takes them. Cards in draw order, `CUT` for
    the cut card. In `commands` mode a hand is in progress from `close_betting` on (rule
    5): :meth:`betting_closed` says so, and a cut card before its burn makes it the last.
    """

    phase: str = "commencement"  # commencement, between_hands, closed, dealing, ended
    hands_done: int = 0
    burns_left: int | None = None
    hand: list[str] = field(default_factory=list)
    last_hand: bool = False
    cut_seen: bool = False

    def take(self, card: str) -> None:
        if self.phase == "ended":
            return  # a card after the shoe's end makes no hand
        if card == CUT:
            if self.phase != "commencement" and not self.cut_seen:
                self.cut_seen = True
                if self.phase == "between_hands":
                    self.phase = "ended"
                else:  # dealing, or closed: a hand in progress
                    self.last_hand = True
            return
        if self.phase == "commencement":
            if self.burns_left is None:
                self.burns_left = points(card) or 10
            else:
                self.burns_left -= 1
            if self.burns_left == 0:
                self.phase = "between_hands"
        elif self.phase in ("between_hands", "closed"):
            self.hand = []  # this card is the hand's burn
            self.phase = "dealing"
        else:
            self.hand.append(card)
            if hand_complete(self.hand):
                self.hands_done += 1
                self.hand = []
                self.phase = "ended" if self.last_hand else "between_hands"

    def betting_closed(self) -> None:
        """`commands` mode: the game server closed betting; the next hand is in progress
        before its burn is drawn."""
        if self.phase == "between_hands":
            self.phase = "closed"

    def completes_hand(self, cards: list[str]) -> bool:
        """Whether these cards, drawn next, complete the hand in progress."""
        trial = DealerModel(self.phase, self.hands_done, self.burns_left, list(self.hand),
                            self.last_hand, self.cut_seen)
        for card in cards:
            trial.take(card)
        return trial.hands_done > self.hands_done


BETTING_LOCK_WAIT_S = 2.0  # the longest the dealer waits for betting to open (above)


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
    # `commands` mode: after commencement and after every hand the dealer waits for the
    # host to lock the exit gate (betting open) before the next draw, as a dealer waits for
    # the game server's "place your bets"; the gate's opening (close_betting) then lets
    # them deal on. A host that sends no lock within BETTING_LOCK_WAIT_S is dealt to anyway.
    wait_for_betting: bool = False
    # After an unread card the dealer loads no new shoe (even if that card ended this one)
    # until the gate opens or `SimulatedShoe.release()` says the hold was resolved.
    wait_for_release: bool = False
    unshuffled: bool = False  # every pack in new-deck order (the shoe-order watch's case)
    # The first multi-card pull once this many cards were dealt has its upper item (the
    # last one the sensor sends) sent `late_upper_s` later, or never (None); the dealer
    # draws nothing until it is sent (a pull the sensor read half, then the rest).
    late_upper_after_cards: int | None = None
    late_upper_s: float | None = None


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
        # The true face of every card sent unread, by its device card_index (this shoe): what
        # a supervisor reads off the card itself. The demo's simulated supervisor asks it.
        self.unread_cards: dict[int, str] = {}
        self.hold_pending = False  # an unread card sent, its hold not known to be resolved
        self.shoes_dealt = 0
        self.finished = False
        self._boot(self.now)
        self._shoe: list[str] = []
        self._next_pull_at = self.now + 0.2
        self._pull_id = 0
        self._dealer: DealerModel | None = None  # the shoe being dealt, as the dealer sees it
        self.gate_locks = 0  # SetGate frames that locked an open gate
        # Betting is due to open (Script.wait_for_betting): (since when, gate_locks then).
        self._betting_due: tuple[float, int] | None = None
        # gate_locks when betting last opened: a lock since, then an open gate, is the
        # host closing betting (the gate is locked while betting is open, rule 14).
        self._opened_at_locks: int | None = None
        # Script.late_upper_*: the held item and when it goes (inf: never), once.
        self._late: tuple[Any, float] | None = None
        self._late_done = False

    # -- boot and the link ----------------------------------------------------------------

    def _boot(self, now: float) -> None:
        self.boot_id = self.rng.getrandbits(32)
        self.link = Link(Role.DEVICE, now)
        self.uptime0 = now
        self.card_index = 0
        self.gate_locked = False
        self.buffer_full = False  # the gate locked by the device itself (FAULT 6)
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
                if message.locked and not self.gate_locked:
                    self.gate_locks += 1
                self.gate_locked = bool(message.locked)
                if not self.gate_locked:
                    self.hold_pending = False
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

    @property
    def holding_upper(self) -> bool:
        """A pull's upper item is held back (Script.late_upper_*), not yet sent."""
        return self._late is not None

    def next_wakeup(self) -> float:
        """When poll() next has something to do (never 'now' forever: no busy loop)."""
        # A heartbeat goes only on an idle link; while busy, the link's timer wakes us.
        candidates = [self._last_heartbeat + 1.0] if self.link.idle else []
        if self._late is not None:
            candidates.append(self._late[1])
        can_deal = self._late is None and not self.finished and (
            not self.gate_locked or self._between_shoes()) and (
            self.script.pace_s > 0 or self.link.pending_count < 2) and not self._buffer_full(
            self.now)
        if can_deal:
            due = self._betting_due
            candidates.append(self._next_pull_at if due is None
                              else max(self._next_pull_at, due[0] + BETTING_LOCK_WAIT_S))
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
        self._dealer = DealerModel()
        self._send(ShoeLoaded(self._uptime(now)), now)

    def poll(self, now: float) -> None:
        """Retransmit, heartbeat, and deal the next pull when it is time."""
        self.link.handle_timer(now)
        while (event := self.link.next_event()) is not None:
            self.on_link_event(event, now)
        if self._late is not None:  # Script.late_upper_*: nothing drawn meanwhile
            item, due = self._late
            if now >= due:
                self._late = None
                self._send(item, now)
            self._heartbeat(now)
            return
        if self.finished:
            self._heartbeat(now)
            return
        self.now = now
        if now >= self._next_pull_at and (not self.gate_locked or self._between_shoes()) \
                and not self._waiting_for_betting(now) and not self._buffer_full(now):
            full_speed = self.script.pace_s <= 0
            if not full_speed or self.link.pending_count < 2:
                self._deal(now)
                pace = self.script.pace_s
                self._next_pull_at = now + (pace * self.rng.uniform(0.7, 1.3) if pace else 0.0)
        self._heartbeat(now)

    def _buffer_full(self, now: float) -> bool:
        """A shoe with an exit gate locks it when its frame buffer is nearly full (room is
        kept for a whole pull and for FAULT 6, firmware-protocol.md section 3): the dealer
        cannot draw until the host has taken frames again. Without a gate it deals on and
        drops what does not fit (a gap the host sees)."""
        free = self.link.free_slots
        if not self.capabilities & Capability.EXIT_GATE or free is None:
            return False
        if not self.buffer_full and free < 4:
            self.buffer_full = True
            self._send(Fault(self._uptime(now), FaultCode.BUFFER_FULL, 1), now)
        elif self.buffer_full and free >= DEVICE_BUFFER // 2:
            self.buffer_full = False
            self._send(Fault(self._uptime(now), FaultCode.BUFFER_FULL, 0), now)
        return self.buffer_full

    def _between_shoes(self) -> bool:
        """No shoe in the device, or the last one ended: loading a shoe is not a draw,
        so the exit gate (locked after the last hand) does not stop it."""
        if self.hold_pending:
            return False  # the host holds an unread card: the dealer waits for the supervisor
        return self._dealer is None or self._dealer.phase == "ended"

    def _waiting_for_betting(self, now: float) -> bool:
        """Betting is due to open and the host has not locked the gate for it yet."""
        due = self._betting_due
        if due is None:
            return False
        if self.gate_locks > due[1] or now - due[0] >= BETTING_LOCK_WAIT_S:
            self._betting_due = None
            return False
        return True

    def release(self) -> None:
        """The host's hold was resolved (the demo sees it on MQTT)."""
        self.hold_pending = False

    def _heartbeat(self, now: float) -> None:
        if self.link.idle and now - self._last_heartbeat >= 1.0:
            status = int(self.gate_locked) << 1 | (1 if self._shoe else 0)
            self.link.send(Heartbeat(self._uptime(now), status), now)
            self._last_heartbeat = now

    def _deal(self, now: float) -> None:
        dealer = self._dealer
        if dealer is None or not self._shoe:
            if self.script.shoes and self.shoes_dealt >= self.script.shoes:
                self.finished = True
                return
            self._new_shoe(now)
            return
        if dealer.phase == "ended":
            self.shoes_dealt += 1
            self._shoe = []
            self._dealer = None
            self._next_pull_at = now + max(self.script.pace_s * 3, 0.0)
            return
        if (dealer.phase == "between_hands" and self._opened_at_locks is not None
                and self.gate_locks > self._opened_at_locks and not self.gate_locked):
            dealer.betting_closed()  # locked for betting, open again: betting closed
        count = 1
        if dealer.phase == "dealing" and self.rng.random() < self.script.multi_pull_rate:
            count = 2
        cards = self._shoe[:count]
        del self._shoe[:count]
        if (dealer.phase == "dealing" and CUT not in cards and self._shoe
                and self._shoe[0] != CUT and self.rng.random() < self.script.unnecessary_rate
                and dealer.completes_hand(cards)):
            # The dealer pulls one card too many with the hand's last card: unnecessary.
            cards.append(self._shoe.pop(0))
        self._pull(cards, now)
        opened = False  # a result, or commencement's end: betting opens (commands mode)
        for card in cards:
            before = dealer.phase
            dealer.take(card)
            opened = opened or (dealer.phase == "between_hands" != before)
        # (a pull's surplus after the result has already become the next hand's burn:
        # the dealer still waits for betting before that hand's P1)
        if self.script.wait_for_betting and opened:
            self._betting_due = (now, self.gate_locks)
            self._opened_at_locks = self.gate_locks

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
                self.unread_cards[self.card_index] = card
                self.hold_pending = self.script.wait_for_release
                items.append(CardUnread(up, self.card_index, self._pull_id, pos, size, 1))
            elif self.script.rfid is not None:
                uid = bytes.fromhex(self.script.rfid[card])
                items.append(Card(up, self.card_index, self._pull_id, pos, size, 2, uid, 95))
            else:
                items.append(Card(up, self.card_index, self._pull_id, pos, size, 1,
                                  optical_code(card), self.rng.randint(80, 100)))
        late = self.script.late_upper_after_cards
        if late is not None and not self._late_done and len(items) >= 2 \
                and self.cards_dealt >= late:
            delay = self.script.late_upper_s
            self._late_done = True
            self._late = (items.pop(0), math.inf if delay is None else now + delay)
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
        """Pull the adapter: the pty goes, and so does the symlink, as udev removes
        `/dev/shoe` (a dangling one would point at a pty number the next process to open a
        pty is given: the daemon would open another program's line)."""
        if self.master is None:
            return
        if self.link_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.link_path.unlink()
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
            await wait_set(self._wake, min(delay, 0.5))


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
            await wait_set(self._wake, min(delay, 0.5))

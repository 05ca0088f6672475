"""Serial edge cases against the real daemon on a real pty (opened by it with pyserial).

The device end here is written frame by frame, byte by byte, so that each case is exactly
what a shoe's firmware (or a bad USB-serial adapter) could put on the line: frames
trickled one byte at a time 2 ms apart, pipelined without waiting for ACKs, bursts of
retransmissions, a boot id that changes every frame, a seq wrap across a daemon restart,
and frames split across reads at every offset. Each case checks what a consumer sees on
MQTT: every card once, in order, no `cards_lost`, and the ACKs the contract promises.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import random
import tty
from collections.abc import AsyncIterator
from typing import Any

import pytest
from rig import Collector, make_settings, wait_for

from firmware_protocol import (
    Ack,
    Card,
    Hello,
    RawFrame,
    ShoeLoaded,
    build_frame,
    optical_code,
)
from firmware_protocol.decoder import StreamDecoder
from firmware_protocol.messages import (
    HOST_TO_DEVICE,
    LINK_CONTROL,
    Message,
    decode_message,
    encode_payload,
    type_code_of,
)
from shoed.core.cards import ALL_CARDS
from shoed.daemon import Daemon
from shoed.sim.broker import PrivateMosquitto
from shoed.sim.shoe import ALL_CAPS

pytestmark = pytest.mark.broker

BOOT = 0x5EED0001


def frame(message: Message, seq: int) -> bytes:
    return build_frame(type_code_of(message), seq, encode_payload(message))


class RawShoe:
    """The device end of a pty, written by hand; ACKs every host frame, records ACKs."""

    def __init__(self, link_path: pathlib.Path) -> None:
        master, slave = os.openpty()
        tty.setraw(slave)
        tty.setraw(master)
        os.set_blocking(master, False)
        self.master, self.slave = master, slave
        link_path.symlink_to(os.ttyname(slave))
        self.decoder = StreamDecoder(HOST_TO_DEVICE | LINK_CONTROL)
        self.acks: list[int] = []
        self._writing = False
        self._held = b""  # our ACKs wait until a frame being trickled is complete
        asyncio.get_running_loop().add_reader(master, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self.master, 4096)
        except (BlockingIOError, OSError):
            return
        for result in self.decoder.feed(data):
            if not isinstance(result, RawFrame):
                continue
            message = decode_message(result.type_code, result.payload)
            if isinstance(message, Ack):
                self.acks.append(message.acked_seq)
            elif result.type_code not in LINK_CONTROL:  # GET_INFO, SET_GATE...: ACK it
                self._held += frame(Ack(result.seq), 0)
        if not self._writing:
            self._flush()

    def _flush(self) -> None:
        if self._held:
            os.write(self.master, self._held)
            self._held = b""

    async def write(self, data: bytes, byte_gap_s: float = 0.0) -> None:
        """Put `data` on the line; with `byte_gap_s`, one byte at a time."""
        if not byte_gap_s:
            await self.write_pieces([data])
        else:
            await self.write_pieces([data[i:i + 1] for i in range(len(data))], byte_gap_s)

    async def write_pieces(self, pieces: list[bytes], gap_s: float = 0.0) -> None:
        """Write each piece, `gap_s` apart. A UART sends one frame after the other: our ACKs
        of host frames go out only where a frame has ended."""
        self._writing = True
        try:
            for i, piece in enumerate(pieces):
                os.write(self.master, piece)
                if piece.endswith(b"\0"):
                    self._flush()
                if gap_s and i < len(pieces) - 1:
                    await asyncio.sleep(gap_s)
        finally:
            self._writing = False
            self._flush()

    async def acked(self, seq: int, times: int = 1, timeout: float = 10.0) -> None:
        await wait_for(lambda: self.acks.count(seq) >= times, timeout, f"ACK of seq {seq}")

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self.master)
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)


def cards(n: int, seed: int = 3) -> list[str]:
    deck = list(ALL_CARDS)
    random.Random(seed).shuffle(deck)
    return deck[:n]


def shoe_frames(dealt: list[str], first_seq: int = 0, boot_id: int = BOOT) -> list[bytes]:
    """HELLO, SHOE_LOADED and one card per pull, seq from `first_seq` (wrapping)."""
    messages: list[Message] = [Hello(1, boot_id, ALL_CAPS, "raw-1", "RAW-1"), ShoeLoaded(10)]
    messages += [Card(100 + i, i, i, 1, 1, 1, optical_code(card), 95)
                 for i, card in enumerate(dealt, start=1)]
    return [frame(m, (first_seq + i) % 65536) for i, m in enumerate(messages)]


class Table:
    def __init__(self, daemon: Daemon, shoe: RawShoe, collector: Collector) -> None:
        self.daemon, self.shoe, self.collector = daemon, shoe, collector

    def published_cards(self) -> list[dict[str, Any]]:
        return self.collector.of("card")

    async def wait_cards(self, n: int, timeout: float = 20.0) -> None:
        await wait_for(lambda: len(self.published_cards()) >= n, timeout, f"{n} card events")

    def check(self, dealt: list[str]) -> None:
        """Every card once and in order; no loss raised; seq of events gapless."""
        got = self.published_cards()
        assert [e["card"] for e in got] == dealt
        assert [e["card_index"] for e in got] == list(range(1, len(dealt) + 1))
        seqs = [e["seq"] for e in self.collector.events]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        assert not [a for a in self.collector.of("alarm") if a["code"] == "cards_lost"]


@contextlib.asynccontextmanager
async def table(tmp_path: pathlib.Path, broker: PrivateMosquitto) -> AsyncIterator[Table]:
    shoe = RawShoe(tmp_path / "shoe")
    settings = make_settings(tmp_path / "state", broker.url, str(tmp_path / "shoe"))
    collector = Collector(broker.port, settings.topic_root)
    tasks = [asyncio.create_task(collector.run())]
    await wait_for(collector.connected.is_set, 10, "collector connected")
    daemon = Daemon(settings)
    running = asyncio.create_task(daemon.run())
    tasks.append(running)
    await wait_for(lambda: daemon.status.device_open, 10, "the daemon to open the pty")
    try:
        yield Table(daemon, shoe, collector)
    finally:
        daemon.request_stop()
        await asyncio.wait([running], timeout=10)
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=10)
        shoe.close()


async def restart(t: Table, tmp_path: pathlib.Path, broker: PrivateMosquitto) -> asyncio.Task[Any]:
    """Stop the daemon and start a new one on the same journal and pty."""
    t.daemon.request_stop()
    for _ in range(200):
        if not t.daemon.status.device_open:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)  # its run() returns; the pty lock is released
    settings = make_settings(tmp_path / "state", broker.url, str(tmp_path / "shoe"))
    t.daemon = Daemon(settings)
    task = asyncio.create_task(t.daemon.run())
    await wait_for(lambda: t.daemon.status.device_open, 10, "the new daemon to open the pty")
    return task


def test_frames_trickled_one_byte_every_2ms(tmp_path: pathlib.Path,
                                            broker: PrivateMosquitto) -> None:
    dealt = cards(12)

    async def main() -> None:
        async with table(tmp_path, broker) as t:
            for seq, data in enumerate(shoe_frames(dealt)):
                await t.shoe.write(data, byte_gap_s=0.002)
                await t.shoe.acked(seq)
            await t.wait_cards(len(dealt))
            t.check(dealt)
    asyncio.run(main())


def test_frames_pipelined_without_waiting_for_acks(tmp_path: pathlib.Path,
                                                   broker: PrivateMosquitto) -> None:
    dealt = cards(40)

    async def main() -> None:
        async with table(tmp_path, broker) as t:
            frames = shoe_frames(dealt)
            await t.shoe.write(b"".join(frames))  # all at once, no ACK awaited
            for seq in range(len(frames)):
                await t.shoe.acked(seq)
            await t.wait_cards(len(dealt))
            t.check(dealt)
            assert t.shoe.acks[:len(frames)] == list(range(len(frames)))  # in order
    asyncio.run(main())


def test_bursts_of_retransmissions(tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    dealt = cards(20)

    async def main() -> None:
        async with table(tmp_path, broker) as t:
            for seq, data in enumerate(shoe_frames(dealt)):
                await t.shoe.write(data * 6)  # a burst before the ACK could come back
                await t.shoe.acked(seq)
                await t.shoe.write(data * 3)  # as if the ACK was lost: ACKed again
                await t.shoe.acked(seq, times=2)
            await t.wait_cards(len(dealt))
            await asyncio.sleep(0.3)  # a late second delivery would show now
            t.check(dealt)
            link = t.daemon.session.link
            assert link is not None and link.stats["duplicates"] > 0
    asyncio.run(main())


def test_boot_id_changing_every_frame(tmp_path: pathlib.Path,
                                      broker: PrivateMosquitto) -> None:
    """Every frame a HELLO of a new boot (seq 0 each time): each is ACKed, none is taken
    for a duplicate of the last, no loss is counted, and the shoe that settles is served."""
    boots = [0x1000 + i for i in range(15)]
    dealt = cards(10)

    async def main() -> None:
        async with table(tmp_path, broker) as t:
            for i, boot in enumerate(boots, start=1):
                await t.shoe.write(frame(Hello(1, boot, ALL_CAPS, "raw-1", "RAW-1"), 0))
                await t.shoe.acked(0, times=i)
            await wait_for(lambda: len([a for a in t.collector.of("alarm")
                                        if a["code"] == "device_rebooted"]) >= len(boots) - 1,
                           10, "a device_rebooted per new boot")
            await wait_for(lambda: t.collector.retained.get("device", {}).get("boot_id")
                           == boots[-1], 10, "the last boot on the device topic")
            # The last boot goes on dealing: seq continues from its HELLO.
            for seq, data in enumerate(shoe_frames(dealt, boot_id=boots[-1])[1:], start=1):
                await t.shoe.write(data)
                await t.shoe.acked(seq)
            await t.wait_cards(len(dealt))
            t.check(dealt)
            link = t.daemon.session.link
            assert link is not None and link.stats["duplicates"] == 0
    asyncio.run(main())


def test_seq_wrap_across_a_restart(tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    """65530..65535 before a daemon restart, the last one again after it (retransmitted:
    its ACK was lost with the daemon), then 0, 1, 2...: no gap, nothing twice."""
    dealt = cards(14)
    frames = shoe_frames(dealt, first_seq=65530)
    seqs = [(65530 + i) % 65536 for i in range(len(frames))]
    cut = seqs.index(65535) + 1

    async def main() -> None:
        async with table(tmp_path, broker) as t:
            for seq, data in zip(seqs[:cut], frames[:cut], strict=True):
                await t.shoe.write(data)
                await t.shoe.acked(seq)
            await wait_for(lambda: len(t.published_cards()) == cut - 2, 10,
                           "the cards before the restart on the broker")
            new_run = await restart(t, tmp_path, broker)
            try:
                await t.shoe.write(frames[cut - 1])  # 65535 again: ACKed, not delivered
                await t.shoe.acked(65535, times=2)
                for seq, data in zip(seqs[cut:], frames[cut:], strict=True):
                    await t.shoe.write(data)
                    await t.shoe.acked(seq)
                await t.wait_cards(len(dealt))
                await asyncio.sleep(0.3)
                t.check(dealt)
            finally:
                t.daemon.request_stop()
                await asyncio.wait([new_run], timeout=10)
    asyncio.run(main())


def test_frames_split_across_reads_at_every_offset(tmp_path: pathlib.Path,
                                                   broker: PrivateMosquitto) -> None:
    """Each card frame arrives in two writes, 3 ms apart, cut at a different offset, until
    every offset of the frame (1..len-1, the delimiter's included) has been the cut; then
    pairs of frames written together, cut at varying offsets (in either frame, or
    between them)."""
    dealt = cards(52)

    async def main() -> None:
        async with table(tmp_path, broker) as t:
            frames = shoe_frames(dealt)
            for seq in (0, 1):
                await t.shoe.write(frames[seq])
                await t.shoe.acked(seq)
            cuts: dict[int, set[int]] = {}
            seq = 2
            singles = 30
            while seq < 2 + singles:
                data = frames[seq]
                done = cuts.setdefault(len(data), set())
                cut = min(set(range(1, len(data))) - done, default=1 + seq % (len(data) - 1))
                done.add(cut)
                await t.shoe.write_pieces([data[:cut], data[cut:]], 0.003)
                await t.shoe.acked(seq)
                seq += 1
            for length, done in cuts.items():
                assert done == set(range(1, length)), f"{length}-byte frames: {sorted(done)}"
            while seq + 1 < len(frames):
                pair = frames[seq] + frames[seq + 1]
                cut = 1 + (seq * 7) % (len(pair) - 1)
                await t.shoe.write_pieces([pair[:cut], pair[cut:]], 0.003)
                await t.shoe.acked(seq + 1)
                seq += 2
            if seq < len(frames):
                await t.shoe.write(frames[seq])
                await t.shoe.acked(seq)
            await t.wait_cards(len(dealt))
            t.check(dealt)
            assert t.daemon.session.link is not None and not t.daemon.session.link.discards
    asyncio.run(main())


def test_a_gap_before_a_frame_of_unknown_type_is_a_loss(tmp_path: pathlib.Path,
                                                         broker: PrivateMosquitto) -> None:
    """Spec section 2: a frame of an unknown type has its seq accepted, so the next frame
    shows no gap; section 3: a seq jump within a boot is a loss. A lost frame just before
    such a frame is still reported: cards_lost, and the hand is held."""
    dealt = cards(3)

    async def main() -> None:
        async with table(tmp_path, broker) as t:
            frames = shoe_frames(dealt)
            for seq, data in enumerate(frames):
                await t.shoe.write(data)
                await t.shoe.acked(seq)
            await t.wait_cards(len(dealt))
            lost = len(frames)  # never arrives
            await t.shoe.write(build_frame(0x55, lost + 1, b"\x01"))  # NAKed 3, accepted
            await t.shoe.write(frame(Card(200, 9, 9, 1, 1, 1, optical_code("9S"), 95),
                                     lost + 2))
            await t.shoe.acked(lost + 2)
            await wait_for(lambda: [a for a in t.collector.of("alarm")
                                    if a["code"] == "cards_lost" and a["active"]], 10,
                           "cards_lost")
            assert [a["code"] for a in t.collector.of("alarm")
                    if a["code"] in ("cards_lost", "protocol_mismatch")] == [
                "cards_lost", "protocol_mismatch"]
            await wait_for(lambda: t.collector.retained.get("state", {}).get("hold"), 10,
                           "the hold")
            assert "cards_lost" in t.collector.retained["state"]["hold"]["reasons"]
    asyncio.run(main())


def test_a_flood_of_noise_is_summed_up_not_logged_frame_by_frame(
        tmp_path: pathlib.Path, broker: PrivateMosquitto,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A wrong baud rate puts a thousand bad frames a second on the line: one line per
    frame would flood the log (journald's rate limit then drops the daemon's other lines,
    errors included). The first is logged, the rest summed up; the cards go on."""
    import json

    from shoed import logs
    from shoed.device import session

    monkeypatch.setattr(session, "REJECTS_EVERY_S", 0.5)
    logs.configure("json", "info")
    dealt = cards(6)
    rng = random.Random(7)

    async def main() -> None:
        async with table(tmp_path, broker) as t:
            noise = [bytes(rng.randrange(1, 256) for _ in range(12)) + b"\x00"
                     for _ in range(1500)]
            await t.shoe.write_pieces(noise, 0.0003)
            await asyncio.sleep(1.5)  # the summary is due
            for seq, data in enumerate(shoe_frames(dealt)):
                await t.shoe.write(data)
                await t.shoe.acked(seq)
            await t.wait_cards(len(dealt))
            t.check(dealt)

    try:
        asyncio.run(main())
    finally:
        logs.configure("json", "warning")
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()
             if line.startswith("{")]
    single = [line for line in lines if line["event"] == "frame_rejected"]
    summed = [line for line in lines if line["event"] == "frames_rejected"]
    assert 1 <= len(single) <= 3 and summed, (len(single), len(summed))
    assert sum(line["count"] for line in summed) + len(single) >= 1000
    assert summed[0]["level"] == "warning" and "baud" in summed[0]["hint"]

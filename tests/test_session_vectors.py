"""Every vector of protocol-vectors.json through the daemon's own DeviceSession (a loopback
line, the real recorder and engine): what the host answers on the line, and the alarms it
raises. tests/test_protocol_vectors.py checks the same vectors at the framing level."""

from __future__ import annotations

import asyncio
import json
import pathlib
from typing import Any

from rig import make_settings, wait_for

from firmware_protocol import Ack, Hello, Nak, RawFrame, StreamDecoder, decode_message
from firmware_protocol.framing import build_frame
from firmware_protocol.messages import DEVICE_TO_HOST, encode_payload
from shoed.daemon import Daemon
from shoed.device.loopback import LoopbackTransport


async def _host_says(state: pathlib.Path, data: bytes, answers_expected: int,
                     prelude: bytes = b"") -> tuple[list[Any], list[dict[str, Any]]]:
    """Feed `data` (after `prelude`, answered first) to a fresh daemon's session; the ACKs
    and NAKs it wrote back for `data`, and the events it journalled."""
    written: list[bytes] = []
    line = LoopbackTransport(on_write=written.append)
    daemon = Daemon(make_settings(state, "mqtt://127.0.0.1:1"), transport_factory=lambda: line)
    daemon.build()
    task = asyncio.create_task(daemon.session.run())

    def link_answers() -> list[Any]:
        frames = StreamDecoder().feed(b"".join(written))
        return [m for f in frames if isinstance(f, RawFrame)
                and isinstance(m := decode_message(f.type_code, f.payload), Ack | Nak)]
    try:
        await wait_for(lambda: line.is_open and written, 10, "the host's GET_INFO")
        if prelude:
            line.feed(prelude)
            await wait_for(lambda: link_answers(), 10, "the prelude answered")
        written.clear()
        line.feed(data)
        await wait_for(lambda: len(link_answers()) >= answers_expected, 10, "the answers")
        await asyncio.sleep(0.05)  # anything more it would say (nothing, asserted by callers)
        events = [json.loads(body) for _, body in daemon.outbox.take(10_000)]
        return link_answers(), events
    finally:
        daemon.session.stop_timer()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        daemon.recorder.close()


def test_every_valid_device_frame_is_acked_and_an_unreadable_card_raises_bad_payload(
        tmp_path: pathlib.Path, vectors: dict) -> None:
    async def main() -> None:
        hello = bytes.fromhex(vectors["valid_frames"][0]["encoded_hex"])
        checked = 0
        for i, v in enumerate(vectors["valid_frames"]):
            if v["type"] not in DEVICE_TO_HOST:
                continue
            said, events = await _host_says(tmp_path / str(i), bytes.fromhex(v["encoded_hex"]),
                                             1, b"" if v["type"] == Hello.TYPE else hello)
            assert said == [Ack(v["seq"])], v["name"]
            alarms = {e["code"] for e in events if e["type"] == "alarm"}
            if "card" in v["fields"] and v["fields"]["card"] is None:  # a card it cannot read
                assert "bad_payload" in alarms, v["name"]
            assert "protocol_mismatch" not in alarms, v["name"]
            checked += 1
        assert checked >= 12
    asyncio.run(main())


def test_every_invalid_frame_is_naked_with_its_reason_and_the_stream_resyncs(
        tmp_path: pathlib.Path, vectors: dict) -> None:
    async def main() -> None:
        hello = bytes.fromhex(vectors["valid_frames"][0]["encoded_hex"])
        for i, v in enumerate(vectors["invalid_frames"]):
            said, _ = await _host_says(tmp_path / str(i), bytes.fromhex(v["encoded_hex"]), 1,
                                       hello)
            assert said == [Nak(v["nak_reason"])], v["name"]
        # The vector's note: a malformed chunk (NAK 2), an empty one (nothing), HEARTBEAT
        # seq 10, an oversized chunk (NAK 2), CARD seq 9. The NAKs go as the chunks are
        # read, each ACK once its frame is recorded (not a link conversation: framing only).
        said, _ = await _host_says(tmp_path / "resync",
                                   bytes.fromhex(vectors["stream_resync"]["hex"]), 4)
        assert [m for m in said if isinstance(m, Nak)] == [Nak(2), Nak(2)]
        assert [m for m in said if isinstance(m, Ack)] == [Ack(10), Ack(9)]
        assert len(said) == 4
    asyncio.run(main())


def test_a_hello_of_another_protocol_version_is_acked_and_said(tmp_path: pathlib.Path) -> None:
    """Spec section 4: HELLO's `proto_version` is 1. A shoe that says 2 (its frames passed
    the header's version check) is served as version 1 and a protocol_mismatch notice
    says so (decisions.md 222); before, nothing read the field."""
    async def main() -> None:
        frame = build_frame(Hello.TYPE, 0, encode_payload(Hello(2, 7, 31, "fw", "SN")))
        said, events = await _host_says(tmp_path, frame, 1)
        assert said == [Ack(0)]
        (notice,) = [e for e in events if e["type"] == "alarm"]
        assert notice["code"] == "protocol_mismatch" and "version 2" in notice["message"]
        frame = build_frame(Hello.TYPE, 0, encode_payload(Hello(1, 7, 31, "fw", "SN")))
        said, events = await _host_says(tmp_path / "v1", frame, 1)
        assert said == [Ack(0)] and not [e for e in events if e["type"] == "alarm"]
    asyncio.run(main())

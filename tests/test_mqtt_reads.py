"""shoed.mqtt.reads: the live publisher's plain PUBACKs taken straight from the buffered
read, everything else left to paho in order, over a real paho client's reads."""

from __future__ import annotations

import time
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st


def _puback(mid: int, reason: int | None = None) -> bytes:
    if reason is None:
        return bytes((0x40, 2, mid >> 8, mid & 0xFF))
    return bytes((0x40, 3, mid >> 8, mid & 0xFF, reason))


def _lane_reading(chunks: list[bytes], ours: set[int],
                  protocol: int = 4) -> tuple[list[int], list[tuple[int, int]], list[int], Any]:
    """A real paho client (its reads, its packet handling) over a socket that hands out
    `chunks`, read_buffered and a DirectLane awaiting the packet ids `ours`: the ids the
    lane's windows were told of, in order; the (command, id) of every packet paho itself
    handled; the paho client."""
    import paho.mqtt.client as mqtt

    from shoed.mqtt.reads import read_buffered
    from shoed.mqtt.window import DirectLane

    class Sock:
        def recv(self, size: int) -> bytes:
            if not chunks:
                raise BlockingIOError
            return chunks.pop(0)

        def close(self) -> None:
            read.append(-1)

    class Window:
        def __init__(self) -> None:
            self.acked: list[int] = []

        def _acked(self, mid: int) -> None:
            self.acked.append(mid)

    paho = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, protocol=protocol)
    paho._sock = Sock()  # type: ignore[assignment]
    handled: list[tuple[int, int]] = []
    read: list[int] = []  # what each loop_read returned (-1: the socket closed)
    handle = paho._packet_handle

    def packet_handle() -> Any:
        packet = paho._in_packet
        handled.append((packet["command"], int.from_bytes(packet["packet"][:2], "big")))
        return handle()

    paho._packet_handle = packet_handle  # type: ignore[method-assign]
    window = Window()
    lane = DirectLane.install(paho, {window})  # type: ignore[arg-type]
    assert lane is not None
    paho._shoed_lane = lane  # type: ignore[attr-defined]
    lane.mids |= ours
    client = type("C", (), {"_client": paho})()
    assert read_buffered(client)
    for _ in range(100):
        read.append(paho.loop_read())
        if read[-1] != 0 or not chunks:
            break
    return window.acked, handled, read, paho


def test_the_lanes_plain_pubacks_are_taken_from_the_buffer_the_rest_left_to_paho() -> None:
    """Plain PUBACKs of the lane's packet ids never reach paho's packet handling; one of
    paho's own, one with a reason code (MQTT 5) and a PUBACK split across two reads do,
    or are taken once whole, in the order they came; the keepalive clock moves."""
    chunks = [_puback(1) + _puback(2) + _puback(3)[:2], _puback(3)[2:] + _puback(70) + _puback(4),
              _puback(5, 0x10) + _puback(6)]
    before = time.monotonic()
    acked, handled, read, paho = _lane_reading(chunks, {1, 2, 3, 4, 5, 6}, protocol=5)
    assert acked == [1, 2, 3, 4, 5, 6]
    # paho read: the split one (its first byte was held alone), its own 70, the one
    # with a reason code (the lane takes it from paho's handler)
    assert handled == [(0x40, 3), (0x40, 70), (0x40, 5)]
    assert set(read) == {0}  # every read went well (one per arrival, as the loop calls)
    assert paho._last_bytes_received >= before  # paho's keepalive saw the broker


def test_a_closed_connection_after_the_lanes_pubacks_reads_as_lost() -> None:
    """The lane's PUBACK taken, then the connection closed: paho reports it lost."""
    acked, handled, read, _ = _lane_reading([_puback(1), b""], {1, 2})
    assert acked == [1] and handled == []
    assert read[-2:] == [-1, 7]  # paho closed the socket, MQTT_ERR_CONN_LOST


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 0xFFFF), st.booleans(), st.booleans()), max_size=60,
                unique_by=lambda t: t[0]),
       st.lists(st.integers(1, 400), max_size=30))
def test_any_chunking_of_pubacks_gives_the_lane_its_own_and_paho_the_rest(
        packets: list[tuple[int, bool, bool]], cuts: list[int]) -> None:
    """Streams of PUBACKs (the lane's, paho's, with reason codes) cut anywhere: each is
    handled exactly once, by the lane if its id is the lane's, in order."""
    ours = {mid for mid, mine, _ in packets if mine}
    mids = [mid for mid, _, _ in packets]
    stream = b"".join(_puback(mid, 0x10 if coded else None) for mid, _, coded in packets)
    at = sorted({c for c in cuts if c < len(stream)})
    chunks = [stream[a:b] for a, b in zip([0, *at], [*at, len(stream)], strict=True)]
    acked, handled, _, _ = _lane_reading([c for c in chunks if c], ours, protocol=5)
    assert acked == [m for m in mids if m in ours]
    assert [mid for _, mid in handled if mid not in ours] == [m for m in mids if m not in ours]

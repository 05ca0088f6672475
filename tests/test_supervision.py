"""Issue 13 sections 1, 7 and 8 against the real process: real Mosquitto, the pty shoe.

Never silent (reconnects after a broker kill on every interpreter; a loop that fails is
logged, restarted, shown in STATUS= and stops the watchdog; one that cannot be kept
running ends the daemon non-zero), the status tells the truth, SIGTERM is quick and
loses nothing, and an mqtt.url that is not a broker says so within seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import http.server
import json
import pathlib
import signal
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import aiomqtt
import pytest
from proc import DaemonProcess
from rig import Collector, wait_for

from shoed.mqtt.service import CONFLICT_BACKOFF_S
from shoed.sim.broker import PrivateMosquitto

pytestmark = pytest.mark.broker

FAST_BACKOFF = {"SHOED_TEST_BACKOFF": "0.2,0.4"}


@contextlib.contextmanager
def daemon(tmp: pathlib.Path, url: str, **sections: object) -> Iterator[DaemonProcess]:
    d = DaemonProcess(tmp, url, **sections)  # type: ignore[arg-type]
    try:
        yield d
    finally:
        d.close()


async def _collector(broker: PrivateMosquitto) -> tuple[Collector, asyncio.Task[None]]:
    collector = Collector(broker.port, "shoed/T9")
    task = asyncio.create_task(collector.run())
    await wait_for(collector.connected.is_set, 10, "collector")
    return collector, task


def test_broker_killed_and_back_3s_later_the_daemon_reconnects(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    """The Debian 12 (3.11.2) failure: after the first disconnect it never reconnected."""
    async def main() -> None:
        collector, task = await _collector(broker)
        with daemon(tmp_path, broker.url) as d:
            d.start_shoe(seed=5, pace=0.1)
            d.start()
            await wait_for(lambda: len(collector.events) >= 5, 30, "events")
            broker.stop(kill=True)
            await asyncio.sleep(3.0)
            before = max(e["seq"] for e in collector.events)
            broker.start()
            await wait_for(lambda: collector.connected.is_set(), 10, "collector back")
            await wait_for(lambda: any(e["seq"] > before + 3 for e in collector.events), 20,
                           "new events after the broker came back")
            await wait_for(lambda: collector.retained.get("status", {}).get("mqtt_connected"),
                           10, "status online again")
            assert not d.logged("mqtt_cancelled_unexpectedly")
            assert not d.logged("task_failed"), d.logged("task_failed")
            assert len(d.logged("mqtt_connected")) >= 2
            assert d.stop() == 0
        task.cancel()
    asyncio.run(main())


def test_status_tells_the_truth_about_each_part(tmp_path: pathlib.Path,
                                                broker: PrivateMosquitto) -> None:
    async def main() -> None:
        collector, task = await _collector(broker)
        with daemon(tmp_path, broker.url) as d:
            d.start_shoe(seed=7, pace=0.1)
            d.start()
            status = collector.retained
            await wait_for(lambda: status.get("status", {}).get("device_connected") is True
                           and status["status"].get("last_publish"), 30, "status: all well")
            assert status["status"]["mqtt_connected"] is True
            assert status["status"]["storage_ok"] is True
            assert isinstance(status["status"]["outbox"], int)
            await wait_for(lambda: any(s.startswith("device connected, broker connected")
                                       and "last publish never" not in s
                                       for s in d.notifications.statuses()), 10, "STATUS=")
            assert d.simulator is not None
            d.simulator.send_signal(signal.SIGKILL)  # the shoe gone
            d.simulator.wait()
            await wait_for(lambda: status["status"].get("device_connected") is False, 15,
                           "status: device disconnected")
            await wait_for(lambda: d.notifications.statuses()[-1].startswith(
                "device disconnected, broker connected"), 10, "STATUS= device disconnected")
            broker.stop(kill=True)
            await wait_for(lambda: "broker disconnected" in d.notifications.statuses()[-1],
                           10, "STATUS= broker disconnected")
            broker.start()
            await wait_for(lambda: "broker connected" in d.notifications.statuses()[-1], 20,
                           "STATUS= broker connected again")
            assert d.stop() == 0
        task.cancel()
    asyncio.run(main())


@pytest.mark.parametrize("loop", ["mqtt", "device", "timer"])
def test_a_failing_loop_is_logged_restarted_and_the_watchdog_waits(
        tmp_path: pathlib.Path, broker: PrivateMosquitto, loop: str) -> None:
    async def main() -> None:
        collector, task = await _collector(broker)
        with daemon(tmp_path, broker.url) as d:
            d.start_shoe(seed=9, pace=0.1)
            d.start(SHOED_TEST_FAIL=loop, SHOED_TEST_FAIL_TIMES="2", **FAST_BACKOFF)
            event = "timer_failed" if loop == "timer" else "task_failed"
            await wait_for(lambda: len(d.logged(event)) >= 2, 20, "two failures")
            await wait_for(lambda: d.logged("task_restarted"), 20, "the restart")
            await wait_for(lambda: len(collector.events) >= 5, 30, "events: it works again")
            failures = d.logged(event)
            assert len(failures) >= 2 and failures[0]["level"] == "error"
            assert "injected fault" in failures[0]["error"]
            assert "injected fault" in failures[0].get("exception", "")  # the traceback
            assert any(f"{loop} DOWN" in s for s in d.notifications.statuses())
            down = d.notifications.first(f"{loop} DOWN")
            assert down is not None
            await wait_for(lambda: len(d.notifications.pings(after=down)) >= 2, 15,
                           "pings again once it runs")
            first_ping_after = d.notifications.pings(after=down)[0]
            assert first_ping_after - down >= 1.5  # none while it was down
            assert d.logged("task_restarted")
            assert d.stop() == 0
        task.cancel()
    asyncio.run(main())


@pytest.mark.parametrize("loop", ["mqtt", "device", "timer"])
def test_a_loop_that_cannot_be_kept_running_ends_the_daemon_non_zero(
        tmp_path: pathlib.Path, broker: PrivateMosquitto, loop: str) -> None:
    with daemon(tmp_path, broker.url) as d:
        d.start_shoe(seed=9, pace=0.1)
        d.start(SHOED_TEST_FAIL=loop, SHOED_TEST_BACKOFF="0.1,0.2")
        assert d.proc is not None
        code = d.proc.wait(timeout=30)
        assert code == 1
        given_up = d.logged("task_given_up")
        assert given_up and given_up[0]["task"] == loop
        down = d.notifications.first(f"{loop} DOWN")
        assert down is not None and not d.notifications.pings(after=down)


def _pending_events(tmp: pathlib.Path) -> int:
    from shoed.store.journal import Journal

    journal = Journal(tmp / "state")
    try:
        return journal.outbox_depth()
    finally:
        journal.close()


def test_sigterm_with_the_broker_up_stops_within_1s_and_loses_nothing(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    async def main() -> None:
        collector, task = await _collector(broker)
        with daemon(tmp_path, broker.url) as d:
            d.start()
            # The shoe only once the daemon is up: a shoe started first deals into its
            # buffer meanwhile, and a fast start then takes the whole (one-deck) shoe in
            # one burst before the SIGTERM, leaving nothing for the next start to publish.
            await wait_for(lambda: d.logged("ready"), 20, "READY")
            d.start_shoe(seed=11, pace=0.02)
            await wait_for(lambda: len(collector.events) >= 20, 30, "events")
            assert d.proc is not None
            started = time.monotonic()
            d.proc.send_signal(signal.SIGTERM)
            await wait_for(lambda: d.proc is not None and d.proc.poll() is not None, 5,
                           "the daemon to exit")
            took = time.monotonic() - started
            assert d.proc.returncode == 0
            assert took < 1.0, f"stopping took {took:.2f} s"
            stopped = d.logged("stopped")
            assert stopped
            # Nothing lost: whatever the broker did not take is still in the journal, and
            # the next start publishes it.
            seen = max(e["seq"] for e in collector.events)
            d.start()
            await wait_for(lambda: _published_all(collector, seen), 20, "the rest published")
            assert d.stop() == 0
        task.cancel()
    asyncio.run(main())


def _published_all(collector: Collector, at_least: int) -> bool:
    seqs = sorted({e["seq"] for e in collector.events})
    return bool(seqs) and seqs[-1] > at_least and seqs == list(range(1, seqs[-1] + 1))


def test_sigterm_with_the_broker_hung_stops_within_publish_timeout_and_loses_nothing(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    async def main() -> None:
        collector, task = await _collector(broker)
        with daemon(tmp_path, broker.url) as d:
            d.start_shoe(seed=12, pace=0.1)
            d.start()
            await wait_for(lambda: len(collector.events) >= 10, 30, "events")
            assert broker.proc is not None and d.proc is not None
            broker.proc.send_signal(signal.SIGSTOP)  # connected, answering nothing
            try:
                await asyncio.sleep(0.5)  # cards keep coming: their PUBACKs do not
                started = time.monotonic()
                d.proc.send_signal(signal.SIGTERM)
                await wait_for(lambda: d.proc is not None and d.proc.poll() is not None, 10,
                               "the daemon to exit")
                took = time.monotonic() - started
            finally:
                broker.proc.send_signal(signal.SIGCONT)
            assert d.proc.returncode == 0
            assert took < 2.0 + 1.0, f"stopping took {took:.2f} s (publish_timeout_s 2)"
            assert _pending_events(tmp_path) > 0  # kept for the next start
            d.start()
            await wait_for(lambda: _published_all(collector, 10) and
                           collector.connected.is_set(), 30, "everything published")
            assert d.stop() == 0
        task.cancel()
    asyncio.run(main())


class _Silent(threading.Thread):
    """A TCP server that accepts and says nothing."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []

    def run(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.held.append(self.server.accept()[0])

    def close(self) -> None:
        self.server.close()
        for conn in self.held:
            conn.close()


@pytest.mark.parametrize("server", ["silent_tcp", "http"])
def test_mqtt_url_that_is_not_a_broker_is_reported_within_seconds(
        tmp_path: pathlib.Path, server: str) -> None:
    if server == "http":
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                http.server.BaseHTTPRequestHandler)
        port = httpd.server_address[1]
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        close = httpd.shutdown
    else:
        silent = _Silent()
        silent.start()
        port, close = silent.port, silent.close
    url = f"mqtt://127.0.0.1:{port}"
    try:
        with daemon(tmp_path, url) as d:
            started = time.monotonic()
            d.start()
            deadline = started + 15
            while time.monotonic() < deadline and not d.logged("mqtt_not_a_broker"):
                time.sleep(0.1)
            took = time.monotonic() - started
            reports = d.logged("mqtt_not_a_broker")
            assert reports, d.lines()[-5:]
            assert took < 10, f"reported after {took:.1f} s"
            assert reports[0]["level"] == "error" and reports[0]["url"] == url
            assert "MQTT broker" in reports[0]["error"]
            assert any("broker disconnected" in s and "MQTT broker" in s
                       for s in d.notifications.statuses())
            assert d.stop() == 0
    finally:
        close()


@dataclass
class RootEpisode:
    """Two daemons with the same table id on one broker: A first, then B; A stopped."""

    run_a: str
    run_b: str
    instance_a: str
    conflict_log: dict[str, Any]  # B's table_id_conflict line
    b_statuses: list[str]  # B's STATUS= lines
    b_connected_while_a_ran: bool
    a_connects: int
    a_logged_conflict: bool
    b_logged_over: bool
    b_dealt: int  # cards B's shoe dealt while A held the root
    retained_status_while_a_ran: dict[str, Any]
    published_while_a_ran: list[dict[str, Any]]  # every event body on the topic then
    a_stopped_at: float
    published: list[dict[str, Any]]  # every event body on the topic, to the end
    state_after: dict[str, Any]  # the retained state once B published the clear
    exits: tuple[int, int]


@pytest.fixture(scope="module")
def root_episode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RootEpisode]:
    tmp = tmp_path_factory.mktemp("root")
    (tmp / "a").mkdir()
    (tmp / "b").mkdir()
    broker = PrivateMosquitto()
    broker.start()

    async def main() -> RootEpisode:
        collector, task = await _collector(broker)
        with daemon(tmp / "a", broker.url) as a, daemon(tmp / "b", broker.url) as b:
            a.start_shoe(seed=5, pace=0.1)
            a.start()
            await wait_for(lambda: collector.retained.get("status", {}).get("run_id"), 20,
                           "A's status with its run_id")
            run_a = collector.retained["status"]["run_id"]
            instance_a = collector.retained["status"]["instance"]
            b.start_shoe(seed=6, pace=0.1)
            b.start()
            await wait_for(lambda: b.logged("table_id_conflict"), 15, "B sees A")
            await wait_for(lambda: any("CONFLICT" in s for s in b.notifications.statuses()),
                           5, "B's STATUS= shows the conflict")
            await asyncio.sleep(2.0)
            # B keeps serving and journalling its shoe meanwhile.
            dealt = tmp / "b" / "dealt.txt"
            await wait_for(lambda: dealt.exists() and len(dealt.read_text().split()) > 3, 15,
                           "B's shoe served")
            b_connected = bool(b.logged("mqtt_connected"))
            a_connects = len(a.logged("mqtt_connected"))
            retained_status = dict(collector.retained["status"])
            published_while_a_ran = list(collector.raw_events)
            exit_a = a.stop()  # A goes (its status: offline); B takes the root
            stopped_at = time.time()
            await wait_for(lambda: b.logged("mqtt_connected"), 25, "B on the broker")
            run_b = b.logged("ready")[0]["run_id"]
            await wait_for(lambda: collector.retained.get("status", {}).get("run_id") == run_b,
                           10, "B's status")
            await wait_for(lambda: len(conflict_alarms(collector.events)) >= 2, 15,
                           "B's table_id_conflict raised and cleared")
            cleared = conflict_alarms(collector.events)[-1]
            await wait_for(lambda: collector.retained.get("state", {}).get("instance")
                           == cleared["instance"] and collector.retained["state"]["seq"]
                           >= cleared["seq"], 10, "B's state after the clear")
            state_after = dict(collector.retained["state"])
            exit_b = b.stop()
            await asyncio.sleep(0.3)  # the last PUBACKed events reach the collector
            episode = RootEpisode(
                run_a=run_a, run_b=run_b, instance_a=instance_a,
                conflict_log=b.logged("table_id_conflict")[0],
                b_statuses=b.notifications.statuses(), b_connected_while_a_ran=b_connected,
                a_connects=a_connects, a_logged_conflict=bool(a.logged("table_id_conflict")),
                b_logged_over=bool(b.logged("table_id_conflict_over")),
                b_dealt=len(dealt.read_text().split()),
                retained_status_while_a_ran=retained_status,
                published_while_a_ran=published_while_a_ran, a_stopped_at=stopped_at,
                published=list(collector.raw_events), state_after=state_after,
                exits=(exit_a, exit_b))
        task.cancel()
        return episode

    try:
        yield asyncio.run(main())
    finally:
        broker.stop()


def test_a_second_daemon_on_the_same_root_backs_off_and_the_first_keeps_it(
        root_episode: RootEpisode) -> None:
    ep = root_episode
    conflict = ep.conflict_log
    assert conflict["level"] == "error" and conflict["other_run_id"] == ep.run_a
    assert conflict["run_id"] == ep.run_b != ep.run_a
    assert any("CONFLICT" in s for s in ep.b_statuses)
    assert not ep.b_connected_while_a_ran  # B never published under the root
    assert ep.a_connects == 1  # A was never kicked off
    assert ep.retained_status_while_a_ran["run_id"] == ep.run_a
    # Nothing of B's reached the topic while A held the root.
    assert {e["instance"] for e in ep.published_while_a_ran} == {ep.instance_a}
    by_seq: dict[int, set[str]] = {}
    for e in ep.published_while_a_ran:
        by_seq.setdefault(e["seq"], set()).add(e["event_id"])
    assert all(len(ids) == 1 for ids in by_seq.values())  # one stream
    assert ep.b_dealt > 3  # B served and journalled its shoe meanwhile
    assert ep.b_logged_over
    assert ep.exits == (0, 0)


def test_the_second_daemons_stream_has_table_id_conflict_raised_then_cleared(
        root_episode: RootEpisode) -> None:
    ep = root_episode
    b_stream = stream(ep.published, ep.instance_a, other=True)
    assert [e["seq"] for e in b_stream] == list(range(1, len(b_stream) + 1))  # gapless
    raised, cleared = conflict_alarms(b_stream)
    assert (raised["active"], cleared["active"]) == (True, False)
    assert raised["momentary"] is False
    assert raised["alarm_id"] == cleared["alarm_id"] and raised["seq"] < cleared["seq"]
    assert f"run_id {ep.run_a}" in raised["message"]  # the other daemon
    assert f"run_id {ep.run_b}" in raised["message"]  # this one
    assert f"seen at {raised['ts']}" in raised["message"]
    assert f"run_id {ep.run_b}" in cleared["message"]
    # Raised when first seen (journalled then, published later), cleared once alone.
    assert iso_ts(raised) < ep.a_stopped_at < iso_ts(cleared) + 1
    assert not [a for a in ep.state_after["alarms"] if a["code"] == "table_id_conflict"]


def test_the_first_daemons_stream_is_untouched(root_episode: RootEpisode) -> None:
    ep = root_episode
    a_stream = stream(ep.published, ep.instance_a)
    assert [e["seq"] for e in a_stream] == list(range(1, len(a_stream) + 1))
    assert a_stream and all(e in a_stream for e in ep.published_while_a_ran)
    assert all(e["event_id"].startswith(f"T9-{ep.instance_a}-") for e in a_stream)
    assert not conflict_alarms(a_stream) and not ep.a_logged_conflict
    bodies: dict[str, set[str]] = {}
    for e in ep.published:
        bodies.setdefault(e["event_id"], set()).add(json.dumps(e, sort_keys=True))
    assert all(len(b) == 1 for b in bodies.values())  # one body per event_id


def stream(events: list[dict[str, Any]], instance: str, other: bool = False
           ) -> list[dict[str, Any]]:
    """One daemon's events (by its journal's instance; `other`: the rest), one body per
    event_id, in seq order."""
    seen: dict[str, dict[str, Any]] = {}
    for e in events:
        if (e["instance"] != instance) == other:
            seen.setdefault(e["event_id"], e)
    return sorted(seen.values(), key=lambda e: e["seq"])


def conflict_alarms(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "alarm" and e["code"] == "table_id_conflict"]


def iso_ts(event: dict[str, Any]) -> float:
    return datetime.datetime.fromisoformat(str(event["ts"]).replace("Z", "+00:00")).timestamp()



class KickingProxy:
    """A TCP proxy in front of Mosquitto that can end the daemon's connection as a
    broker does when another client takes the session over: MQTT 5 DISCONNECT with
    reason 0x8E, then close (Mosquitto 2.0.12 and later, EMQX and HiveMQ send it; the
    2.0.11 of Debian 12 just closes)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.listen_port = 0
        self.links: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []
        self.accepted = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._link, "127.0.0.1", 0)
        self.listen_port = self.server.sockets[0].getsockname()[1]

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.links.append((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def kick(self) -> None:
        """The session taken over: DISCONNECT 0x8E to the daemon, both sides closed."""
        for down, up in self.links:
            with contextlib.suppress(Exception):
                down.write(bytes([0xE0, 0x02, 0x8E, 0x00]))
                down.close()
                up.close()
        self.links.clear()


@dataclass
class LostStatus:
    """Daemon A on the root, its retained status wiped (a broker that lost it), daemon B
    started then, on another client id (two table PCs), and B's yield to A seen."""

    collector: Collector
    a: DaemonProcess
    b: DaemonProcess
    a_status: dict[str, Any]  # A's retained status before the wipe
    other: aiomqtt.Client  # a client of the test's own on the broker
    yielded_at: float  # wall time B's yield was seen


@contextlib.asynccontextmanager
async def b_yielded_to_a(tmp_path: pathlib.Path,
                         broker: PrivateMosquitto) -> AsyncIterator[LostStatus]:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    collector, task = await _collector(broker)
    try:
        with daemon(tmp_path / "a", broker.url, mqtt={"client_id": "pc-a"}) as a, \
                daemon(tmp_path / "b", broker.url, mqtt={"client_id": "pc-b"}) as b:
            a.start_shoe(seed=5, pace=0.1)
            a.start()
            await wait_for(lambda: collector.retained.get("status", {}).get("run_id"), 20,
                           "A's status")
            a_status = dict(collector.retained["status"])
            async with aiomqtt.Client("127.0.0.1", broker.port) as other:
                await other.publish("shoed/T9/status", b"", qos=1, retain=True)  # lost
                b.start_shoe(seed=6, pace=0.1)
                b.start()
                await wait_for(lambda: b.logged("table_id_conflict"), 20, "B yields to A")
                yield LostStatus(collector, a, b, a_status, other, time.time())
    finally:
        task.cancel()


def test_a_daemon_that_took_an_empty_root_while_the_first_was_away_yields_it(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    """A broker that lost its retained messages (no persistence, a crash before its
    autosave) shows a second daemon an empty root: it connected and published beside the
    first, both streams under one root for as long as they ran (outside review of issue
    13). A connected daemon now watches `{root}/status`: the one online first keeps the
    root and republishes its status, the later one yields (table_id_conflict), and its
    events stop reaching the root. Client ids apart, as two table PCs may have."""
    async def main() -> None:
        async with b_yielded_to_a(tmp_path, broker) as ep:
            collector, a, b = ep.collector, ep.a, ep.b
            run_a, instance_a = ep.a_status["run_id"], ep.a_status["instance"]
            conflict = b.logged("table_id_conflict")[0]
            assert conflict["other_run_id"] == run_a
            assert a.logged("root_claimed_by_a_later_daemon")
            await asyncio.sleep(3.0)
            assert collector.retained["status"]["run_id"] == run_a
            assert collector.retained["status"]["online"] is True
            late = [e for e in collector.raw_events if e["instance"] != instance_a
                    and iso_ts(e) > ep.yielded_at + 0.5]
            assert late == []  # nothing of B's under the root once it yielded
            assert len(a.logged("mqtt_connected")) == 1  # A was never put off
            await asyncio.sleep(CONFLICT_BACKOFF_S + 1.5)
            assert len(b.logged("mqtt_connected")) == 1  # B's next look saw A: it stays off
            assert a.stop() == 0 and b.stop() == 0

    asyncio.run(main())


def test_a_daemon_that_yielded_takes_the_root_once_the_first_has_gone(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    """The daemon that yielded (the test above) keeps a persistent session. Its watch
    subscribed at QoS 1, so the broker queued every status of the first daemon while it
    backed off; once the first had stopped, each queued "online" status made it yield
    again at its next connect, 10 s each (outside review of today's changes). The watch
    is QoS 0 now, and a claim it sees is checked against the root's current status before
    it yields: the first daemon's statuses sent while the second waited (three here) do
    not keep it off the root once the first has said offline."""
    async def main() -> None:
        async with b_yielded_to_a(tmp_path, broker) as ep:
            collector, a, b, a_status = ep.collector, ep.a, ep.b, ep.a_status
            for n in range(3):  # A's statuses while B backs off
                await ep.other.publish("shoed/T9/status", json.dumps(
                    {**a_status, "ts": a_status["ts"] + n + 1}), qos=1)
            assert a.stop() == 0  # A says offline
            await wait_for(lambda: len(b.logged("mqtt_connected")) >= 2,
                           CONFLICT_BACKOFF_S + 15, "B on the root after A")
            await asyncio.sleep(3.0)
            assert len(b.logged("table_id_conflict")) == 1  # never again after A left
            assert collector.retained["status"]["run_id"] != a_status["run_id"]
            assert collector.retained["status"]["online"] is True
            assert b.stop() == 0

    asyncio.run(main())


def test_a_session_taken_over_mqtt5_reason_is_a_conflict(tmp_path: pathlib.Path) -> None:
    """The broker's MQTT 5 DISCONNECT 0x8E (session taken over): the daemon backs off
    10 s (no reconnect storm), logs `table_id_conflict` at error with its run_id, shows
    CONFLICT in STATUS=, keeps journalling, and its stream has the alarm raised, then
    cleared once it held its session again for 10 s."""
    broker = PrivateMosquitto()
    broker.start()

    async def main() -> None:
        proxy = KickingProxy(broker.port)
        await proxy.start()
        collector, task = await _collector(broker)
        with daemon(tmp_path, f"mqtt://127.0.0.1:{proxy.listen_port}") as d:
            d.start_shoe(seed=5, pace=0.1)
            d.start()
            await wait_for(lambda: d.logged("mqtt_connected"), 20, "daemon on the broker")
            await wait_for(lambda: collector.events, 20, "events")
            run_id = d.logged("ready")[0]["run_id"]
            proxy.kick()
            kicked_at = time.monotonic()
            await wait_for(lambda: d.logged("table_id_conflict"), 5, "the takeover seen")
            await wait_for(lambda: any("CONFLICT" in s for s in d.notifications.statuses()),
                           5, "STATUS= shows the conflict")
            await wait_for(lambda: len(d.logged("mqtt_connected")) == 2, 20, "back on")
            back_after = time.monotonic() - kicked_at
            conflict = d.logged("table_id_conflict")[0]
            assert conflict["level"] == "error" and conflict["run_id"] == run_id
            assert conflict["cause"] == "session_taken_over"
            assert conflict["client_id"] == "shoed-T9" and "0x8E" in conflict["evidence"]
            assert "unknown" in conflict["other_run_id"]
            assert back_after > 9.0, back_after  # backed off: no reconnect storm
            assert proxy.accepted == 4  # twice: the probe of the root, then the session
            await wait_for(lambda: len(conflict_alarms(collector.events)) >= 2, 20,
                           "table_id_conflict raised and cleared in the daemon's stream")
            raised, cleared = conflict_alarms(collector.events)
            assert (raised["active"], cleared["active"]) == (True, False)
            assert raised["alarm_id"] == cleared["alarm_id"]
            assert f"run_id {run_id}" in raised["message"]
            assert iso_ts(cleared) - iso_ts(raised) > 18.0  # 10 s back-off, then 10 s held
            assert d.logged("table_id_conflict_over")
            events = collector.events
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))  # gapless
            assert d.stop() == 0
        task.cancel()

    try:
        asyncio.run(main())
    finally:
        broker.stop()


def test_a_client_kicking_the_daemon_off_again_and_again_is_a_conflict(
        tmp_path: pathlib.Path) -> None:
    """A broker that closes a taken-over connection without a reason (Debian 12's
    Mosquitto 2.0.11): another client with the daemon's client id that reconnects each
    time it is kicked off (a second daemon with the same table id on another root). The
    daemon sees its connection closed 3 times within 30 s, each soon after connecting:
    a conflict, then it backs off 10 s at a time instead of joining the storm."""
    broker = PrivateMosquitto()
    broker.start()

    async def main() -> None:
        collector, task = await _collector(broker)
        with daemon(tmp_path, broker.url) as d:
            d.start_shoe(seed=5, pace=0.1)
            d.start()
            await wait_for(lambda: d.logged("mqtt_connected"), 20, "daemon on the broker")
            run_id = d.logged("ready")[0]["run_id"]
            intruder_connects = 0

            async def intruder() -> None:
                nonlocal intruder_connects
                while True:
                    with contextlib.suppress(aiomqtt.MqttError):
                        async with aiomqtt.Client("127.0.0.1", broker.port,
                                                  identifier="shoed-T9") as client:
                            intruder_connects += 1
                            async for _ in client.messages:
                                pass
                    await asyncio.sleep(0.3)

            storm = asyncio.create_task(intruder())
            await wait_for(lambda: d.logged("table_id_conflict"), 20, "the storm seen")
            seen_at = time.monotonic()
            await wait_for(lambda: any("CONFLICT" in s for s in d.notifications.statuses()),
                           5, "STATUS= shows the conflict")
            connects_then = len(d.logged("mqtt_connected"))
            await asyncio.sleep(12.0)
            # At most one try per 10 s back-off, each kicked off again (not a storm).
            assert len(d.logged("mqtt_connected")) - connects_then <= 2
            storm.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await storm
            conflict = d.logged("table_id_conflict")[0]
            assert conflict["level"] == "error" and conflict["run_id"] == run_id
            assert conflict["cause"] == "session_taken_over"
            assert "3 times within 30 s" in conflict["evidence"]
            assert intruder_connects >= 3
            # Alone again: back on within a back-off, the conflict cleared 10 s later.
            await wait_for(lambda: len(conflict_alarms(collector.events)) >= 2, 35,
                           "table_id_conflict raised and cleared in the daemon's stream")
            assert time.monotonic() - seen_at > 10.0
            raised, cleared = conflict_alarms(collector.events)
            assert (raised["active"], cleared["active"]) == (True, False)
            events = collector.events
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))  # gapless
            assert d.stop() == 0
        task.cancel()

    try:
        asyncio.run(main())
    finally:
        broker.stop()


@pytest.mark.parametrize("status", [
    {"online": True, "run_id": "zzz", "ts": "abc"},
    {"online": True, "run_id": "zzz", "ts": 1e400, "online_since": "x"},
    {"online": True, "run_id": "zzz", "ts": [1], "online_since": {"a": 1}},
])
def test_a_retained_status_nobody_can_read_is_nobodys_claim(
        tmp_path: pathlib.Path, broker: PrivateMosquitto, status: dict[str, Any]) -> None:
    """Anyone may leave a retained message at {root}/status: one whose times are not
    numbers is no other daemon's claim, and never stops the daemon from starting."""
    async def main() -> None:
        async with aiomqtt.Client("127.0.0.1", broker.port) as writer:
            await writer.publish("shoed/T9/status", json.dumps(status), qos=1, retain=True)
        collector, task = await _collector(broker)
        with daemon(tmp_path, broker.url) as d:
            d.start_shoe(seed=5, pace=0.05)
            d.start()
            await wait_for(lambda: len(collector.events) >= 3, 30, "events")
            assert not d.logged("task_failed"), d.logged("task_failed")
            assert not d.logged("table_id_conflict")
            assert d.stop() == 0
        task.cancel()
    asyncio.run(main())


def test_a_broker_host_that_never_answers_is_unreachable_not_a_non_broker(
        tmp_path: pathlib.Path) -> None:
    """A host that is off, or a firewall that drops the SYN, is not "not an MQTT broker":
    here a listener whose backlog is full, so that the kernel answers no SYN."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fill = []
    for _ in range(3):
        conn = socket.socket()
        conn.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            conn.connect(("127.0.0.1", port))
        fill.append(conn)
    time.sleep(0.5)
    try:
        with daemon(tmp_path, f"mqtt://127.0.0.1:{port}") as d:
            d.start()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not d.logged("mqtt_disconnected"):
                time.sleep(0.1)
            reports = d.logged("mqtt_disconnected")
            assert reports, d.lines()[-5:]
            assert "not answered in time" in reports[0]["error"], reports[0]
            assert not d.logged("mqtt_not_a_broker")
            assert d.stop() == 0
    finally:
        for conn in fill:
            conn.close()
        listener.close()


def test_sighup_is_logged_and_the_daemon_deals_on(tmp_path: pathlib.Path,
                                                   broker: PrivateMosquitto) -> None:
    """SIGHUP's default ends a process at once, a clean exit to systemd (no restart)."""
    async def main() -> None:
        collector, task = await _collector(broker)
        with daemon(tmp_path, broker.url) as d:
            d.start_shoe(seed=5, pace=0.05)
            d.start()
            await wait_for(lambda: len(collector.events) >= 3, 30, "events")
            assert d.proc is not None
            d.proc.send_signal(signal.SIGHUP)
            await wait_for(lambda: bool(d.logged("sighup_ignored")), 10, "the SIGHUP logged")
            seen = len(collector.events)
            await wait_for(lambda: len(collector.events) > seen + 3, 20, "dealing on")
            assert d.proc.poll() is None
            assert d.stop() == 0
        task.cancel()
    asyncio.run(main())


def test_a_failure_after_ready_ends_the_daemon_non_zero_and_stops_the_pings(
        tmp_path: pathlib.Path, broker: PrivateMosquitto) -> None:
    """Outside the supervised loops (here: building the MQTT service after READY) a
    failure once left the loop's clean-up cancelling the loops and the supervisor
    restarting them: the process hung for ever, the watchdog fed, SIGTERM ignored."""
    with daemon(tmp_path, broker.url) as d:
        d.start_shoe(seed=9, pace=0.1)
        d.start(SHOED_TEST_FAIL="after_ready")
        assert d.proc is not None
        code = d.proc.wait(timeout=20)
        assert code == 1
        failed = d.logged("daemon_failed")
        assert failed and "injected fault in Daemon.build_mqtt" in failed[0]["error"]
        assert not d.logged("task_failed"), d.logged("task_failed")
        stopping = d.notifications.first("stopping")
        assert stopping is not None and not d.notifications.pings(after=stopping + 0.1)


def test_a_daemon_cancelled_from_outside_stops_its_loops(tmp_path: pathlib.Path,
                                                          broker: PrivateMosquitto) -> None:
    """A cancel of run() itself (asyncio.Runner's on Ctrl-C before the daemon's own
    SIGINT handler is in place): the loops are stopped with it, not left for the
    loop's clean-up to cancel and the supervisor to restart (a hang, fed watchdog)."""
    from rig import rig

    async def main() -> None:
        async with rig(tmp_path, broker, collector=False) as r:
            await wait_for(lambda: bool(r.daemon.supervisor.tasks), 10, "the loops")
            running = r.tasks[1]
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(running, 10)
            await asyncio.sleep(1.0)  # a restart would be due by now (back-off 0.5 s)
            assert r.daemon.supervisor.stopping
            assert all(task.done() for task in r.daemon.supervisor.tasks.values())
            assert r.daemon.supervisor.restarts == 0
    asyncio.run(main())


def test_a_stray_cancel_during_the_back_off_restarts_the_task_and_is_logged() -> None:
    """A cancel nobody asked for while a failed task waits for its restart ended the
    supervised task for good, with no log line (outside review of issue 14): it is logged
    and the task runs again."""
    from structlog.testing import capture_logs

    from shoed import logs
    from shoed.status import TableStatus
    from shoed.supervisor import Supervisor

    async def main() -> None:
        supervisor = Supervisor(TableStatus("T9"), logs.get("shoed"))
        runs: list[int] = []
        forever = asyncio.Event()

        async def loop() -> None:
            runs.append(len(runs))
            if len(runs) == 1:
                raise RuntimeError("the first run fails")
            await forever.wait()

        supervisor.start("device", loop)
        task = supervisor.tasks["device"]
        for _ in range(50):  # the first run failed: now in its back-off
            await asyncio.sleep(0.01)
            if supervisor.failures.get("device"):
                break
        task.cancel()  # nobody asked for a stop
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(runs) == 2:
                break
        assert runs == [0, 1] and not task.done()
        assert "device" not in supervisor.status.failing  # up again
        await supervisor.stop(timeout=1.0)
        assert task.done()

    with capture_logs() as logged:
        asyncio.run(main())
    assert [e["task"] for e in logged if e["event"] == "task_cancelled_unasked"] == ["device"]

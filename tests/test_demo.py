"""`shoed demo`, the README's main command, as a newcomer runs it: a real process group
at a terminal (Ctrl-C reaches every process in it), real Mosquitto, the pty shoe."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import aiomqtt
import pytest

from shoed.core.roads import RoadsFeed
from shoed.sim.broker import PrivateMosquitto, free_port

FAST = ["--pace", "0.03", "--betting-time", "0.2", "--supervisor-delay", "0.4",
        "--no-console"]



class Demo:
    """`shoed demo ...` in its own session, as a terminal runs a job: its own process
    group, so that SIGINT to that group is what Ctrl-C at the terminal does."""

    def __init__(self, tmp: pathlib.Path, *args: str, env: dict[str, str] | None = None
                 ) -> None:
        self.tmp = tmp
        self.lines: list[str] = []
        self._changed = threading.Condition()
        environment = dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=str(tmp),
                           COLUMNS="200", **(env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shoed.cli", "demo", *args], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, env=environment,
            start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def text(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 30.0, after: int = 0) -> re.Match[str]:
        """The first line (from line `after` on) matching `pattern`."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        with self._changed:
            while True:
                for line in self.lines[after:]:
                    if found := regex.search(line):
                        return found
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"no line matching {pattern!r}; output:\n"
                                         + "\n".join(self.lines[-60:]))
                self._changed.wait(min(left, 0.2))

    def index_of(self, pattern: str) -> int:
        regex = re.compile(pattern)
        return next(i for i, line in enumerate(self.lines) if regex.search(line))

    def interrupt(self, timeout: float = 15.0) -> int:
        """Ctrl-C: SIGINT to the whole process group, then wait for the exit."""
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.wait(timeout)

    def wait(self, timeout: float = 30.0) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def demos(tmp_path: pathlib.Path) -> Iterator[list[Demo]]:
    started: list[Demo] = []
    yield started
    for demo in started:
        demo.kill()


def start(demos: list[Demo], tmp: pathlib.Path, *args: str) -> Demo:
    demo = Demo(tmp, *args)
    demos.append(demo)
    return demo


def assert_clean(demo: Demo) -> None:
    """No traceback, every line within 80 columns (the terminal said 200); only a word
    that is longer by itself (a long path) may stand out, alone on its line."""
    text = demo.text
    assert "Traceback" not in text, text[-3000:]
    assert "Bad file descriptor" not in text, text[-3000:]
    wide = [line for line in demo.lines if len(line) > 80 and " " in line.strip()]
    assert not wide, wide[:5]


class Watcher:
    """An MQTT client of its own (a thread with its own loop) on the broker: what the
    daemons publish. `on_event(topic, payload)` may return (topic, payload) to publish,
    retained."""

    def __init__(self, port: int, topics: list[str], on_event: Any = None) -> None:
        self.messages: list[tuple[str, dict[str, Any]]] = []
        self.on_event = on_event
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(port, topics),),
                                        daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "the watcher did not connect"

    async def _main(self, port: int, topics: list[str]) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        with contextlib.suppress(asyncio.CancelledError):
            async with aiomqtt.Client("127.0.0.1", port,
                                      identifier=f"test-watcher-{time.time_ns()}") as client:
                for topic in topics:
                    await client.subscribe(topic, qos=1)
                self._ready.set()
                async for message in client.messages:
                    payload = json.loads(message.payload) if message.payload else {}  # type: ignore[arg-type,unused-ignore]
                    self.messages.append((str(message.topic), payload))
                    if self.on_event is not None and (out := self.on_event(
                            str(message.topic), payload)) is not None:
                        await client.publish(out[0], json.dumps(out[1]), qos=1, retain=True)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [p for t, p in self.messages if t.endswith("/events") and p.get("type") == kind]

    def close(self) -> None:
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(timeout=10)


async def retained_over_websockets(port: int, topic: str, username: str | None = None,
                                   password: str | None = None) -> dict[str, Any]:
    async with aiomqtt.Client("127.0.0.1", port, transport="websockets",
                              username=username, password=password,
                              identifier=f"test-ws-{time.time_ns()}") as client:
        await client.subscribe(topic, qos=1)
        async with asyncio.timeout(10):
            async for message in client.messages:
                value = json.loads(message.payload)  # type: ignore[arg-type,unused-ignore]
                assert isinstance(value, dict)
                return value
    raise AssertionError(f"nothing retained on {topic}")


def unwrapped(lines: list[str], item: int = 0) -> str:
    """The `item`-th logical line of `lines` (they start at one indent) with the lines
    the view wrapped it onto (indented deeper) joined back into one line."""
    indent = len(lines[0]) - len(lines[0].lstrip(" "))
    items: list[str] = []
    for line in lines:
        depth = len(line) - len(line.lstrip(" "))
        if items and depth > indent:
            items[-1] += " " + line.strip()
        elif depth == indent:
            items.append(line)
        else:
            break
    return items[item]


def test_ctrl_c_with_its_own_broker_ends_cleanly_and_removes_the_broker_dir(
        tmp_path: pathlib.Path, demos: list[Demo]) -> None:
    with_console = [arg for arg in FAST if arg != "--no-console"]
    demo = start(demos, tmp_path, "--own-broker", "--unread-rate", "0",
                 "--console-listen", "127.0.0.1:0", *with_console)
    url = demo.wait_for(r"^console: (http://\S+)").group(1)
    ports = demo.wait_for(r"started the demo's own mosquitto on port \d+ \(WebSockets on "
                          r"(\d+)\)")
    demo.wait_for(r"^hand 2: ")
    # The WebSockets listener (for the web console) serves MQTT, to the sign-in the
    # console URL carries: the retained state is there.
    login = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).fragment))
    assert asyncio.run(retained_over_websockets(
        int(ports.group(1)), "shoed/DEMO/state", login["user"], login["password"])
    )["shoe_id"].startswith("DEMO-")
    assert list(tmp_path.glob("shoed-mosquitto-*")), "the broker's directory is in TMPDIR"
    started = time.monotonic()
    assert demo.interrupt() == 0, demo.text[-3000:]
    assert time.monotonic() - started < 10
    assert_clean(demo)
    assert "hand results shown. Journal and log kept in:" in demo.text
    assert not list(tmp_path.glob("shoed-mosquitto-*")), "the broker's directory is left"
    # Every card is shown in its position, every result with its payouts.
    hand_1 = demo.lines[demo.index_of(r"^hand 1: "):]
    assert re.search(r"^  hand 1 +P1 +(10|[2-9AJQK])[♠♥♦♣]", demo.text, re.M)
    assert re.search(r"^  hand 1 +B2 +(10|[2-9AJQK])[♠♥♦♣]", demo.text, re.M)
    # Each of these wraps at the view's width, its continuation lines hanging deeper.
    facts, payouts = unwrapped(hand_1[1:]), unwrapped(hand_1[1:], item=1)
    assert re.match(r"  natural: .*pairs: .*(big|small)", facts), hand_1[:6]
    assert payouts.startswith("  pays ") and re.search(r"; lose \w", payouts), hand_1[:6]


def test_betting_none_runs_and_stops_cleanly(tmp_path: pathlib.Path,
                                             demos: list[Demo]) -> None:
    demo = start(demos, tmp_path, "--own-broker", "--betting", "none", "--duration", "3",
                 "--unread-rate", "0", *FAST)
    assert demo.wait() == 0, demo.text[-3000:]
    assert_clean(demo)
    assert re.search(r"^hand \d+: ", demo.text, re.M)
    assert re.search(r"betting\s+none ===", demo.text)
    assert not list(tmp_path.glob("shoed-mosquitto-*"))


def test_two_demos_on_one_broker_take_different_tables_and_decks_reach_the_daemon(
        tmp_path: pathlib.Path, demos: list[Demo], broker: PrivateMosquitto) -> None:
    watcher = Watcher(broker.port, ["shoed/+/events", "shoed/+/status"])
    try:
        first = start(demos, tmp_path, "--broker", broker.url, "--decks", "2",
                      "--unread-rate", "0", *FAST)
        first.wait_for(r"^hand 1: ")
        second = start(demos, tmp_path, "--broker", broker.url, "--unread-rate", "0", *FAST)
        second.wait_for(r"table DEMO is in use on this broker: this demo is table DEMO2")
        second.wait_for(r"^hand 1: ")
        hands_before = len(first.lines)
        first.wait_for(r"^hand \d+: ", after=hands_before)  # the first one is not kicked off
        assert first.interrupt() == 0 and second.interrupt() == 0
        for demo in (first, second):
            assert_clean(demo)
        started = {(p["table_id"], p["decks"]) for p in watcher.of("shoe_started")}
        assert ("DEMO", 2) in started and ("DEMO2", 8) in started, started
    finally:
        watcher.close()


def test_a_demo_refuses_a_table_that_is_online(tmp_path: pathlib.Path, demos: list[Demo],
                                               broker: PrivateMosquitto) -> None:
    first = start(demos, tmp_path, "--broker", broker.url, "--table", "T7", *FAST)
    first.wait_for(r"^=== shoe ")
    second = start(demos, tmp_path, "--broker", broker.url, "--table", "T7", *FAST)
    assert second.wait() == 2
    assert "table T7 is in use" in second.text and "shoed/T7/status" in second.text
    assert first.interrupt() == 0


def test_the_simulated_supervisor_enters_an_unread_card_and_the_result_follows(
        tmp_path: pathlib.Path, demos: list[Demo]) -> None:
    demo = start(demos, tmp_path, "--own-broker", "--unread-rate", "0.15", "--seed", "5",
                 *FAST)
    hold = demo.wait_for(r"^\*\* HOLD hand (\d+): card_unread, card #(\d+)")
    hand, card = hold.group(1), hold.group(2)
    entered = demo.wait_for(rf"supervisor \(simulated\): enters card #{card} as "
                            r"((10|[2-9AJQK])[♠♥♦♣]) with manual_card")
    demo.wait_for(rf"^  hand {hand} +\S+ +{re.escape(entered.group(1))} +#{card}  "
                  "entered by hand")
    demo.wait_for(rf"^\*\* hold released \(hand {hand}\)")
    demo.wait_for(rf"^hand {hand}: ")
    assert demo.interrupt() == 0
    assert_clean(demo)
    # The hold says what releases it before the supervisor acts.
    text = demo.text
    assert f"manual_card (the face of #{card})" in text.replace("\n      ", " ")


def test_the_simulated_supervisor_resumes_a_resumable_hold(tmp_path: pathlib.Path,
                                                           demos: list[Demo]) -> None:
    demo = start(demos, tmp_path, "--own-broker", "--unread-rate", "0", "--reboot-after",
                 "20", *FAST)
    hold = demo.wait_for(r"^\*\* HOLD hand (\d+): device_rebooted")
    hand = hold.group(1)
    demo.wait_for(r"released by a supervisor's command on shoed/DEMO/cmd: resume")
    demo.wait_for(r"supervisor \(simulated\): checked the table, sends resume")
    demo.wait_for(rf"^\*\* hold released \(hand {hand}\)")
    demo.wait_for(rf"^hand {hand}: ")
    assert demo.interrupt() == 0
    assert_clean(demo)


def test_no_supervisor_leaves_the_hold_and_the_printed_command_releases_it(
        tmp_path: pathlib.Path, demos: list[Demo]) -> None:
    demo = start(demos, tmp_path, "--own-broker", "--no-supervisor", "--unread-rate", "1",
                 *FAST)
    demo.wait_for(r"^\*\* HOLD commencement: card_unread, card #1")
    demo.wait_for(r"^   mosquitto_pub ")
    time.sleep(2.0)  # far longer than the supervisor's delay: nobody releases it
    assert "hold released" not in demo.text and "supervisor (simulated)" not in demo.text
    at = demo.index_of(r"^   mosquitto_pub ")
    end = next(i for i in range(at, len(demo.lines)) if demo.lines[i].endswith("}'"))
    command = "\n".join(demo.lines[at:end + 1])
    subprocess.run(["bash", "-c", command], check=True, timeout=10)
    demo.wait_for(r"^\*\* hold released \(commencement\)")
    demo.wait_for(r"^commencement card K♥: ")
    assert demo.interrupt() == 0
    assert_clean(demo)


def test_the_board_from_roads_is_shown_after_each_result(
        tmp_path: pathlib.Path, demos: list[Demo], broker: PrivateMosquitto) -> None:
    """Whoever publishes `{root}/roads` (the daemon, roads.md section 7), the view draws it."""
    feed = RoadsFeed()

    def roads(topic: str, event: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        return ("shoed/DEMO/roads", feed.message()) if feed.apply(event) else None

    watcher = Watcher(broker.port, ["shoed/DEMO/events"], on_event=roads)
    try:
        demo = start(demos, tmp_path, "--broker", broker.url, "--unread-rate", "0", *FAST)
        demo.wait_for(r"^hand 1: (PLAYER|BANKER|TIE)")
        at = demo.index_of(r"^hand 1: ")
        demo.wait_for(r"^  Bead plate", after=at)
        demo.wait_for(r"^  Big road", after=at)
        demo.wait_for(r"^  hands 1  ", after=at)
        demo.wait_for(r"^hand 2: ", after=at)
        demo.wait_for(r"^  hands 2  ", after=demo.index_of(r"^hand 2: "))
        assert demo.interrupt() == 0
        assert_clean(demo)
    finally:
        watcher.close()


def test_scripts_demo_prints_nothing_noisy_before_the_demo(tmp_path: pathlib.Path) -> None:
    root = pathlib.Path(__file__).resolve().parents[1]
    if not (root / ".venv" / "bin" / "shoed").exists():
        pytest.skip("scripts/demo runs .venv, which scripts/bootstrap has not made here")
    script = (root / "scripts" / "demo").read_text()
    assert "scripts/bootstrap" in script
    out = subprocess.run(["bash", "-c", f"{shlex.quote(str(root / 'scripts/demo'))} --help"],
                         capture_output=True, text=True, timeout=300, check=True)
    assert out.stderr == "", out.stderr
    assert out.stdout.startswith("usage: shoed demo"), out.stdout[:500]


def test_a_default_broker_without_websockets_gets_the_demo_its_own(
        tmp_path: pathlib.Path, demos: list[Demo], broker: PrivateMosquitto) -> None:
    """Debian's mosquitto (which installing it starts on 1883) has no WebSockets listener:
    a demo on it would print a console URL whose page never connects. The demo starts its
    own broker then; its WebSockets listener (on every interface with Debian 12's
    Mosquitto 2.0.11, whatever address it names) takes only the console's sign-in,
    whose password is in the printed URL (outside review of issue 18: anyone on the
    network could send supervisor commands there)."""
    with_console = [arg for arg in FAST if arg != "--no-console"]
    demo = Demo(tmp_path, "--duration", "8", *with_console,
                env={"SHOED_MQTT__URL": broker.url})
    demos.append(demo)
    url = demo.wait_for(r"^console: (http://\S+)").group(1)
    demo.wait_for(r"has no WebSockets listener")
    ws_port = int(demo.wait_for(r"WebSockets on (\d+)").group(1))
    demo.wait_for(r"takes the page as pit, a supervisor")
    login = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).fragment))
    assert login["user"] == "pit" and len(login["password"]) >= 16

    async def sign_in(user: str | None, password: str | None) -> str:
        try:
            async with aiomqtt.Client("127.0.0.1", ws_port, transport="websockets",
                                      username=user, password=password, timeout=5):
                return "in"
        except aiomqtt.MqttError as error:
            return str(error)

    assert asyncio.run(sign_in("pit", login["password"])) == "in"
    assert "Not authorized" in asyncio.run(sign_in(None, None))
    assert "Not authorized" in asyncio.run(sign_in("intruder", "x"))
    assert demo.wait(30) == 0
    assert_clean(demo)


def test_the_demo_rides_out_a_broker_restart(tmp_path: pathlib.Path, demos: list[Demo],
                                             broker: PrivateMosquitto) -> None:
    demo = start(demos, tmp_path, "--broker", broker.url, "--no-console", "--unread-rate",
                 "0", *FAST)
    demo.wait_for(r"^hand 1: ")
    broker.stop()
    demo.wait_for(r"retrying in", timeout=20)
    broker.start()
    after = len(demo.lines)
    demo.wait_for(r"^hand \d+: ", after=after, timeout=60)  # the view carries on
    assert demo.proc.poll() is None
    assert demo.interrupt() == 0
    assert "failed" not in demo.text


@pytest.mark.parametrize(("option", "named"), [
    (["--config", "/nonexistent/shoed.toml"],
     "config file: /nonexistent/shoed.toml does not exist"),
    # the options' own values are checked as they are read (decisions.md 224)
    (["--broker", "http://127.0.0.1:1"], "error: argument --broker: "),
    (["--broker", "mqtt://127.0.0.1:99999"], "error: argument --broker: "),
    (["--table", "bad id"], "error: argument --table: ")])
def test_a_demo_option_that_cannot_be_used_is_named_not_a_traceback(
        option: list[str], named: str) -> None:
    done = subprocess.run([sys.executable, "-m", "shoed.cli", "demo", "--no-console", *option],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert f"shoed demo: {named}" in done.stderr and "Traceback" not in done.stderr


def test_a_config_without_a_table_id_is_a_demo_table_and_a_page_that_cannot_connect_is_said(
        tmp_path: pathlib.Path, demos: list[Demo], broker: PrivateMosquitto) -> None:
    """`--config` with a broker and no `[table] id`: the demo is table DEMO, not the
    config default T01, whose topics may be a real table's (outside review). The broker
    (the test's, no WebSockets) is kept and the console's dead URL is said so."""
    config = tmp_path / "demo.toml"
    config.write_text(f'[mqtt]\nurl = "{broker.url}"\n[console]\nws_url = '
                      f'"ws://127.0.0.1:{free_port()}"\n')
    with_console = [a for a in FAST if a != "--no-console"]
    demo = start(demos, tmp_path, "--config", str(config), "--unread-rate", "0",
                 "--console-listen", f"127.0.0.1:{free_port()}", *with_console)
    demo.wait_for(r"^hand 1: ")
    # (T01 as a word: a shoe id's time, 20261208T0112..., holds "T01" between 01:00 and
    # 01:59 UTC)
    assert "topics shoed/DEMO/#" in demo.text and not re.search(r"\bT01\b", demo.text)
    assert re.search(r"console: nothing answers at\s+ws://127\.0\.0\.1:\d+", demo.text)
    assert demo.interrupt() == 0
    assert_clean(demo)


def test_the_demo_s_stop_ends_a_task_that_swallowed_its_cancel() -> None:
    """An early Ctrl-C hung the demo for good (1 run in 6-8): the view's MQTT client had
    lost its cancel (Python 3.11's wait_for inside aiomqtt) and the stop waited for it
    without end (outside review of issue 18). The stop cancels again until the tasks end,
    and gives up on them after a bound instead of hanging."""
    from shoed.sim import demo as demo_module

    async def view_like(queue: asyncio.Queue[int]) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)  # the cancel lost here
        await queue.get()  # and the task waits on its messages again

    async def main() -> None:
        queue: asyncio.Queue[int] = asyncio.Queue()
        task = asyncio.create_task(view_like(queue), name="view")
        await asyncio.sleep(0)
        await asyncio.wait_for(demo_module._stop(None, [task], None), 10)
        assert task.cancelled()

    asyncio.run(main())

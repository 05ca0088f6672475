"""The integrator's kit under test: shoed daemons and simulated shoes as processes (so
they can be killed with -9), brokers other than Mosquitto, and what the daemon's own
journal says it published (`replay`), to compare consumers with."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

import aiomqtt
from rig import wait_for

from shoed.aio import cancel_and_wait
from shoed.config import write_config
from shoed.sim.broker import BrokerError, answers, free_port


class TableProcess:
    """One table: `shoed simulate` on a pty and `shoed run`, as child processes."""

    def __init__(self, tmp: pathlib.Path, url: str | list[str], table: str = "T9", decks: int = 1,
                 seed: int = 5, pace: float = 0.02, shoes: int = 1, protocol: str = "5",
                 prefix: str = "shoed", roles: dict[str, str] | None = None) -> None:
        self.dir = tmp / table
        self.dir.mkdir(parents=True, exist_ok=True)
        self.table, self.decks, self.seed, self.pace, self.shoes = table, decks, seed, pace, \
            shoes
        self.root = f"{prefix}/{table}"
        self.config = write_config(self.dir / "shoed.toml", {
            "table": {"id": table, "betting_control": "none"},
            "device": {"port": str(self.dir / "shoe"), "reconnect_max_s": 0.3},
            "mqtt": {"url": url, "publish_timeout_s": 3.0, "protocol": protocol,
                     "topic_prefix": self.root},
            "rules": {"decks": decks},
            "state": {"dir": str(self.dir / "state")},
            "log": {"format": "json", "level": "warning"},
            **({"auth.roles": roles} if roles else {}),
        })
        self.daemon: subprocess.Popen[bytes] | None = None
        self.simulator: subprocess.Popen[bytes] | None = None

    def start_simulator(self, seed: int | None = None) -> None:
        with open(self.dir / "simulator.log", "ab") as out:
            self.simulator = subprocess.Popen(
                [sys.executable, "-m", "shoed.cli", "simulate", "--link", str(self.dir / "shoe"),
                 "--decks", str(self.decks), "--seed", str(seed or self.seed), "--pace",
                 str(self.pace), "--shoes", str(self.shoes)], stdout=out, stderr=out)
        deadline = time.monotonic() + 10
        while not (self.dir / "shoe").exists():
            if time.monotonic() > deadline:
                raise AssertionError("the simulated shoe's pty did not appear")
            time.sleep(0.02)

    def start_daemon(self) -> None:
        with open(self.dir / "daemon.log", "ab") as out:
            self.daemon = subprocess.Popen([sys.executable, "-m", "shoed.cli", "run",
                                            "--config", str(self.config)],
                                           stdout=out, stderr=out)

    def start(self) -> TableProcess:
        self.start_simulator()
        self.start_daemon()
        return self

    def kill_daemon(self) -> None:
        if self.daemon is not None:
            self.daemon.send_signal(signal.SIGKILL)
            self.daemon.wait()
            self.daemon = None

    def stop_daemon(self) -> None:
        if self.daemon is not None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
            self.daemon = None

    def stop_simulator(self) -> None:
        if self.simulator is not None:
            self.simulator.send_signal(signal.SIGKILL)
            self.simulator.wait()
            self.simulator = None
            with contextlib.suppress(FileNotFoundError):
                (self.dir / "shoe").unlink()

    def reset_journal(self) -> None:
        """An operator starts a new journal: a new instance, seq from 1 again."""
        assert self.daemon is None
        shutil.rmtree(self.dir / "state")

    def stop(self) -> None:
        self.stop_daemon()
        self.stop_simulator()


async def journal_events(url_port: int, root: str, protocol: str = "5",
                         timeout: float = 20.0) -> list[dict[str, Any]]:
    """Every event the daemon's journal holds, by `replay` from seq 1 (paged)."""
    version = aiomqtt.ProtocolVersion.V5 if protocol == "5" else aiomqtt.ProtocolVersion.V311
    events: dict[int, dict[str, Any]] = {}
    async with aiomqtt.Client("127.0.0.1", url_port, protocol=version,
                              identifier=f"journal-{uuid.uuid4().hex[:8]}") as client:
        await client.subscribe(f"{root}/replay", qos=1)
        await client.subscribe(f"{root}/cmd/response", qos=1)
        from_seq: int | None = 1
        while from_seq is not None:
            request_id = f"journal-{uuid.uuid4().hex[:8]}"
            await client.publish(f"{root}/cmd", json.dumps({
                "request_id": request_id, "command": "replay", "operator": "test",
                "from_seq": from_seq}), qos=1)
            answer: dict[str, Any] | None = None
            async with asyncio.timeout(timeout):
                async for message in client.messages:
                    data = json.loads(message.payload)  # type: ignore[arg-type]
                    if str(message.topic).endswith("/replay"):
                        events[data["seq"]] = data
                    elif data.get("request_id") == request_id:
                        answer = data
                    if answer is not None and len(events) >= answer["result"]["to_seq"]:
                        break
            assert answer is not None and answer["ok"], answer
            from_seq = answer["result"].get("next_from_seq")
    return [events[s] for s in sorted(events)]


async def wait_shoe_ended(feed_events: list[dict[str, Any]], timeout: float = 90) -> None:
    await wait_for(lambda: any(e["type"] == "shoe_ended" for e in feed_events), timeout,
                   "the shoe to end")


# -- other brokers ------------------------------------------------------------------------


class PrivateNats:
    """nats-server with JetStream and its MQTT gateway (MQTT 3.1.1) on free ports."""

    def __init__(self) -> None:
        self.binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
        self.port = free_port()
        self.client_port = free_port()
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="shoed-nats-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    @staticmethod
    def available() -> bool:
        return bool(shutil.which("nats-server") or os.path.exists("/usr/sbin/nats-server"))

    def start(self, timeout: float = 15.0) -> None:
        conf = self.dir / "nats.conf"
        conf.write_text(
            f'server_name: "shoed-test"\nlisten: "127.0.0.1:{self.client_port}"\n'
            f'jetstream {{ store_dir: "{self.dir / "js"}" }}\n'
            f'mqtt {{ listen: "127.0.0.1:{self.port}" }}\n')
        log = open(self.dir / "nats.log", "ab")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen([self.binary, "-c", str(conf)], stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerError(f"nats-server exited: "
                                  f"{(self.dir / 'nats.log').read_text()[-500:]}")
            if answers("127.0.0.1", self.port, 0.2):
                return
            time.sleep(0.05)
        raise BrokerError("nats-server's MQTT port did not open")

    def stop(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


async def stop_tasks(*tasks: asyncio.Future[Any], timeout: float = 15.0) -> None:
    """Cancel the test's own tasks and wait until they have ended: cancelled again while
    they run on (a cancel of aiomqtt's publish can be swallowed on 3.11, and a single
    cancel then a gather never returned), a clear failure if one will not stop."""
    stuck = await cancel_and_wait(tasks, timeout=timeout)
    assert not stuck, f"tasks would not stop within {timeout} s: {stuck}"


def asynctest(fn: Any) -> Any:
    """Run an `async def` test with asyncio.run (the suite does not use pytest-asyncio)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


class PrivateRabbit:
    """A private RabbitMQ node (its own name, ports and directory) with the MQTT plugin
    (MQTT 3.1.1). Started as the `rabbitmq` user when run as root. Slow: ~15 s."""

    SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"

    def __init__(self) -> None:
        self.port, self.amqp_port, self.dist_port = free_port(), free_port(), free_port()
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="shoed-rabbit-"))
        self.node = f"shoed{uuid.uuid4().hex[:8]}@localhost"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    @classmethod
    def available(cls) -> bool:
        return os.path.exists(cls.SERVER) and bool(
            list(pathlib.Path("/usr/lib/rabbitmq/lib").glob("*/plugins/rabbitmq_mqtt-*")))

    def start(self, timeout: float = 60.0) -> None:
        (self.dir / "enabled_plugins").write_text("[rabbitmq_mqtt].\n")
        (self.dir / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.amqp_port}\n"
            f"mqtt.listeners.tcp.default = 127.0.0.1:{self.port}\n"
            "mqtt.allow_anonymous = true\nloopback_users = none\n")
        env = {"HOME": str(self.dir), "RABBITMQ_NODENAME": self.node,
               "RABBITMQ_DIST_PORT": str(self.dist_port),
               "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
               "RABBITMQ_LOG_BASE": str(self.dir / "log"),
               "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq.conf"),
               "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
               "RABBITMQ_PID_FILE": str(self.dir / "pid")}
        argv = ["env", *[f"{k}={v}" for k, v in env.items()], self.SERVER]
        if os.geteuid() == 0:
            subprocess.run(["chown", "-R", "rabbitmq:rabbitmq", str(self.dir)], check=True)
            argv = ["runuser", "-u", "rabbitmq", "--", *argv]
        log = open(self.dir / "out.log", "ab")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerError(f"rabbitmq-server exited: "
                                  f"{(self.dir / 'out.log').read_text()[-800:]}")
            if answers("127.0.0.1", self.port, 0.2):
                return
            time.sleep(0.2)
        raise BrokerError("RabbitMQ's MQTT port did not open")

    def stop(self, kill: bool = False) -> None:
        pid_file = self.dir / "pid"
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int(pid_file.read_text().strip()),
                    signal.SIGKILL if kill else signal.SIGTERM)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        deadline = time.monotonic() + 10
        while answers("127.0.0.1", self.port, 0.2) and time.monotonic() < deadline:
            time.sleep(0.1)
        with contextlib.suppress(FileNotFoundError):
            pid_file.unlink()

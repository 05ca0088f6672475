"""The shipped broker ACL (deploy/mosquitto/shoed.acl) for console users, on a real
Mosquitto with passwords: a console user reads the tables' public topics, writes only
their own command topic and reads only their own answers."""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess

import aiomqtt
import pytest
from rig import wait_for

from shoed.sim.broker import PrivateMosquitto, free_port

pytestmark = pytest.mark.broker
ROOT = pathlib.Path(__file__).resolve().parent.parent
USERS = {"table-T9": "t9-pw", "supervisor": "sup-pw", "pit-supervisor-1": "pit-pw",
         "surveillance-1": "sv-pw"}


@pytest.fixture
def acl_broker(tmp_path: pathlib.Path):
    passwd = tmp_path / "passwd"
    for i, (user, password) in enumerate(USERS.items()):
        subprocess.run(["mosquitto_passwd", *(["-c"] if i == 0 else []), "-b", str(passwd),
                        user, password], check=True, capture_output=True)
    acl = tmp_path / "acl"
    acl.write_text((ROOT / "deploy/mosquitto/shoed.acl").read_text().replace("T01", "T9"))
    port, ws_port = free_port(), free_port()
    broker = PrivateMosquitto(port=port, directory=tmp_path, extra_config=(
        f"per_listener_settings false\nallow_anonymous false\npassword_file {passwd}\n"
        f"acl_file {acl}\nlistener {port} 127.0.0.1\n"
        f"listener {ws_port} 127.0.0.1\nprotocol websockets\n"))
    broker.start()
    yield broker, ws_port
    broker.stop()


def client(port: int, user: str, **kw) -> aiomqtt.Client:
    return aiomqtt.Client("127.0.0.1", port, username=user, password=USERS[user],
                          protocol=aiomqtt.ProtocolVersion.V311, **kw)


def test_console_users_read_tables_and_command_only_as_themselves(acl_broker) -> None:
    broker, ws_port = acl_broker

    async def main() -> None:
        seen: dict[str, list[str]] = {"watch": [], "pit": []}

        async def collect(c: aiomqtt.Client, into: list[str]) -> None:
            async for message in c.messages:
                into.append(str(message.topic))

        # The console user over WebSockets, as the page connects.
        async with client(broker.port, "supervisor") as watch, \
                client(broker.port, "table-T9") as daemon, \
                client(ws_port, "pit-supervisor-1", transport="websockets") as pit:
            await watch.subscribe("shoed/#", qos=1)
            await pit.subscribe("shoed/T9/state", qos=1)
            await pit.subscribe("shoed/T9/roads", qos=1)
            await pit.subscribe("shoed/T9/replay", qos=1)
            await pit.subscribe("shoed/T9/cmd/response/#", qos=1)
            await pit.subscribe("shoed/T9/cmd/by/#", qos=1)
            tasks = [asyncio.create_task(collect(watch, seen["watch"])),
                     asyncio.create_task(collect(pit, seen["pit"]))]
            body = json.dumps({"request_id": "r1", "command": "whoami", "operator": "x"})
            # Its own command topic: allowed. Someone else's, or the bare cmd: dropped.
            await pit.publish("shoed/T9/cmd/by/pit-supervisor-1", body, qos=1)
            await pit.publish("shoed/T9/cmd/by/surveillance-1", body, qos=1)
            await pit.publish("shoed/T9/cmd", body, qos=1)
            await pit.publish("shoed/T9/state", "{}", qos=1)
            # What the table's daemon publishes.
            for topic in ("shoed/T9/state", "shoed/T9/roads", "shoed/T9/replay",
                          "shoed/T9/cmd/response/pit-supervisor-1",
                          "shoed/T9/cmd/response/surveillance-1"):
                await daemon.publish(topic, "{}", qos=1)
            await wait_for(lambda: "shoed/T9/cmd/response/pit-supervisor-1" in seen["pit"], 10,
                           "the console user's own answer")
            await asyncio.sleep(0.5)
            for task in tasks:
                task.cancel()
        assert "shoed/T9/cmd/by/pit-supervisor-1" in seen["watch"]
        assert "shoed/T9/cmd/by/surveillance-1" not in seen["watch"]
        assert "shoed/T9/cmd" not in seen["watch"]
        assert seen["watch"].count("shoed/T9/state") == 1  # the console user's was dropped
        # ... and the replay a supervisor may ask for (outside review: it was answered,
        # and its events never reached the console user)
        assert {"shoed/T9/state", "shoed/T9/roads", "shoed/T9/replay"} <= set(seen["pit"])
        assert "shoed/T9/cmd/response/surveillance-1" not in seen["pit"]
        assert not any("/cmd/by/" in t for t in seen["pit"])  # may not read commands
    asyncio.run(main())

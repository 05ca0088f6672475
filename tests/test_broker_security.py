"""The broker side (deploy/mosquitto): TLS, passwords and the ACL, with the real daemon.

A client without rights can neither command the table nor spoof its events, and the
daemon works over TLS with authentication. Uses deploy/mosquitto/shoed.acl itself.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import shutil
import signal
import ssl
import subprocess

import aiomqtt
import pytest
from rig import rig, wait_for

from shoed.sim.broker import PrivateMosquitto, free_port
from shoed.sim.shoe import Script

pytestmark = pytest.mark.broker
ROOT = pathlib.Path(__file__).resolve().parent.parent
PASSWORDS = {"table-T9": "t9-secret-pw", "supervisor": "sup-pw", "consumer": "con-pw",
             "display-7": "disp-pw"}  # display-7: a user the ACL does not name


def make_pki(directory: pathlib.Path) -> None:
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    # The extensions a strict verifier asks for (Python 3.13 verifies with
    # VERIFY_X509_STRICT by default: a CA without keyUsage, or a certificate without an
    # authority key identifier, is refused).
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=shoed-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout", "ca.key", "-out", "ca.crt")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout",
        "broker.key", "-out", "broker.csr")
    (directory / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n")
    run("x509", "-req", "-in", "broker.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-out", "broker.crt", "-extfile", "san.ext")


@pytest.fixture
def secure_broker(tmp_path: pathlib.Path):
    if shutil.which("openssl") is None or shutil.which("mosquitto_passwd") is None:
        pytest.fail("openssl and mosquitto_passwd are needed (apt-get install openssl mosquitto)")
    pki = tmp_path / "pki"
    pki.mkdir()
    make_pki(pki)
    passwd = tmp_path / "passwd"
    for i, (user, password) in enumerate(PASSWORDS.items()):
        flags = ["-c"] if i == 0 else []
        subprocess.run(["mosquitto_passwd", *flags, "-b", str(passwd), user, password],
                       check=True, capture_output=True)
    acl = tmp_path / "acl"
    acl.write_text((ROOT / "deploy/mosquitto/shoed.acl").read_text().replace("T01", "T9"))
    port = free_port()
    broker = PrivateMosquitto(port=port, extra_config=(
        f"per_listener_settings false\nallow_anonymous false\npassword_file {passwd}\n"
        f"acl_file {acl}\nlistener {port} 127.0.0.1\ncafile {pki / 'ca.crt'}\n"
        f"certfile {pki / 'broker.crt'}\nkeyfile {pki / 'broker.key'}\n"), directory=tmp_path)
    broker.start()
    yield broker, pki
    broker.stop()


def tls(pki: pathlib.Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pki / "ca.crt"))


def test_acl_tls_and_authentication(tmp_path: pathlib.Path, secure_broker) -> None:
    broker, pki = secure_broker
    (tmp_path / "pw").write_text(PASSWORDS["table-T9"] + "\n")

    async def main() -> None:
        seen: list[dict] = []
        responses: list[dict] = []
        async with aiomqtt.Client("127.0.0.1", broker.port, username="supervisor",
                                  password=PASSWORDS["supervisor"],
                                  tls_context=tls(pki)) as watcher:
            await watcher.subscribe("shoed/T9/#", qos=1)

            async def watch() -> None:
                async for message in watcher.messages:
                    if str(message.topic) == "shoed/T9/events":
                        seen.append(json.loads(message.payload))  # type: ignore[arg-type]
                    elif str(message.topic) == "shoed/T9/cmd/response":
                        responses.append(json.loads(message.payload))  # type: ignore[arg-type]

            watching = asyncio.create_task(watch())
            # A fake rig broker object carrying the TLS URL for the daemon.
            broker_url = type("B", (), {"url": f"mqtts://127.0.0.1:{broker.port}",
                                        "port": broker.port})()
            async with rig(tmp_path, broker_url, decks=1, seed=2,  # type: ignore[arg-type]
                           script=Script(pace_s=0.02, shoes=1), collector=False,
                           mqtt={"username": "table-T9", "password_file": str(tmp_path / "pw"),
                                 "ca_file": str(pki / "ca.crt")}) as r:
                await wait_for(lambda: any(e["type"] == "hand_result" for e in seen), 30,
                               "events over TLS with authentication")
                # A consumer (read-only) tries to command the table and to spoof an event.
                async with aiomqtt.Client("127.0.0.1", broker.port, username="consumer",
                                          password=PASSWORDS["consumer"], tls_context=tls(pki),
                                          protocol=aiomqtt.ProtocolVersion.V311) as rogue:
                    await rogue.publish("shoed/T9/cmd", json.dumps({
                        "request_id": "rogue-1", "command": "void_shoe", "operator": "rogue",
                        "reason": "x"}), qos=1)
                    await rogue.publish("shoed/T9/events", json.dumps({
                        "event_id": "fake", "type": "hand_result", "seq": 1}), qos=1)
                # A supervisor's command goes through.
                await watcher.publish("shoed/T9/cmd", json.dumps({
                    "request_id": "sup-1", "command": "recall", "operator": "supervisor"}),
                    qos=1)
                await wait_for(lambda: any(x["request_id"] == "sup-1" for x in responses), 10,
                               "the supervisor's answer")
                await asyncio.sleep(0.5)
                assert not any(x["request_id"] == "rogue-1" for x in responses)
                assert not any(e.get("event_id") == "fake" for e in seen)
                assert r.daemon.desk.handled == 1  # the rogue command never arrived
                assert r.daemon.recorder.engine is not None
                assert r.daemon.recorder.engine.public_state()["shoe_state"] != "shoe_voided"
            watching.cancel()
        # No anonymous clients, no wrong passwords.
        for user, password in ((None, None), ("supervisor", "wrong")):
            with pytest.raises(aiomqtt.MqttError):
                async with aiomqtt.Client("127.0.0.1", broker.port, username=user,
                                          password=password, tls_context=tls(pki)):
                    pass

    asyncio.run(main())


def test_password_never_logged(tmp_path: pathlib.Path, secure_broker,
                               capsys: pytest.CaptureFixture[str]) -> None:
    broker, pki = secure_broker
    (tmp_path / "pw").write_text(PASSWORDS["table-T9"] + "\n")
    from shoed import logs

    logs.configure("json", "debug")

    async def main() -> None:
        broker_url = type("B", (), {"url": f"mqtts://127.0.0.1:{broker.port}",
                                    "port": broker.port})()
        async with rig(tmp_path, broker_url, decks=1, seed=3,  # type: ignore[arg-type]
                       script=Script(pace_s=0.05, shoes=1), collector=False,
                       mqtt={"username": "table-T9", "password_file": str(tmp_path / "pw"),
                             "ca_file": str(pki / "ca.crt")}) as r:
            await wait_for(lambda: r.daemon.status.mqtt_connected, 20, "connected")
            r.daemon.log.info("probe", password="should-not-appear")
            await asyncio.sleep(1.0)

    try:
        asyncio.run(main())
    finally:
        logs.configure("json", "warning")
    out = capsys.readouterr()
    text = out.out + out.err
    assert "mqtt_connected" in text
    assert PASSWORDS["table-T9"] not in text and "should-not-appear" not in text


def test_a_publish_the_acl_refuses_is_not_counted_as_published(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An ACL that does not let the table write its events (MQTT 5: PUBACK 0x87, Not
    authorized): nothing refused is marked published, the refusal is an error naming
    the topic and the reason, and once the ACL is mended every event arrives, once."""
    passwd = tmp_path / "passwd"
    for i, user in enumerate(("table-T9", "supervisor")):
        subprocess.run(["mosquitto_passwd", *(["-c"] if i == 0 else []), "-b", str(passwd),
                        user, PASSWORDS[user]], check=True, capture_output=True)
    shipped = (ROOT / "deploy/mosquitto/shoed.acl").read_text().replace("T01", "T9")
    acl = tmp_path / "acl"
    # The table may write its status and device topics only: its events are refused.
    acl.write_text(shipped.replace("topic write shoed/T9/#",
                                   "topic write shoed/T9/status\ntopic write shoed/T9/device"))
    port = free_port()
    broker = PrivateMosquitto(port=port, extra_config=(
        f"per_listener_settings false\nallow_anonymous false\npassword_file {passwd}\n"
        f"acl_file {acl}\nlistener {port} 127.0.0.1\n"), directory=tmp_path)
    broker.start()
    (tmp_path / "pw").write_text(PASSWORDS["table-T9"] + "\n")
    from shoed import logs

    logs.configure("json", "warning")

    async def main() -> None:
        seen: list[dict] = []
        async with aiomqtt.Client("127.0.0.1", port, username="supervisor",
                                  password=PASSWORDS["supervisor"]) as watcher:
            await watcher.subscribe("shoed/T9/events", qos=1)

            async def watch() -> None:
                async for message in watcher.messages:
                    seen.append(json.loads(message.payload))  # type: ignore[arg-type]

            watching = asyncio.create_task(watch())
            async with rig(tmp_path, broker, decks=1, seed=2, collector=False,
                           script=Script(pace_s=0.05, shoes=1),
                           mqtt={"username": "table-T9",
                                 "password_file": str(tmp_path / "pw")}) as r:
                await wait_for(lambda: hasattr(r.daemon, "outbox"), 10, "the journal open")
                outbox = r.daemon.outbox
                await wait_for(lambda: outbox.depth() >= 12, 30, "cards journalled")
                await wait_for(lambda: "refused" in (r.daemon.status.mqtt_error or ""), 10,
                               "the refusal in the status")
                assert "shoed/T9/events" in (r.daemon.status.mqtt_error or "")
                assert "Not authorized" in (r.daemon.status.mqtt_error or "")
                await asyncio.sleep(1.0)
                assert seen == [] and outbox.acked_seq == 0
                depth = outbox.depth()
                assert depth >= 12
                # The ACL mended, the broker told to read it again: every event, once.
                acl.write_text(shipped)
                broker.proc.send_signal(signal.SIGHUP)
                await wait_for(lambda: outbox.depth() == 0, 30, "the outbox drained")
                await wait_for(lambda: len(seen) >= depth, 10, "every event")
                await asyncio.sleep(0.5)
                seqs = [e["seq"] for e in seen]
                assert seqs == list(range(1, len(seqs) + 1))
                assert r.daemon.status.mqtt_error is None
            watching.cancel()

    try:
        asyncio.run(main())
    finally:
        broker.stop()
    out = capsys.readouterr()
    refusals = [json.loads(line) for line in (out.out + out.err).splitlines()
                if "mqtt_publish_refused" in line]
    assert refusals and refusals[0]["level"] == "error"
    assert refusals[0]["topic"] == "shoed/T9/events" and refusals[0]["code"] == "0x87"


def test_tail_takes_the_casinos_ca_and_writes_only_events_to_stdout(
        tmp_path: pathlib.Path, secure_broker) -> None:
    """`shoed tail --ca-file`: a broker whose certificate a private CA signed (as
    deploy/mosquitto and install.md set it up), not the system's store. Its own log
    lines go to stderr: `--json` output is JSON events, nothing else."""
    import sys

    broker, pki = secure_broker
    (tmp_path / "pw").write_text(PASSWORDS["table-T9"] + "\n")
    (tmp_path / "con").write_text(PASSWORDS["consumer"] + "\n")
    url = f"mqtts://127.0.0.1:{broker.port}"

    async def main() -> None:
        out = (tmp_path / "tail.out").open("w")
        err = (tmp_path / "tail.err").open("w")
        tail = subprocess.Popen(
            [sys.executable, "-m", "shoed.cli", "tail", "--table", "T9", "--url", url,
             "--json", "--from-seq", "1", "--username", "consumer", "--password-file",
             str(tmp_path / "con"), "--ca-file", str(pki / "ca.crt")],
            stdout=out, stderr=err)
        try:
            broker_url = type("B", (), {"url": url, "port": broker.port})()
            async with rig(tmp_path, broker_url, decks=1, seed=2,  # type: ignore[arg-type]
                           script=Script(pace_s=0.02, shoes=1), collector=False,
                           mqtt={"username": "table-T9", "password_file": str(tmp_path / "pw"),
                                 "ca_file": str(pki / "ca.crt")},
                           auth={"roles": {"consumer": "auditor"}}):  # it may replay
                await wait_for(lambda: len((tmp_path / "tail.out").read_text().splitlines())
                               >= 5, 30, "events through tail over TLS")
        finally:
            tail.terminate()
            tail.wait(10)
            out.close()
            err.close()
        lines = (tmp_path / "tail.out").read_text().splitlines()
        seqs = [json.loads(line)["seq"] for line in lines]  # every line a JSON event
        assert seqs[:5] == [1, 2, 3, 4, 5]
        assert "CERTIFICATE_VERIFY_FAILED" not in (tmp_path / "tail.err").read_text()

    asyncio.run(main())

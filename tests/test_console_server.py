"""The console's HTTP server and command line (no browser): what it serves, what it refuses,
what it tells the page, and that a wheel carries the page."""

from __future__ import annotations

import asyncio
import json
import pathlib
import shutil
import subprocess
import sys
import zipfile
from typing import Any

import pytest
from pydantic import ValidationError

from shoed.config import Settings
from shoed.console import page_config, start_console
from shoed.console.server import ConsoleError, parse_listen, parse_tables

ROOT = pathlib.Path(__file__).resolve().parent.parent


async def http(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()


def test_serves_the_page_its_config_and_mqtt_js_and_nothing_else(tmp_path: pathlib.Path) -> None:
    settings = Settings.model_validate({"table": {"id": "T01"},
                                        "mqtt": {"url": "mqtts://broker.pit:8883"},
                                        "state": {"dir": str(tmp_path)}})

    async def main() -> None:
        console = await start_console(settings, "127.0.0.1:0", "T01,T02")
        port = int(console.url.rsplit(":", 1)[1].rstrip("/"))
        assert console.url == f"http://127.0.0.1:{port}/"
        try:
            status, headers, body = await http(port, get("/"))
            assert status == 200 and headers["Content-Type"].startswith("text/html")
            assert b'data-testid="login"' in body and b"/vendor/mqtt/mqtt.min.js" in body
            status, headers, body = await http(port, get("/config.json"))
            assert status == 200
            assert json.loads(body) == {
                "schema_version": 1, "broker": {"url": "wss://broker.pit:9001", "tls": True},
                "tables": [{"table_id": "T01", "root": "shoed/T01"},
                           {"table_id": "T02", "root": "shoed/T02"}],
                "whoami_timeout_s": 3.0}
            status, headers, body = await http(port, get("/vendor/mqtt/mqtt.min.js"))
            assert status == 200 and headers["Content-Type"].startswith("text/javascript")
            assert len(body) > 100_000
            for module in ("app.js", "link.js", "table.js", "roads.js", "pit.js", "dom.js"):
                status, headers, _ = await http(port, get(f"/{module}"))
                assert status == 200 and headers["Content-Type"].startswith("text/javascript")
            head = b"HEAD /style.css HTTP/1.1\r\nConnection: close\r\n\r\n"
            status, _, body = await http(port, head)
            assert status == 200 and body == b""
            # Nothing outside the static folder, however the path is spelt.
            for path in ("/../server.py", "/%2e%2e/server.py", "/..%2fserver.py",
                         "/vendor/../../cli.py", "/nope.js"):
                status, _, body = await http(port, get(path))
                assert status == 404, path
            status, _, _ = await http(port, b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
            assert status == 405
            # Keep-alive: two requests on one connection.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /config.json HTTP/1.1\r\n\r\nGET /favicon.svg HTTP/1.1\r\n"
                         b"Connection: close\r\n\r\n")
            data = await asyncio.wait_for(reader.read(), 10)
            assert data.count(b"HTTP/1.1 200 OK") == 2
            writer.close()
        finally:
            await console.close()
    asyncio.run(main())


def test_page_config_choices(tmp_path: pathlib.Path) -> None:
    base = {"state": {"dir": str(tmp_path)}}
    plain = Settings.model_validate({**base, "table": {"id": "T05"},
                                     "mqtt": {"url": "mqtt://10.0.0.5", "topic_prefix": "c/t5"}})
    config = page_config(plain)
    assert config["broker"] == {"url": "ws://10.0.0.5:9001", "tls": False}
    assert config["tables"] == [{"table_id": "T05", "root": "c/t5"}]
    own = Settings.model_validate({**base, "console": {
        "ws_url": "wss://pit.example:443/mqtt", "tables": ["A1", "B2"],
        "topic_template": "casino/{table}/shoe"}})
    config = page_config(own)
    assert config["broker"] == {"url": "wss://pit.example:443/mqtt", "tls": True}
    assert [t["root"] for t in config["tables"]] == ["casino/A1/shoe", "casino/B2/shoe"]
    # An IPv6 broker: the URL keeps its brackets (it was ws://::1:9001, no URL at all).
    v6 = Settings.model_validate({**base, "mqtt": {"url": "mqtts://[::1]:8883"}})
    assert page_config(v6)["broker"] == {"url": "wss://[::1]:9001", "tls": True}


@pytest.mark.parametrize(("console", "said"), [
    # check-config said OK, then `shoed console` refused naming --tables, not given.
    ({"tables": ["a/b"]}, "console.tables: Value error, 'a/b' is not a table id"),
    ({"tables": ["T01", "T01"]}, "console.tables: Value error, a table is listed twice: T01"),
    ({"tables": [""]}, "console.tables: Value error, '' is not a table id"),
    ({"topic_template": "shoed/#/{table}"}, "console.topic_template: Value error, must not "
                                            "contain the MQTT wildcards"),
    ({"topic_template": "shoed/tables"}, "console.topic_template: Value error, must contain"),
    ({"topic_template": "{table}/{x}"}, "console.topic_template: Value error, has a { or }"),
    ({"topic_template": "$SYS/{table}"}, "console.topic_template: Value error, must not start"),
    ({"listen": "[::1:8080"}, "console.listen: Value error, expected HOST:PORT"),
    ({"listen": "h:99999"}, "console.listen: Value error, the port must be 0"),
])
def test_check_config_refuses_what_the_console_would_refuse_naming_the_key(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], console: dict[str, Any],
        said: str) -> None:
    from shoed.cli import main
    from shoed.config import write_config

    path = write_config(tmp_path / "shoed.toml", {"console": console})
    assert main(["check-config", str(path)]) == 2
    assert said in capsys.readouterr().err
    assert main(["console", "--config", str(path)]) == 2
    assert said in capsys.readouterr().err


def test_console_listen_and_the_option_take_the_same_addresses(tmp_path: pathlib.Path) -> None:
    """console.listen refused [::1]:8080, which `--listen` took."""
    for listen in ("[::1]:8080", "::1:8080", "0.0.0.0:0", "pit.local:8080"):
        settings = Settings.model_validate({"console": {"listen": listen}})
        assert parse_listen(settings.console.listen)[1] == int(listen.rpartition(":")[2])
    assert parse_listen("[::1]:8080") == ("::1", 8080)
    for bad in ("8080", "[::1:8080", "h:99999", ":8080", "a b:1", "h:\u0663"):
        with pytest.raises(ValidationError, match=r"console\.listen"):
            Settings.model_validate({"console": {"listen": bad}})
        with pytest.raises(ConsoleError, match="--listen: "):
            parse_listen(bad)
        with pytest.raises(ConsoleError, match=r"console\.listen: "):
            parse_listen(bad, "console.listen")


def test_bad_options_are_refused_naming_them() -> None:
    with pytest.raises(ConsoleError, match="--listen"):
        parse_listen("8080")
    with pytest.raises(ConsoleError, match="--listen"):
        parse_listen("host:99999")
    with pytest.raises(ConsoleError, match="'T 1'"):
        parse_tables("T01,T 1")
    with pytest.raises(ConsoleError, match="twice"):
        parse_tables("T01,T01")
    assert parse_tables(" T01, T02 ,") == ["T01", "T02"]
    run = subprocess.run([sys.executable, "-m", "shoed.cli", "console", "--listen", "nope"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 2
    assert "--listen: expected HOST:PORT" in run.stderr


def test_shoed_console_prints_its_url_and_serves(tmp_path: pathlib.Path) -> None:
    from shoed.sim.broker import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "shoed.cli", "console", "--listen",
                             f"127.0.0.1:{port}", "--tables", "T01,T02"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"PATH": "/usr/bin:/bin", "SHOED_STATE__DIR": str(tmp_path)})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == f"shoed console: http://127.0.0.1:{port}/"
        status, _, body = asyncio.run(http(port, get("/config.json")))
        assert status == 200
        assert [t["table_id"] for t in json.loads(body)["tables"]] == ["T01", "T02"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.once
def test_a_wheel_carries_the_page_and_mqtt_js_with_its_licence(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in ("shoed", "firmware_protocol"):
        shutil.copytree(ROOT / package, source / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                          str(tmp_path), str(source)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    wheel = next(tmp_path.glob("shoed-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("index.html", "style.css", "app.js", "link.js", "table.js", "roads.js",
                 "pit.js", "dom.js", "favicon.svg", "vendor/mqtt/mqtt.min.js",
                 "vendor/mqtt/LICENSE.md", "vendor/mqtt/VERSION"):
        assert f"shoed/console/static/{name}" in names, name

"""The console's HTTP server: the page's static files and its `config.json`, nothing else.

The page talks MQTT over WebSockets straight to the broker with the user's own broker
credentials, so this server holds no secret and relays no message: it only tells the page
where the broker is and which tables to show. It is a few dozen lines on asyncio streams
(GET and HEAD of a fixed set of files), so it needs no web framework and costs nothing idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from shoed.config import Settings, listen_problem, tables_problem

STATIC = pathlib.Path(__file__).resolve().parent / "static"
MAX_REQUEST = 16 * 1024
# Explicit, so a machine's /etc/mime.types cannot change them (modules need a JS type).
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml",
         ".json": "application/json", ".md": "text/markdown; charset=utf-8",
         ".png": "image/png"}


class ConsoleError(ValueError):
    """A console option that cannot be used; the message names it."""


def parse_listen(listen: str, key: str = "--listen") -> tuple[str, int]:
    """HOST:PORT as console.listen takes it (`key`: where it was given)."""
    if problem := listen_problem(listen):
        raise ConsoleError(f"{key}: {problem}, got {listen!r}")
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


def parse_tables(text: str | list[str] | None, key: str = "--tables") -> list[str]:
    items = text.split(",") if isinstance(text, str) else list(text or [])
    tables = [t.strip() for t in items if t.strip()]
    if problem := tables_problem(tables):
        raise ConsoleError(f"{key}: {problem}")
    return tables


def ws_url(settings: Settings) -> str:
    if settings.console.ws_url:
        return settings.console.ws_url
    host, _ = settings.mqtt.host_port
    host = f"[{host}]" if ":" in host else host  # an IPv6 address, as a URL writes it
    return f"{'wss' if settings.mqtt.tls else 'ws'}://{host}:9001"


def page_config(settings: Settings, tables: list[str] | None = None) -> dict[str, Any]:
    """What `config.json` tells the page: the broker's WebSockets URL and the tables."""
    chosen = parse_tables(tables) if tables else \
        parse_tables(settings.console.tables, "console.tables")
    if not chosen:
        chosen = [settings.table.id]
    roots = []
    for table in chosen:
        root = settings.topic_root if table == settings.table.id else \
            settings.console.topic_template.replace("{table}", table).rstrip("/")
        roots.append({"table_id": table, "root": root})
    url = ws_url(settings)
    return {"schema_version": 1, "broker": {"url": url, "tls": url.startswith("wss://")},
            "tables": roots, "whoami_timeout_s": settings.console.whoami_timeout_s}


@dataclass
class ConsoleServer:
    """A running console: `url` to open, `close()` to stop serving."""

    config: dict[str, Any]
    server: asyncio.Server | None = None
    url: str = ""
    requests: int = field(default=0)

    async def start(self, host: str, port: int) -> str:
        self.server = await asyncio.start_server(self._client, host, port)
        bound = self.server.sockets[0].getsockname()
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        self.url = f"http://{shown}:{bound[1]}/"
        return self.url

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await self.server.wait_closed()
            self.server = None

    async def serve_forever(self) -> None:
        assert self.server is not None
        await self.server.serve_forever()

    def _resolve(self, target: str) -> tuple[int, bytes, str]:
        path = urllib.parse.urlsplit(target).path
        if path in ("/", "/index.html", "/table", "/pit"):
            path = "/index.html"
        if path == "/config.json":
            return 200, json.dumps(self.config).encode(), "application/json"
        relative = urllib.parse.unquote(path).lstrip("/")
        file = (STATIC / relative).resolve()
        if STATIC not in file.parents or not file.is_file():
            return 404, b"not found\n", "text/plain; charset=utf-8"
        return 200, file.read_bytes(), TYPES.get(file.suffix, "application/octet-stream")

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                      ) -> None:
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                        ConnectionError):
                    return
                if len(head) > MAX_REQUEST:
                    return
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                keep_alive = len(parts) == 3 and parts[2] == "HTTP/1.1" and not any(
                    line.lower().startswith("connection:") and "close" in line.lower()
                    for line in lines[1:])
                if len(parts) != 3 or parts[0] not in ("GET", "HEAD"):
                    status, body, kind = 405, b"only GET and HEAD\n", "text/plain"
                    keep_alive = False
                else:
                    status, body, kind = self._resolve(parts[1])
                self.requests += 1
                reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}[status]
                writer.write((f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\n"
                              f"Content-Length: {len(body)}\r\nCache-Control: no-cache\r\n"
                              f"X-Content-Type-Options: nosniff\r\n"
                              f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
                              ).encode())
                if parts[0] != "HEAD":
                    writer.write(body)
                await writer.drain()
                if not keep_alive:
                    return
        except ConnectionError:
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def start_console(settings: Settings, listen: str | None = None,
                        tables: list[str] | str | None = None) -> ConsoleServer:
    """Start serving the console on the running loop; `listen` HOST:PORT (port 0: any)."""
    host, port = parse_listen(listen) if listen else \
        parse_listen(settings.console.listen, "console.listen")
    console = ConsoleServer(page_config(settings, parse_tables(tables) if tables else None))
    await console.start(host, port)
    return console


async def serve_console(settings: Settings, listen: str | None = None,
                        tables: list[str] | str | None = None) -> str:
    """Start the console on the running loop and return its URL (it serves until the
    loop ends). For a handle that can be closed, use :func:`start_console`."""
    console = await start_console(settings, listen, tables)
    _RUNNING.append(console)
    return console.url


_RUNNING: list[ConsoleServer] = []  # kept alive while the loop serves them

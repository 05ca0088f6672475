"""The demo starts the real web console in its own process, pointed at its broker."""

from __future__ import annotations

import asyncio
import json
import urllib.request

from shoed.config import Settings
from shoed.sim.broker import free_port
from shoed.sim.demo import start_console


def test_the_demo_serves_the_console_pointed_at_its_websockets_listener() -> None:
    settings = Settings.model_validate({"table": {"id": "DEMO3"}})
    port = free_port()

    async def go() -> tuple[str, dict]:
        url = await start_console(settings, f"127.0.0.1:{port}", ["DEMO3"],
                                  "ws://127.0.0.1:9123")
        body = await asyncio.to_thread(
            lambda: urllib.request.urlopen(url.rstrip("/") + "/config.json", timeout=5).read())
        return url, json.loads(body)

    url, config = asyncio.run(go())
    assert url.startswith(f"http://127.0.0.1:{port}")
    assert config["broker"]["url"] == "ws://127.0.0.1:9123", config
    assert "DEMO3" in json.dumps(config)

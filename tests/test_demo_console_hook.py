"""The demo's optional web console step: used when `shoed.console` offers `serve_console`."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import types
from typing import Any

import pytest

from shoed.config import Settings
from shoed.sim.demo import start_console


def test_the_console_is_started_with_the_demo_settings_and_its_url_returned(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []

    async def serve_console(settings: Settings, listen: str, tables: list[str],
                            websockets_url: str | None = None) -> str:
        calls.append((settings.table.id, listen, tables, websockets_url))
        return f"http://{listen}/"

    module = types.ModuleType("shoed.console")
    module.serve_console = serve_console  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "shoed.console", module)
    settings = Settings.model_validate({"table": {"id": "DEMO3"}})
    url = asyncio.run(start_console(settings, "127.0.0.1:8099", ["DEMO3"],
                                    "ws://127.0.0.1:9001"))
    assert url == "http://127.0.0.1:8099/"
    assert calls == [("DEMO3", "127.0.0.1:8099", ["DEMO3"], "ws://127.0.0.1:9001")]


def test_without_a_console_package_the_step_is_skipped(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    if importlib.util.find_spec("shoed.console") is not None:
        monkeypatch.setitem(sys.modules, "shoed.console", types.ModuleType("shoed.console"))
    else:
        monkeypatch.delitem(sys.modules, "shoed.console", raising=False)
    assert asyncio.run(start_console(Settings(), "127.0.0.1:8099", ["DEMO"], None)) is None

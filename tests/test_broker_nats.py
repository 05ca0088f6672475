"""The delivery tests on NATS Server's MQTT gateway (JetStream on, MQTT 3.1.1)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import broker_suite
import pytest
from kit import PrivateNats, asynctest

pytestmark = [pytest.mark.once, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def other_broker() -> Iterator[PrivateNats]:
    if not PrivateNats.available():
        print("\nNOTICE: nats-server is not installed: the NATS MQTT tests are skipped")
        pytest.skip("nats-server is not installed")
    nats = PrivateNats()
    nats.start()
    yield nats
    nats.stop()


@asynctest
async def test_full_shoe_on_nats(tmp_path: pathlib.Path, other_broker: Any) -> None:
    await broker_suite.full_shoe_and_restart(tmp_path, other_broker, restart=False)


@asynctest
async def test_broker_restart_mid_shoe_on_nats(tmp_path: pathlib.Path,
                                               other_broker: Any) -> None:
    await broker_suite.full_shoe_and_restart(tmp_path, other_broker, restart=True)


@asynctest
async def test_commands_on_nats(tmp_path: pathlib.Path, other_broker: Any) -> None:
    await broker_suite.commands(tmp_path, other_broker)

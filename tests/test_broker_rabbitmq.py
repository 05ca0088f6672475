"""The delivery tests on RabbitMQ MQTT plugin (MQTT 3.1.1), where installed."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import broker_suite
import pytest
from kit import PrivateRabbit, asynctest

pytestmark = [pytest.mark.once, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def other_broker() -> Iterator[PrivateRabbit]:
    if not PrivateRabbit.available():
        print("\nNOTICE: RabbitMQ or its MQTT plugin is not installed: "
              "the RabbitMQ MQTT tests are skipped")
        pytest.skip("RabbitMQ with rabbitmq_mqtt is not installed")
    rabbit = PrivateRabbit()
    rabbit.start()
    yield rabbit
    rabbit.stop()


@asynctest
async def test_full_shoe_on_rabbitmq(tmp_path: pathlib.Path, other_broker: Any) -> None:
    await broker_suite.full_shoe_and_restart(tmp_path, other_broker, restart=False)


@asynctest
async def test_broker_restart_mid_shoe_on_rabbitmq(tmp_path: pathlib.Path,
                                               other_broker: Any) -> None:
    await broker_suite.full_shoe_and_restart(tmp_path, other_broker, restart=True)


@asynctest
async def test_commands_on_rabbitmq(tmp_path: pathlib.Path, other_broker: Any) -> None:
    await broker_suite.commands(tmp_path, other_broker)

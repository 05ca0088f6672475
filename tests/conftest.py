"""Shared fixtures: the spec's test vectors, and a private Mosquitto per test session."""

from __future__ import annotations

import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
VECTORS_PATH = SHARED / "spec" / "protocol-vectors.json"
# A copy travels with the repo so the tests run where ../shared is absent.
LOCAL_VECTORS = pathlib.Path(__file__).resolve().parent / "data" / "protocol-vectors.json"


@pytest.fixture(scope="session")
def vectors() -> dict:
    path = VECTORS_PATH if VECTORS_PATH.exists() else LOCAL_VECTORS
    return json.loads(path.read_text())


@pytest.fixture
def broker():
    """A private Mosquitto on a free port; the test may stop and restart it."""
    from shoed.sim.broker import PrivateMosquitto

    instance = PrivateMosquitto()
    instance.start()
    yield instance
    instance.stop()


@pytest.fixture(autouse=True, scope="session")
def _quiet_logs():
    """The daemon's logs go to stdout as JSON at warning level during tests."""
    from shoed import logs

    logs.configure("json", "warning")


@pytest.fixture
def ws_broker():
    """A private Mosquitto with two listeners on free loopback ports: MQTT (`port`, `url`)
    and MQTT over WebSockets (`ws_port`, `ws_url`) for the console's page. Stop and start
    keep both ports."""
    from shoed.sim.broker import PrivateMosquitto

    instance = PrivateMosquitto(websockets=True)
    instance.start()
    yield instance
    instance.stop()


def pytest_collection_modifyitems(config, items):
    """Tests marked `once` (a browser, PostgreSQL, other brokers: slow to start, the same on
    every Python) run on one interpreter of `.ci/run`: it sets SHOED_TEST_ONCE=1 there and
    SHOED_TEST_ONCE=0 on the others. Unset, they run (a developer's `scripts/test`)."""
    import os

    if os.environ.get("SHOED_TEST_ONCE", "") != "0":
        return
    skip = pytest.mark.skip(
        reason="marked once: runs on one interpreter only (SHOED_TEST_ONCE=0 here)"
    )
    for item in items:
        if "once" in item.keywords:
            item.add_marker(skip)

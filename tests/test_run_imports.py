"""What `shoed run` imports before READY: the daemon never pulls in the other commands'
packages (test equipment, the client, the sink, the console, the contract's schemas),
which would only lengthen the start (docs/performance.md, "Round two")."""

from __future__ import annotations

import json
import subprocess
import sys

NEVER = ("shoed.sim", "shoed.client", "shoed.sink", "shoed.console", "shoed.contract",
         "shoed.roads_cli", "psycopg", "playwright")

PROBE = """
import json, sys
from shoed import cli, config, daemon, logs  # what `shoed run` imports
from shoed.store import journal
print(json.dumps(sorted(sys.modules)))
"""


def test_shoed_run_imports_none_of_the_other_commands_packages() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=60, check=True)
    loaded = json.loads(done.stdout)
    assert "shoed.daemon" in loaded  # the probe did import the product
    pulled = [m for m in loaded if any(m == n or m.startswith(n + ".") for n in NEVER)]
    assert pulled == [], f"`shoed run` imports {pulled}"


AFTER_READY = ("aiomqtt", "paho", "shoed.mqtt.service", "shoed.mqtt.inbox")


def test_the_mqtt_service_is_imported_only_after_ready() -> None:
    """READY is "journal restored, device transport started": the MQTT service (aiomqtt
    and paho with it, ~60 ms of a start) is imported and built right after it."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=60, check=True)
    loaded = json.loads(done.stdout)
    early = [m for m in loaded if any(m == n or m.startswith(n + ".") for n in AFTER_READY)]
    assert early == [], f"imported before READY: {early}"

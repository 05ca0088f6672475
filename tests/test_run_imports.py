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
cli.build_parser().parse_args(["run", "--config", "shoed.toml"])  # its parser, every command's
print(json.dumps(sorted(sys.modules)))
"""


def test_shoed_run_imports_none_of_the_other_commands_packages() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=60, check=True)
    loaded = json.loads(done.stdout)
    assert "shoed.daemon" in loaded  # the probe did import the product
    pulled = [m for m in loaded if any(m == n or m.startswith(n + ".") for n in NEVER)]
    assert pulled == [], f"`shoed run` imports {pulled}"


AFTER_READY = ("aiomqtt", "paho", "shoed.mqtt.service", "shoed.mqtt.publisher",
               "shoed.mqtt.inbox")


def test_the_mqtt_service_is_imported_only_after_ready() -> None:
    """READY is "journal restored, device transport started": the MQTT service (aiomqtt
    and paho with it, ~60 ms of a start) is imported and built right after it."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=60, check=True)
    loaded = json.loads(done.stdout)
    early = [m for m in loaded if any(m == n or m.startswith(n + ".") for n in AFTER_READY)]
    assert early == [], f"imported before READY: {early}"


BUILT = """
import json
from shoed import cli, config, daemon, logs
from shoed.core import commands, events, inputs
models = {"event": events.CardEvent, "command": commands.CloseBetting,
          "input": inputs.DeviceItem, "state snapshot": events.StateSnapshot}
before = {k: m.__pydantic_complete__ for k, m in models.items()}
from shoed.core.engine import build_models
build_models()  # what the daemon calls right after READY
after = {k: m.__pydantic_complete__ for k, m in models.items()}
# built at first use, and as strict as ever
card = events.EVENT_ADAPTER.validate_python(json.loads(
    '{"type": "betting_closed", "event_id": "e", "seq": 1, "instance": "i", "table_id": "T",'
    ' "ts": "2026-12-02T00:00:00.000Z", "shoe_id": "s", "hand_no": 1}'))
import pydantic
try:
    commands.COMMAND_ADAPTER.validate_python({"command": "close_betting"})
    refused = False
except pydantic.ValidationError:
    refused = True
print(json.dumps({"before": before, "after": after, "event": type(card).__name__,
                  "refused": refused}))
"""


def test_the_event_command_and_input_models_are_built_at_first_use_not_before_ready() -> None:
    """Their validators (~25 ms of a start, docs/performance.md "Seventh pass") are built
    after READY (`build_models`), and validate as strictly as ever."""
    done = subprocess.run([sys.executable, "-c", BUILT], capture_output=True, text=True,
                          timeout=60, check=True)
    out = json.loads(done.stdout)
    assert out["before"] == {"event": False, "command": False, "input": False,
                             "state snapshot": False}
    # the state snapshot's model serves the schemas only: nothing builds it in a run
    assert out["after"] == {"event": True, "command": True, "input": True,
                            "state snapshot": False}
    assert out["event"] == "BettingClosed"
    assert out["refused"] is True  # no request_id: still refused


def test_loading_a_config_without_tls_files_builds_no_tls_context(tmp_path, monkeypatch
                                                                   ) -> None:
    """An SSL context with the system's CAs costs ~50 ms; with no TLS file to check the
    load builds none (the connect builds it, after READY)."""
    import ssl

    from shoed.config import dump_toml, load_settings

    built = []
    monkeypatch.setattr(ssl, "create_default_context", lambda *a, **k: built.append(a))
    config = tmp_path / "shoed.toml"
    config.write_text(dump_toml({"table": {"id": "T1"},
                                 "mqtt": {"url": "mqtts://broker.example:8883"},
                                 "state": {"dir": str(tmp_path / "state")}}))
    config.chmod(0o600)
    settings = load_settings(config)
    assert settings.mqtt.tls and built == []

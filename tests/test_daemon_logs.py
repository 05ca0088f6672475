"""What the daemon writes to its log per event: a card only at debug (docs/decisions.md 32)."""

from __future__ import annotations

import json
import pathlib

import pytest
from rig import make_settings
from table import Table

from shoed import logs
from shoed.eventlog import LOGGED_FIELDS, EventLog


def _dealt_hand_events() -> list:
    table = Table(betting_control="none")
    table.hello()
    table.commence("AS", ["2C"])  # first card A: one burn
    for card in ("9S", "2S", "TH", "5D", "6C"):  # the hand's burn, then a hand that stands
        table.draw(card)
    return table.events


def _logged_lines(events: list, level: str, tmp_path: pathlib.Path,
                  capsys: pytest.CaptureFixture[str]) -> list[dict]:
    """The JSON lines the daemon's EventLog writes for `events` at log level `level`."""
    logs.configure("json", level)
    try:
        settings = make_settings(tmp_path / "state", "mqtt://127.0.0.1:1", log={"level": level})
        log = EventLog(logs.get("shoed"), settings.log.level)
        capsys.readouterr()
        for event in events:
            log.write(event)
    finally:
        logs.configure("json", "warning")
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]


@pytest.mark.parametrize("level", ["info", "debug"])
def test_card_events_are_logged_only_at_debug(tmp_path: pathlib.Path, level: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    events = _dealt_hand_events()
    assert {"card", "hand_result"} <= {e.type for e in events}
    lines = _logged_lines(events, level, tmp_path, capsys)
    logged = [line["event"] for line in lines]
    cards = [e for e in events if e.type == "card"]
    assert "event_hand_result" in logged
    assert logged.count("event_card") == (len(cards) if level == "debug" else 0)
    if level == "debug":
        first = next(line for line in lines if line["event"] == "event_card")
        assert first["card_index"] == cards[0].card_index and first["level"] == "debug"


def test_each_logged_event_carries_exactly_its_own_listed_fields(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The line of an event holds every field of LOGGED_FIELDS the event has (not None),
    with its value, and no other of them (a field it lacks is left out, not null)."""
    events = [e for e in _dealt_hand_events() if e.type != "card"]
    assert {"shoe_started", "hand_result"} <= {e.type for e in events}
    lines = _logged_lines(events, "info", tmp_path, capsys)
    assert [line["event"] for line in lines] == [f"event_{e.type}" for e in events]
    for event, line in zip(events, lines, strict=True):
        wanted = {k: getattr(event, k) for k in LOGGED_FIELDS
                  if k in type(event).model_fields and getattr(event, k) is not None}
        assert {k: line[k] for k in LOGGED_FIELDS if k in line} == wanted
    result = lines[[e.type for e in events].index("hand_result")]
    assert {"seq", "shoe_id", "hand_no", "winner", "player_total", "banker_total"} <= set(result)


CHILD = """
import logging
from shoed import logs
logs.configure("json", "info")
logs.get().warning("a_warning")
logs.get().info("an_info")
logging.getLogger("mqtt").error("failed to receive on socket: %s", "reset")
"""


@pytest.mark.parametrize("to_journald", [True, False])
def test_under_journald_each_line_carries_its_priority_and_library_lines_are_json(
        tmp_path: pathlib.Path, to_journald: bool) -> None:
    """journalctl -p warning must find the warnings: journald reads a leading <N> as
    the priority (SyslogLevelPrefix=). Only on the stream systemd connected."""
    import os
    import subprocess
    import sys

    out = tmp_path / "out"
    with out.open("w") as stdout:
        info = os.fstat(stdout.fileno())
        stream = f"{info.st_dev}:{info.st_ino}" if to_journald else "1:2"
        subprocess.run([sys.executable, "-c", CHILD], stdout=stdout, check=True,
                       env={**os.environ, "JOURNAL_STREAM": stream})
    lines = out.read_text().splitlines()
    prefixes = [line[:3] for line in lines]
    assert prefixes == (["<4>", "<6>", "<3>"] if to_journald else ["{\"e", "{\"e", "{\"l"])
    body = [json.loads(line[3:] if to_journald else line) for line in lines]
    assert [b["event"] for b in body] == ["a_warning", "an_info", "library_log"]
    assert body[2] == {**body[2], "level": "error", "logger": "mqtt",
                       "message": "failed to receive on socket: reset"}

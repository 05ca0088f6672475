"""`shoed roads`, the board renderer, the [roads] config keys and the roads JSON Schema."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import random
import subprocess
import sys
import threading
import time

import aiomqtt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_broker_security import PASSWORDS, secure_broker, tls  # noqa: F401 - a fixture

from shoed.cli import main
from shoed.config import ConfigError, load_settings, write_config
from shoed.core.roads import HandOutcome, RoadsMessage, roads_message
from shoed.roads_cli import _window, render_board, strip_ansi

LETTER = {"B": "banker", "P": "player", "T": "tie"}


def example() -> dict:
    results = [HandOutcome(i + 1, LETTER[c], player_pair=i == 2,  # type: ignore[arg-type]
                           banker_pair=i in (2, 5), natural=i in (0, 5))
               for i, c in enumerate(["B", "T", "B", "P", "P", "P", "B", "T", "P", "B", "B"])]
    return roads_message(results, seq=40, shoe_id="T01-7")


def long_shoe(hands: int = 125, seed: int = 3) -> dict:
    rnd = random.Random(seed)
    results = [HandOutcome(i + 1, rnd.choice(["banker"] * 5 + ["player"] * 5 + ["tie"]),
                           player_pair=rnd.random() < 0.1, banker_pair=rnd.random() < 0.1,
                           natural=rnd.random() < 0.3) for i in range(hands)]
    return roads_message(results, seq=999, shoe_id="T01-long")


EXAMPLE_TEXT = """\
shoe T01-7  seq 40  6 rows, tails stay
Bead plate
B * B
T   T
B+  P
P   B
P   B
Pb* .
Big road
B1 P  B1 P  B
B  P  .  .  B
.  P  .  .  .
.  .  .  .  .
.  .  .  .  .
.  .  .  .  .
Big Eye Boy 6              Small Road 3               Cockroach Pig 2
rbrb                       b                          br
.b..                       b                          ..
.b..                       b                          ..
....                       .                          ..
....                       .                          ..
....                       .                          ..
Ask  if banker: BE r SR r CP r   if player: BE b SR b CP b
hands 11  banker 5  player 4  tie 2  player pairs 1  banker pairs 2  naturals 2
longest banker 2, player 3  streak banker 2
"""


def test_render_a_known_board():
    assert render_board(example(), width=80) == EXAMPLE_TEXT


def test_render_ties_only_and_empty_boards():
    ties = render_board(roads_message([HandOutcome(1, "tie"), HandOutcome(2, "tie")], seq=2,
                                      shoe_id=None))
    lines = ties.splitlines()
    assert lines[0].startswith("shoe -  seq 2")
    assert lines[lines.index("Big road") + 1] == "T2"
    assert "if banker: BE - SR - CP -   if player: BE - SR - CP -" in ties
    assert "streak none" in ties
    empty = render_board(roads_message([], seq=0, shoe_id="s"))
    assert "hands 0  banker 0" in empty and "Big road\n.\n" in empty


@pytest.mark.parametrize("width", [80, 60, 40])
def test_a_long_shoe_fits_the_width_and_shows_the_latest_columns(width: int):
    message = long_shoe()
    text = render_board(message, width=width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "Bead plate (latest columns)" in text and "Big road (latest columns)" in text
    lines = text.splitlines()
    top = lines[lines.index("Big road (latest columns)") + 1]
    big = message["big_road"]
    columns = max(c["col"] for c in big) + 1
    first = columns - width // 3
    row0 = {c["col"]: c for c in big if c["row"] == 0}
    expected = "".join(
        (row0[col]["winner"][0].upper() + (str(row0[col]["ties"]) if row0[col]["ties"] else "")
         if col in row0 else ".").ljust(3) for col in range(first, columns))
    assert top == expected.rstrip()


def test_the_newest_result_stays_in_view_behind_a_long_tail():
    """A dragon of 40 runs right along the bottom row; the two player wins after it open
    at column 1. The view starts there (the newest cell on screen), not at the tail's end
    (outside review: the player streak was drawn nowhere)."""
    results = [HandOutcome(i + 1, "banker") for i in range(40)] + [
        HandOutcome(41, "player"), HandOutcome(42, "player")]
    message = roads_message(results, seq=1, shoe_id="X")
    assert message["big_road"][-1]["col"] == 1  # the case: newest cell left of the tail
    text = render_board(message, width=80)
    lines = text.splitlines()
    at = lines.index("Big road (latest columns)")
    grid = lines[at + 1:at + 7]
    assert max(len(line) for line in lines) <= 80
    assert grid[0].startswith("P  ") and grid[1].startswith("P  ")  # column 1: P, P
    assert grid[5].startswith("B  B  ")  # the tail goes on from column 1, cut on the right


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["banker", "player", "tie"]),
                          st.integers(min_value=1, max_value=30)), max_size=12),
       st.sampled_from([3, 6]), st.sampled_from(["stay", "drop"]),
       st.integers(min_value=1, max_value=40))
def test_every_grid_shows_its_newest_cell(streaks: list[tuple[str, int]], rows: int,
                                          tail: str, width: int):
    """Streaky shoes (dragons of up to 30), every road, any width."""
    winners = [side for side, length in streaks for _ in range(length)]
    results = [HandOutcome(i + 1, w) for i, w in enumerate(winners)]
    message = roads_message(results, seq=1, shoe_id="X", rows=rows, tail_mode=tail)
    roads = [message["bead_plate"], message["big_road"]] + [
        message[key]["cells"] for key in ("big_eye_boy", "small_road", "cockroach_pig")]
    for road in roads:
        cells = [(c["col"], c["row"], "x", "") for c in road]
        first, shown, columns = _window(cells, 1, width)
        assert shown <= max(1, width)
        if cells:
            assert first <= cells[-1][0] < first + shown  # the newest result is on screen
            if cells[-1][0] >= columns - width:
                assert first + shown == columns  # else the right-most columns, as before


def test_colour_adds_ansi_codes_and_nothing_else():
    for message in (example(), long_shoe()):
        plain = render_board(message, colour=False)
        coloured = render_board(message, colour=True)
        assert "\033[31m" in coloured and "\033[94m" in coloured
        assert strip_ansi(coloured) == plain


# --- config --------------------------------------------------------------------------


def test_roads_config_defaults_file_and_environment(tmp_path: pathlib.Path,
                                                    monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("SHOED_ROADS__ROWS", raising=False)
    monkeypatch.delenv("SHOED_ROADS__TAIL_MODE", raising=False)
    assert (load_settings(None).roads.rows, load_settings(None).roads.tail_mode) == (6, "stay")
    path = write_config(tmp_path / "shoed.toml", {"roads": {"rows": 8, "tail_mode": "drop"}})
    roads = load_settings(path).roads
    assert (roads.rows, roads.tail_mode) == (8, "drop")
    monkeypatch.setenv("SHOED_ROADS__ROWS", "4")
    assert load_settings(path).roads.rows == 4


@pytest.mark.parametrize(("values", "needle"), [
    ({"rows": 2}, "roads.rows: Input should be greater than or equal to 3 (got 2)"),
    ({"rows": 13}, "roads.rows: Input should be less than or equal to 12 (got 13)"),
    ({"rows": "six"}, "roads.rows"),
    ({"tail_mode": "wrap"}, "roads.tail_mode: Input should be 'stay' or 'drop' (got 'wrap')"),
    ({"colour": "red"}, "roads.colour: Extra inputs are not permitted"),
])
def test_bad_roads_config_names_the_key_and_value(tmp_path: pathlib.Path, values: dict,
                                                  needle: str):
    path = write_config(tmp_path / "shoed.toml", {"roads": values})
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert needle in str(caught.value)


def test_schema_has_the_roads_message(capsys: pytest.CaptureFixture[str]):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    roads = schema["roads"]  # the contract's form of the model (2020-12, with an $id)
    model = RoadsMessage.model_json_schema()
    assert roads["$id"].endswith("roads.json")
    body = roads["$defs"][roads["$ref"].rsplit("/", 1)[-1]]
    assert set(body["properties"]) == set(model["properties"])
    assert "big_eye_boy" in body["properties"]


# --- the command, against a real broker -----------------------------------------------


def publish_retained(port: int, topic: str, payload: str) -> None:
    async def run() -> None:
        async with aiomqtt.Client("127.0.0.1", port, identifier="roads-test-publisher") as c:
            await c.publish(topic, payload, qos=1, retain=True)

    asyncio.run(run())


def config_for(tmp_path: pathlib.Path, port: int) -> pathlib.Path:
    return write_config(tmp_path / "shoed.toml", {
        "table": {"id": "T09"}, "mqtt": {"url": f"mqtt://127.0.0.1:{port}"}})


@pytest.mark.broker
def test_shoed_roads_prints_the_retained_board(broker, tmp_path: pathlib.Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("COLUMNS", "80")
    message = example()
    publish_retained(broker.port, "shoed/T09/roads", json.dumps(message))
    path = config_for(tmp_path, broker.port)
    assert main(["roads", "--config", str(path)]) == 0
    assert capsys.readouterr().out == EXAMPLE_TEXT
    assert main(["roads", "--config", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == message


@pytest.mark.broker
def test_shoed_roads_without_a_board_or_a_broker_says_so(broker, tmp_path: pathlib.Path,
                                                         capsys: pytest.CaptureFixture[str]):
    path = config_for(tmp_path, broker.port)
    assert main(["roads", "--config", str(path), "--timeout", "0.3"]) == 1
    assert "no board retained on shoed/T09/roads" in capsys.readouterr().err
    publish_retained(broker.port, "shoed/T09/roads", '["not", "a", "board"]')
    assert main(["roads", "--config", str(path), "--timeout", "2"]) == 1
    assert "shoed/T09/roads is not a roads message" in capsys.readouterr().err
    publish_retained(broker.port, "shoed/T09/roads", '{"seq": 1}')
    assert main(["roads", "--config", str(path), "--timeout", "2"]) == 1
    assert ("shoed/T09/roads is not a roads message: schema_version: Field required"
            in capsys.readouterr().err)
    broker.stop()
    assert main(["roads", "--config", str(path), "--timeout", "2"]) == 1
    assert "cannot read shoed/T09/roads from mqtt://127.0.0.1:" in capsys.readouterr().err


# --- the shipped ACL, TLS and credentials -----------------------------------------------


@pytest.mark.broker
def test_the_daemon_user_publishes_the_board_and_a_consumer_reads_it_over_tls(
        tmp_path: pathlib.Path, secure_broker, capsys: pytest.CaptureFixture[str],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch):
    broker, pki = secure_broker
    monkeypatch.setenv("COLUMNS", "80")
    board = example()
    context = tls(pki)

    async def publish(user: str, payload: dict) -> None:
        async with aiomqtt.Client("127.0.0.1", broker.port, username=user,
                                  password=PASSWORDS[user], tls_context=context,
                                  protocol=aiomqtt.ProtocolVersion.V311) as client:
            await client.publish("shoed/T9/roads", json.dumps(payload), qos=1, retain=True)

    asyncio.run(publish("table-T9", board))
    asyncio.run(publish("consumer", {**board, "seq": 1}))  # refused by the ACL
    password = tmp_path / "consumer.pw"
    password.write_text(PASSWORDS["consumer"] + "\n")
    password.chmod(0o600)
    path = write_config(tmp_path / "consumer.toml", {
        "table": {"id": "T9"},
        "mqtt": {"url": f"mqtts://127.0.0.1:{broker.port}", "username": "consumer",
                 "password_file": str(password), "ca_file": str(pki / "ca.crt")}})
    assert main(["roads", "--config", str(path)]) == 0
    assert capsys.readouterr().out == EXAMPLE_TEXT  # seq 40: the daemon's board
    # Every client reads it: the daemon's own config (issue 15: `shoed roads --config`
    # with the daemon's file) and a user the ACL does not name (outside review).
    for user in ("table-T9", "display-7"):
        secret = tmp_path / f"{user}.pw"
        secret.write_text(PASSWORDS[user] + "\n")
        secret.chmod(0o600)
        path = write_config(tmp_path / f"{user}.toml", {
            "table": {"id": "T9"},
            "mqtt": {"url": f"mqtts://127.0.0.1:{broker.port}", "username": user,
                     "password_file": str(secret), "ca_file": str(pki / "ca.crt")}})
        assert main(["roads", "--config", str(path), "--timeout", "3"]) == 0, user
        assert capsys.readouterr().out == EXAMPLE_TEXT


@pytest.mark.broker
def test_shoed_roads_follow_shows_each_new_board_across_a_broker_restart(
        broker, tmp_path: pathlib.Path):
    path = config_for(tmp_path, broker.port)
    publish_retained(broker.port, "shoed/T09/roads", json.dumps(example()))
    proc = subprocess.Popen([sys.executable, "-m", "shoed.cli", "roads", "--config", str(path),
                             "--follow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "COLUMNS": "80"})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")),
                              daemon=True)
    reader.start()

    def wait_for_line(text: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in list(lines)):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, f"no {text!r} in {lines[-5:]}"
            time.sleep(0.05)

    try:
        wait_for_line("shoe T01-7  seq 40")
        later = roads_message([HandOutcome(1, "player")], seq=41, shoe_id="T01-8")
        publish_retained(broker.port, "shoed/T09/roads", json.dumps(later))
        wait_for_line("shoe T01-8  seq 41")
        publish_retained(broker.port, "shoed/T09/roads", "not json")  # skipped, said on stderr
        broker.stop()
        broker.start()
        publish_retained(broker.port, "shoed/T09/roads", json.dumps({**later, "seq": 42}))
        wait_for_line("shoe T01-8  seq 42")
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    text = "".join(lines)
    assert text.startswith(EXAMPLE_TEXT + "\n")  # each board whole, a blank line after it
    assert text.count("Bead plate") == 3
    assert "shoed/T09/roads is not a roads message: not JSON" in proc.stderr.read()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from("BBBPPPT"), max_size=160), st.sampled_from([3, 6, 9]),
       st.sampled_from(["stay", "drop"]), st.integers(30, 130))
def test_any_board_fits_any_width(winners, rows, tail_mode, width):
    results = [HandOutcome(i + 1, LETTER[c], player_pair=i % 4 == 0,  # type: ignore[arg-type]
                           natural=i % 3 == 0) for i, c in enumerate(winners)]
    message = roads_message(results, seq=len(results), shoe_id="T01-x", rows=rows,
                            tail_mode=tail_mode)
    plain = render_board(message, width=width)
    assert max(len(line) for line in plain.splitlines()) <= width
    assert strip_ansi(render_board(message, width=width, colour=True)) == plain
    assert f"hands {len(results)}  banker" in plain.replace("\n", " ")

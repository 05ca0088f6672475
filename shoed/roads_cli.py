"""`shoed roads`: the scoreboard in the terminal, read from the broker's retained roads.

`render_board` turns a `{root}/roads` message (roads.md section 7) into text: the bead
plate and the big road as grids, the three derived roads side by side, the ask road and
the statistics. It fits `width` columns: when a road is wider, its most recent columns
are shown, as a scoreboard scrolls. Glyphs (the same with or without colour):

- bead plate: `B`/`P`/`T`, then `p` (player pair), `b` (banker pair) or `+` (both),
  then `*` for a natural;
- big road: `B`/`P`, then the number of ties on the cell (`+` above 9); the ties-only
  cell of a shoe that has only ties is `T` and its count;
- derived roads and ask: `r` (red), `b` (blue), `-` where a road has not started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import shutil
import socket
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

import aiomqtt
from pydantic import ValidationError

from .config import ConfigError, Settings, load_settings
from .core.roads import RoadsMessage
from .mqtt.brokers import BrokerList, BrokerUrl, refused_subscription

RESET, BOLD, RED, GREEN, BLUE = "\033[0m", "\033[1m", "\033[31m", "\033[32m", "\033[94m"
SIDE_COLOUR = {"banker": RED, "player": BLUE, "tie": GREEN, None: GREEN}
MARK_COLOUR = {"red": RED, "blue": BLUE}
ROAD_TITLES = (("big_eye_boy", "Big Eye Boy"), ("small_road", "Small Road"),
               ("cockroach_pig", "Cockroach Pig"))
_ANSI = re.compile(r"\033\[[0-9;]*m")

Cell = tuple[int, int, str, str]  # col, row, text, ANSI colour


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def _paint(text: str, code: str, colour: bool) -> str:
    return f"{code}{text}{RESET}" if colour and code else text


def _window(cells: list[Cell], cell_width: int, width: int) -> tuple[int, int, int]:
    """The columns a grid shows: (first, shown, columns in all). `cells` are in play
    order. The view holds the right-most columns that fit, unless the newest cell lies
    left of them: a long tail runs right along the bottom row past the columns where
    later streaks open, so the view then starts at the newest cell's column (the newest
    result is always on screen; the tail's far end is cut instead)."""
    columns = max((col for col, _, _, _ in cells), default=-1) + 1
    fit = max(1, width // cell_width)
    first = max(0, columns - fit)
    if cells and cells[-1][0] < first:
        first = cells[-1][0]
    return first, max(min(columns - first, fit), 1), columns


def _grid(cells: list[Cell], rows: int, cell_width: int, width: int,
          colour: bool) -> tuple[list[str], bool]:
    """The grid's lines (each at most `width` wide) and whether columns were cut
    (:func:`_window` says which are shown)."""
    first, shown, columns = _window(cells, cell_width, width)
    at = {(col, row): (text, code) for col, row, text, code in cells}
    lines = []
    for row in range(rows):
        parts = []
        for col in range(first, first + shown):
            text, code = at.get((col, row), (".", ""))
            padded = text.ljust(cell_width)
            parts.append(_paint(text, code, colour) + padded[len(text):])
        lines.append("".join(parts).rstrip())
    return lines, first > 0 or first + shown < columns


def _bead_text(cell: dict[str, Any]) -> str:
    pairs = {(True, False): "p", (False, True): "b", (True, True): "+"}.get(
        (bool(cell["player_pair"]), bool(cell["banker_pair"])), " ")
    text = str(cell["winner"])[0].upper() + pairs + ("*" if cell["natural"] else "")
    return text.rstrip()


def _big_text(cell: dict[str, Any]) -> str:
    ties = cell["ties"]
    count = "" if ties == 0 else (str(ties) if ties <= 9 else "+")
    return ("T" if cell["winner"] is None else cell["winner"][0].upper()) + count


def _mark(value: str | None, colour: bool) -> str:
    return "-" if value is None else _paint(value[0], MARK_COLOUR[value], colour)


def render_board(message: dict[str, Any], width: int = 80, colour: bool = False) -> str:
    """The board as text, no line wider than `width` (ANSI colour codes not counted)."""
    width = max(width, 30)
    rows = int(message["rows"])
    out: list[str] = []
    header = (f"shoe {message.get('shoe_id') or '-'}  seq {message['seq']}  "
              f"{rows} rows, tails {message['tail_mode']}")
    out.append(_paint(header[:width], BOLD, colour))

    bead = [(c["col"], c["row"], _bead_text(c), SIDE_COLOUR[c["winner"]])
            for c in message["bead_plate"]]
    lines, cut = _grid(bead, rows, 4, width, colour)
    out.append(_paint("Bead plate" + (" (latest columns)" if cut else ""), BOLD, colour))
    out.extend(lines)

    big = [(c["col"], c["row"], _big_text(c), SIDE_COLOUR[c["winner"]])
           for c in message["big_road"]]
    lines, cut = _grid(big, rows, 3, width, colour)
    out.append(_paint("Big road" + (" (latest columns)" if cut else ""), BOLD, colour))
    out.extend(lines)

    gap = 2
    panel = (width - 2 * gap) // 3
    titles, grids = [], []
    for key, title in ROAD_TITLES:
        road = message[key]
        cells = [(c["col"], c["row"], c["colour"][0], MARK_COLOUR[c["colour"]])
                 for c in road["cells"]]
        lines, cut = _grid(cells, rows, 1, panel, colour)
        label = f"{title} {len(road['marks'])}" + (" <" if cut else "")
        titles.append(label[:panel].ljust(panel))
        grids.append(lines)
    out.append(_paint((" " * gap).join(titles).rstrip(), BOLD, colour))
    for row in range(rows):
        parts = []
        for lines in grids:
            text = lines[row]
            parts.append(text + " " * (panel - len(strip_ansi(text))))
        out.append((" " * gap).join(parts).rstrip())

    ask = message["ask"]
    asked = [f"if {side}: " + " ".join(f"{short} {_mark(ask[side][key], colour)}"
                                       for short, key in (("BE", "big_eye_boy"),
                                                          ("SR", "small_road"),
                                                          ("CP", "cockroach_pig")))
             for side in ("banker", "player")]
    one_line = "Ask  " + "   ".join(asked)
    if len(strip_ansi(one_line)) <= width:
        out.append(one_line)
    else:
        out.extend(["Ask  " + asked[0], "     " + asked[1]])

    s = message["stats"]
    streak = s["current_streak"]
    now = "none" if streak is None else f"{streak['side']} {streak['length']}"
    stats = (f"hands {s['hands']}  banker {s['banker']}  player {s['player']}  "
             f"tie {s['tie']}  player pairs {s['player_pair']}  "
             f"banker pairs {s['banker_pair']}  naturals {s['natural']}  longest banker "
             f"{s['longest_banker_streak']}, player {s['longest_player_streak']}  "
             f"streak {now}")
    out.extend(textwrap.wrap(stats, width=width, break_on_hyphens=False))
    return "\n".join(out) + "\n"


# --- the command ----------------------------------------------------------------------


def client_args(settings: Settings, identifier: str, broker: BrokerUrl | None = None
                ) -> dict[str, Any]:
    """aiomqtt.Client arguments for a configured broker (default: the first of mqtt.url),
    the credentials and TLS."""
    mqtt = settings.mqtt
    host, port = (broker or mqtt.brokers[0]).host_port
    args: dict[str, Any] = {
        "hostname": host, "port": port, "keepalive": mqtt.keepalive,
        "identifier": identifier, "timeout": mqtt.publish_timeout_s,
        "protocol": aiomqtt.ProtocolVersion.V5 if mqtt.protocol == "5"
        else aiomqtt.ProtocolVersion.V311,
        "socket_options": [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
    }
    args.update(mqtt.client_auth())
    return args


def parse_board(topic: str, payload: object) -> dict[str, Any] | None:
    """A `{root}/roads` payload, checked against the message's model; None if empty.

    Raises ValueError naming what is wrong.
    """
    if not isinstance(payload, bytes | bytearray | str) or not payload:
        return None  # an empty retained message clears the topic
    try:
        value = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{topic} is not a roads message: not JSON: {error}") from error
    try:
        RoadsMessage.model_validate(value)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in item['loc']) or 'message'}: {item['msg']}"
            for item in error.errors()[:3])
        raise ValueError(f"{topic} is not a roads message: {problems}") from None
    assert isinstance(value, dict)
    return value


def _identifier() -> str:
    return f"shoed-roads-{socket.gethostname()}-{time.time_ns() % 10**9}"


async def fetch_roads(settings: Settings, timeout: float) -> dict[str, Any] | None:
    """The retained `{root}/roads` message, or None if the broker has none in `timeout` s.
    The brokers of mqtt.url are tried in order; the first that answers is asked."""
    for broker in settings.mqtt.brokers[:-1]:
        try:
            return await _fetch_from(settings, broker, timeout)
        except aiomqtt.MqttError as error:
            print(f"shoed roads: {broker.url}: {error}; trying the next broker",
                  file=sys.stderr, flush=True)
    return await _fetch_from(settings, settings.mqtt.brokers[-1], timeout)


async def _fetch_from(settings: Settings, broker: BrokerUrl, timeout: float
                      ) -> dict[str, Any] | None:
    topic = f"{settings.topic_root}/roads"
    async with aiomqtt.Client(**client_args(settings, _identifier(), broker)) as client:
        await _subscribe(client, topic)
        try:
            async with asyncio.timeout(timeout):
                async for message in client.messages:
                    board = parse_board(topic, message.payload)
                    if board is not None:
                        return board
        except TimeoutError:
            return None
    return None


async def _subscribe(client: aiomqtt.Client, topic: str) -> None:
    """Subscribe; a refusal (a broker that enforces its ACL at SUBSCRIBE) raises."""
    refused = refused_subscription(await client.subscribe(topic, qos=1))
    if refused is not None:
        raise aiomqtt.MqttError(f"the broker refused the subscription to {topic}: {refused}")


async def follow_roads(settings: Settings, show: Callable[[dict[str, Any]], None]) -> None:
    """Show every new board until cancelled; a lost broker is retried (the next of
    mqtt.url's list, in turn), a bad board skipped."""
    topic = f"{settings.topic_root}/roads"
    backoff = 0.5
    last: dict[str, Any] | None = None
    brokers = BrokerList(settings.mqtt.brokers)
    while True:
        connected = False
        try:
            async with aiomqtt.Client(**client_args(settings, _identifier(),
                                                    brokers.current)) as client:
                connected = True
                await _subscribe(client, topic)
                backoff = 0.5
                async for message in client.messages:
                    try:
                        board = parse_board(topic, message.payload)
                    except ValueError as error:
                        print(f"shoed roads: {error}", file=sys.stderr, flush=True)
                        continue
                    if board is not None and board != last:
                        show(board)
                        last = board
        except aiomqtt.MqttError as error:
            url = brokers.current.url
            if not brokers.advance(was_connected=connected):
                print(f"shoed roads: {url}: {error}; trying {brokers.current.url}",
                      file=sys.stderr, flush=True)
                continue
            print(f"shoed roads: {url}: {error}; retrying in {backoff:g} s",
                  file=sys.stderr, flush=True)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)


def _text(board: dict[str, Any], colour: bool) -> str:
    return render_board(board, width=min(shutil.get_terminal_size().columns, 120),
                        colour=colour)


def roads(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        print(f"shoed roads: {error}", file=sys.stderr)
        return 2
    topic = f"{settings.topic_root}/roads"
    colour = sys.stdout.isatty()
    if args.follow:
        def show(board: dict[str, Any]) -> None:
            text = json.dumps(board) + "\n" if args.json else _text(board, colour)
            sys.stdout.write(("\033[H\033[2J" if colour else "") + text
                             + ("" if colour or args.json else "\n"))
            sys.stdout.flush()

        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(follow_roads(settings, show))
        return 0
    try:
        message = asyncio.run(fetch_roads(settings, args.timeout))
    except aiomqtt.MqttError as error:
        print(f"shoed roads: cannot read {topic} from {settings.mqtt.urls[-1]}: {error}",
              file=sys.stderr)
        return 1
    except ValueError as error:
        print(f"shoed roads: {error}", file=sys.stderr)
        return 1
    if message is None:
        user = settings.mqtt.username
        print(f"shoed roads: no board retained on {topic} at {', '.join(settings.mqtt.urls)} "
              f"within {args.timeout:g} s: the daemon has not published one (is it running?)"
              + (f", or the broker's ACL does not let user {user!r} read the topic (Mosquitto "
                 "then delivers nothing; deploy/mosquitto/shoed.acl lets every user read "
                 "it)" if user else ""), file=sys.stderr)
        return 1
    sys.stdout.write(json.dumps(message, indent=2) + "\n" if args.json
                     else _text(message, colour))
    return 0

"""`shoed demo`: broker, simulated shoe and daemon in one command, the table shown live.

The view is built only from what the daemon publishes on MQTT, exactly as a casino
system would see it. In `commands` mode a small simulated game server closes betting a
few seconds after each result, as a real one would after the betting window.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import pathlib
import sys
import tempfile
import time
from typing import Any

import aiomqtt

from shoed import logs
from shoed.config import ConfigError, Settings, load_settings
from shoed.daemon import Daemon

from .broker import PrivateMosquitto, answers
from .cli import build_shoe
from .shoe import PtyShoe

SUITS = {"S": "♠", "H": "♥", "D": "♦", "C": "♣"}
RESET, BOLD, DIM, RED, GREEN, BLUE, YELLOW = (
    "\033[0m", "\033[1m", "\033[2m", "\033[31m", "\033[32m", "\033[34m", "\033[33m")


def paint(text: str, colour: str, enabled: bool) -> str:
    return f"{colour}{text}{RESET}" if enabled else text


def show_card(card: str | None, colour: bool = True) -> str:
    if card is None:
        return "??"
    rank = "10" if card[0] == "T" else card[0]
    text = rank + SUITS[card[1]]
    return paint(text, RED, colour) if card[1] in "HD" else text


class TableView:
    """Turns the event stream into a readable table log, one line per happening."""

    def __init__(self, colour: bool) -> None:
        self.colour = colour
        self.cards: list[str] = []
        self.results = 0

    def line(self, text: str) -> None:
        print(text, flush=True)

    def event(self, e: dict[str, Any]) -> None:
        kind, c = e["type"], self.colour
        hand = f"hand {e['hand_no']}" if e.get("hand_no") else ""
        if kind == "shoe_started":
            self.line(paint(f"\n=== shoe {e['shoe_id']} started: {e['decks']} decks, "
                            f"{e['table_type']}, betting {e['betting_control']} ===", BOLD, c))
        elif kind == "commencement":
            self.line(f"commencement card {show_card(e['card'], c)}: "
                      f"{e['burn_count']} card(s) burnt")
        elif kind == "card":
            if e["position"] in ("P1", "B1", "P2", "B2", "P3", "B3", "burn"):
                self.cards.append(f"{e['position']}:{show_card(e['card'], c)}")
            elif e["position"] not in ("commencement", "commencement_burn", None):
                self.line(paint(f"  card {show_card(e['card'], c)} -> {e['position']}", YELLOW,
                                c))
        elif kind == "betting_closed":
            self.line(paint(f"-- betting closed for {hand}", DIM, c))
        elif kind == "hand_result":
            self.results += 1
            winner = e["winner"].upper()
            colour = BLUE if winner == "PLAYER" else RED if winner == "BANKER" else GREEN
            extras = [x for x, on in (("player pair", e["player_pair"]),
                                      ("banker pair", e["banker_pair"]),
                                      ("banker six", e["banker_six"]),
                                      ("natural", e["player_natural"] or e["banker_natural"]))
                      if on]
            player = " ".join(show_card(x, c) for x in e["player_cards"])
            banker = " ".join(show_card(x, c) for x in e["banker_cards"])
            self.line(f"{hand:>8}  Player {e['player_total']} [{player}]  "
                      f"Banker {e['banker_total']} [{banker}]  -> "
                      f"{paint(winner, colour + BOLD, c)}  {e['big_small']}"
                      + (f"  ({', '.join(extras)})" if extras else "")
                      + paint(f"  seq {e['seq']}", DIM, c))
            self.cards = []
        elif kind == "hand_voided":
            self.line(paint(f"{hand:>8}  VOIDED: {e['reason']}", YELLOW, c))
        elif kind == "last_hand":
            self.line(paint(f"-- last hand ({e['reason']})", YELLOW, c))
        elif kind == "shoe_ended":
            self.line(paint(f"=== shoe ended: {e['hands_played']} hands played, "
                            f"{e['hands_voided']} voided ===", BOLD, c))
        elif kind == "shoe_voided":
            self.line(paint(f"=== shoe VOIDED: {e['reason']} ===", RED, c))
        elif kind == "alarm":
            state = "ALARM" if e["active"] else "cleared"
            self.line(paint(f"  [{state}] {e['code']}: {e['message']}",
                            RED if e["active"] else GREEN, c))
        elif kind == "procedure":
            self.line(paint(f"  procedure {e['rule']}: {e['action']}", DIM, c))


async def _game_server(client: aiomqtt.Client, root: str, betting_s: float,
                       opened: asyncio.Queue[int]) -> None:
    """Closes betting `betting_s` after it opened (a result, a void, commencement's end)."""
    counter = 0
    while True:
        await opened.get()
        await asyncio.sleep(betting_s)
        counter += 1
        await client.publish(f"{root}/cmd", json.dumps({
            "request_id": f"demo-{time.time():.0f}-{counter}", "command": "close_betting",
            "operator": "demo-game-server"}), qos=1)


async def _viewer(url_host: str, port: int, root: str, view: TableView, betting: str,
                  betting_s: float) -> None:
    opened: asyncio.Queue[int] = asyncio.Queue()
    async with aiomqtt.Client(url_host, port, identifier=f"demo-viewer-{time.time():.0f}"
                              ) as client:
        await client.subscribe(f"{root}/events", qos=1)
        await client.subscribe(f"{root}/state", qos=1)
        seen: set[str] = set()
        async with asyncio.TaskGroup() as group:
            if betting == "commands":
                group.create_task(_game_server(client, root, betting_s, opened))
            last_betting: str | None = None
            async for message in client.messages:
                payload = json.loads(message.payload)  # type: ignore[arg-type,unused-ignore]
                if message.topic.matches(f"{root}/state"):
                    if payload.get("betting") == "open" and last_betting != "open":
                        opened.put_nowait(payload.get("seq", 0))
                    last_betting = payload.get("betting")
                    continue
                if payload["event_id"] in seen:
                    continue  # at-least-once delivery: dedupe by event_id
                seen.add(payload["event_id"])
                view.event(payload)


async def _demo(args: argparse.Namespace) -> int:
    colour = sys.stdout.isatty()
    try:
        settings = load_settings(args.config) if args.config else load_settings(None)
    except ConfigError as error:
        print(f"shoed demo: {error}", file=sys.stderr)
        return 2
    host, port = settings.mqtt.host_port
    broker: PrivateMosquitto | None = None
    if not answers(host, port):
        broker = PrivateMosquitto()
        broker.start()
        host, port = "127.0.0.1", broker.port
        print(f"no broker answered at {settings.mqtt.url}: started a private mosquitto on "
              f"port {port}", flush=True)
    else:
        print(f"using the broker at {settings.mqtt.url}", flush=True)
    state_dir = pathlib.Path(tempfile.mkdtemp(prefix="shoed-demo-"))
    log_file = open(state_dir / "shoed.log", "a")  # noqa: SIM115 - open for the demo's life
    logs.configure("json", "info", file=log_file)
    loop = asyncio.get_running_loop()
    shoe = build_shoe(args, loop.time(), default_pace=0.6)
    shoe.decks = settings.rules.decks if args.config else args.decks
    table_id = settings.table.id if args.config else "DEMO"
    transport_factory = None
    pty: PtyShoe | None = None
    if args.usb:
        from shoed.device.transports import UsbTransport

        from .usb import SimulatedUsbBackend

        backend = SimulatedUsbBackend(shoe)
        backend.start()
        transport_factory = lambda: UsbTransport(0x1209, 0xBAC0, backend=backend)  # noqa: E731
        device_port = "usb 1209:bac0 (simulated)"
    else:
        pty = PtyShoe(shoe, link_path=state_dir / "shoe")
        pty.plug()
        device_port = str(state_dir / "shoe")
    updated: dict[str, Any] = {
        "table": settings.table.model_copy(update={"id": table_id,
                                                   "betting_control": args.betting}),
        "device": settings.device.model_copy(update={
            "port": device_port, "transport": "usb" if args.usb else "serial"}),
        "mqtt": settings.mqtt.model_copy(update={"url": f"mqtt://{host}:{port}",
                                                 "topic_prefix": None}),
        "state": settings.state.model_copy(update={"dir": state_dir}),
    }
    settings = Settings.model_validate({**settings.model_dump(), **{
        k: v.model_dump() for k, v in updated.items()}})
    daemon = Daemon(settings, transport_factory=transport_factory)
    view = TableView(colour)
    print(paint(f"shoed demo: table {table_id}, shoe on {device_port}, topics "
                f"{settings.topic_root}/#, journal and log in {state_dir}", BOLD, colour))
    print("Ctrl-C to stop.\n", flush=True)
    tasks = [asyncio.create_task(daemon.run())]
    if pty is not None:
        tasks.append(asyncio.create_task(pty.run()))
    tasks.append(asyncio.create_task(_viewer(host, port, settings.topic_root, view,
                                             args.betting, betting_s=2.0)))
    try:
        # Any task ending ends the demo: the daemon ends on Ctrl-C (its SIGINT handler)
        # or SIGTERM, and the shoe and the viewer never end on their own but by failing.
        await asyncio.wait(tasks, timeout=args.duration or None,
                           return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if task.done() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        daemon.request_stop()
        await asyncio.wait(tasks[:1], timeout=5)
        for task in tasks[1:]:
            task.cancel()
        if pty is not None:
            pty.unplug()
        if broker is not None:
            broker.stop()
        print(f"\n{view.results} hand results shown. Journal kept in {state_dir}.", flush=True)
    return 0


def demo(args: argparse.Namespace) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(_demo(args))
    return 0

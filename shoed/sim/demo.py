"""`shoed demo`: broker, simulated shoe and daemon in one command, the table shown live.

Everything the terminal view prints comes from what the daemon publishes on MQTT, exactly
as a casino system would see it: each card in its position, every result with its
payouts, the hold and what releases it, alarms, and the scoreboard (`{root}/roads`).
Two simulated parties act on the table as real ones would:

- a game server (``commands`` mode) closes betting a few seconds after it opened;
- a supervisor resolves holds after a few seconds: it enters an unread card with
  ``manual_card`` (it learns the true card from the simulated shoe, which a real
  supervisor reads off the card itself) and sends ``resume`` for a resumable hold.
  ``--no-supervisor`` leaves holds to the person at the console.

Without a broker at the configured address the demo starts its own Mosquitto (with a
WebSockets listener for the web console) in its own session, so that a Ctrl-C at the
terminal reaches the demo, which then stops the broker itself and removes its directory.
On a shared broker the demo takes the first table id of DEMO, DEMO2, ... that no running
shoed has announced online.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import sys
import tempfile
import textwrap
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

import aiomqtt
from pydantic import ValidationError

from shoed import logs
from shoed.aio import cancel_and_wait, task_names
from shoed.config import ConfigError, Settings, describe_errors, load_settings
from shoed.console.server import ws_url as console_ws_url
from shoed.daemon import Daemon
from shoed.mqtt.brokers import refused_subscription
from shoed.roads_cli import client_args, parse_board, render_board

from .broker import BrokerError, PrivateMosquitto, answers, free_port
from .cli import build_shoe
from .shoe import PtyShoe, SimulatedShoe

SUITS = {"S": "♠", "H": "♥", "D": "♦", "C": "♣"}
RESET, BOLD, DIM, RED, GREEN, BLUE, YELLOW = (
    "\033[0m", "\033[1m", "\033[2m", "\033[31m", "\033[32m", "\033[94m", "\033[33m")
MAX_WIDTH = 80
DEMO_TABLE = "DEMO"
MAX_DEMO_TABLES = 99
DEMO_USER = "pit"  # the console's sign-in on the demo's own broker
STOP_WAIT_S = 5.0  # the view's and the shoe's tasks, cancelled at the end, at most this long
BET_NAMES = {"banker": "banker", "player": "player", "tie": "tie",
             "player_pair": "player pair", "banker_pair": "banker pair",
             "big": "big", "small": "small"}
_RED_CARD = re.compile(r"(10|[2-9AJQK])([♥♦])")


class DemoError(Exception):
    """Why the demo cannot start, in words for the person who started it."""


def paint(text: str, colour: str, enabled: bool) -> str:
    return f"{colour}{text}{RESET}" if enabled and colour else text


def show_card(card: str | None) -> str:
    if card is None:
        return "??"
    return ("10" if card[0] == "T" else card[0]) + SUITS[card[1]]


def _figure(value: float) -> str:
    return f"{value:g}"


def payout_text(payouts: dict[str, float]) -> str:
    """Every bet's net result per unit staked, grouped: what pays, pushes and loses."""
    wins = [f"{BET_NAMES.get(b, b)} {_figure(v)}:1" for b, v in payouts.items() if v > 0]
    pushes = [BET_NAMES.get(b, b) for b, v in payouts.items() if v == 0]
    losses = [BET_NAMES.get(b, b) for b, v in payouts.items() if v < 0]
    parts = [f"pays {', '.join(wins)}" if wins else "pays nothing"]
    if pushes:
        parts.append(f"push (stake back) {', '.join(pushes)}")
    if losses:
        parts.append(f"lose {', '.join(losses)}")
    return "; ".join(parts)


def view_width() -> int:
    return max(40, min(shutil.get_terminal_size((MAX_WIDTH, 24)).columns, MAX_WIDTH))


@dataclasses.dataclass
class Hold:
    """The hold the view last showed, by what identifies it."""

    shoe_id: str
    hand_no: int | None
    reasons: tuple[str, ...]
    card_index: int | None
    allowed: tuple[str, ...]


class TableView:
    """Turns what the daemon publishes into a readable table log, wrapped to `width`."""

    def __init__(self, colour: bool, root: str, width: int = MAX_WIDTH,
                 supervisor: bool = True, broker_hint: str = "",
                 console_url: str | None = None) -> None:
        self.colour = colour
        self.root = root
        self.width = width
        self.supervisor = supervisor
        self.broker_hint = broker_hint  # e.g. "-h 127.0.0.1 -p 1883" for mosquitto_pub
        self.console_url = console_url
        self.results = 0
        self.live_shoes: set[str] = set()
        self.hold: Hold | None = None
        self.card_positions: dict[tuple[str, int], str | None] = {}
        self.device_index: dict[tuple[str, int], int] = {}  # (shoe, card_index) -> device's
        self._board: dict[str, Any] | None = None
        self._board_wanted: tuple[str, int] | None = None  # (shoe_id, seq) of a result

    # -- output ---------------------------------------------------------------------------

    def write(self, text: str) -> None:
        print(text, flush=True)

    def say(self, text: str, colour: str = "", indent: int = 0, hang: int = 2) -> None:
        """One happening: wrapped to the width (continuations indented), then painted."""
        lines = textwrap.wrap(text, width=self.width, initial_indent=" " * indent,
                              subsequent_indent=" " * (indent + hang),
                              break_on_hyphens=False, break_long_words=False) or [""]
        for line in lines:
            if self.colour:
                line = paint(line, colour, True) if colour else _RED_CARD.sub(
                    lambda m: paint(m.group(0), RED, True), line)
            self.write(line)

    # -- events ---------------------------------------------------------------------------

    def event(self, e: dict[str, Any]) -> None:
        kind = e.get("type")
        shoe_id = e.get("shoe_id")
        if shoe_id:
            self.live_shoes.add(shoe_id)
        hand = f"hand {e['hand_no']}" if e.get("hand_no") else ""
        if kind == "shoe_started":
            self.write("")
            self.say(f"=== shoe {shoe_id} started: {e['decks']} decks, {e['table_type']}, "
                     f"betting {e['betting_control']} ===", BOLD)
        elif kind == "commencement":
            if e.get("card") is None:
                self.say("commencement card unread: burn count not known yet")
            else:
                self.say(f"commencement card {show_card(e['card'])}: "
                         f"{e['burn_count']} card(s) to burn")
        elif kind == "card":
            self._card(e, hand)
        elif kind == "betting_closed":
            self.say(f"-- betting closed for {hand}", DIM)
        elif kind == "hand_result":
            self._result(e, hand)
        elif kind == "hand_voided":
            by = f" by {e['operator']}" if e.get("operator") else ""
            withdrawn = " (its result is withdrawn)" if e.get("result_withdrawn") else ""
            self.say(f"{hand} VOIDED{by}: {e['reason']}{withdrawn}", YELLOW)
            self._want_board(e)
        elif kind == "last_hand":
            self.say(f"-- last hand ({e['reason']})", YELLOW)
        elif kind == "shoe_ended":
            self.say(f"=== shoe ended: {e['hands_played']} hands played, "
                     f"{e['hands_voided']} voided ===", BOLD)
        elif kind == "shoe_voided":
            self.say(f"=== shoe VOIDED: {e['reason']} ===", RED)
        elif kind == "alarm":
            state = "ALARM" if e["active"] else "alarm cleared"
            card = f" (card {e['card_index']})" if e.get("card_index") is not None else ""
            self.say(f"[{state}] {e['code']}{card}: {e['message']}",
                     RED if e["active"] else GREEN, indent=2, hang=4)
        elif kind == "procedure":
            cards = " ".join(show_card(c) if isinstance(c, str) or c is None else str(c)
                             for c in e.get("cards") or [])
            self.say(f"procedure {e['rule']}: {e['action']}" + (f" ({cards})" if cards else ""),
                     DIM, indent=2, hang=4)
        elif kind == "supervisor_action" and e.get("command") != "close_betting":
            self.say(f"supervisor action: {e['command']} by {e['operator']}", DIM, indent=2)

    def _card(self, e: dict[str, Any], hand: str) -> None:
        position = e.get("position")
        key = (e.get("shoe_id") or "", int(e.get("card_index") or 0))
        if e.get("device_card_index") is not None:
            self.device_index[key] = int(e["device_card_index"])
        again = key in self.card_positions
        self.card_positions[key] = position
        where = {None: "pending", "commencement_burn": "burn", "commencement": "first",
                 "unnecessary": "unnecessary", "after_shoe_end": "after shoe end",
                 "without_shoe": "without shoe"}.get(position, str(position))
        face = show_card(e.get("card")) if e.get("card") else "??"
        notes = []
        if not e.get("card"):
            notes.append("unread")
        if e.get("source") == "manual":
            notes.append("entered by hand")
        elif again:
            notes.append("placed")
        if e.get("exposed_during_betting"):
            notes.append("exposed during betting")
        note = f"  {', '.join(notes)}" if notes else ""
        label = hand or ("start" if str(position).startswith("commencement") else "")
        self.say(f"  {label:<8} {where:<6} {face:<3}  #{e.get('card_index')}{note}",
                 YELLOW if position in ("unnecessary", "after_shoe_end", "without_shoe")
                 else "", indent=0, hang=20)

    def _result(self, e: dict[str, Any], hand: str) -> None:
        self.results += 1
        winner = str(e["winner"]).upper()
        tone = BLUE if winner == "PLAYER" else RED if winner == "BANKER" else GREEN
        player = " ".join(show_card(x) for x in e["player_cards"])
        banker = " ".join(show_card(x) for x in e["banker_cards"])
        outcome = ("TIE" if winner == "TIE" else f"{winner} wins") + (
            f" {e['player_total']}-{e['banker_total']}" if winner != "BANKER"
            else f" {e['banker_total']}-{e['player_total']}")
        self.say(f"{hand}: {outcome}   Player {e['player_total']} [{player}]   "
                 f"Banker {e['banker_total']} [{banker}]", tone + BOLD if self.colour else "")
        naturals = [side for side, on in (("player", e["player_natural"]),
                                          ("banker", e["banker_natural"])) if on]
        pairs = [side for side, on in (("player", e["player_pair"]),
                                       ("banker", e["banker_pair"])) if on]
        facts = [f"natural: {' and '.join(naturals) or 'none'}",
                 f"pairs: {' and '.join(pairs) or 'none'}",
                 f"{e['big_small']} ({e['cards_dealt']} cards)"]
        if e.get("banker_six"):
            facts.append("banker wins on six")
        facts.append(f"seq {e['seq']}")
        self.say("   ".join(facts), indent=2, hang=2)
        self.say(payout_text(e.get("payouts") or {}), indent=2, hang=4)
        self._want_board(e)

    # -- the board ------------------------------------------------------------------------

    def _want_board(self, e: dict[str, Any]) -> None:
        self._board_wanted = (e.get("shoe_id") or "", int(e.get("seq") or 0))
        self._maybe_board()

    def roads(self, board: dict[str, Any]) -> None:
        self._board = board
        self._maybe_board()

    def _maybe_board(self) -> None:
        board, wanted = self._board, self._board_wanted
        if board is None or wanted is None:
            return
        if board.get("shoe_id") != wanted[0] or int(board.get("seq") or 0) < wanted[1]:
            return
        self._board_wanted = None
        text = render_board(board, width=self.width, colour=self.colour)
        for line in text.rstrip("\n").split("\n"):
            self.write("  " + line if len(line) + 2 <= self.width else line)

    # -- the hold -------------------------------------------------------------------------

    def state(self, s: dict[str, Any]) -> Hold | None:
        """Shows a new hold, or that the shown one was released; returns the live hold."""
        shoe_id = s.get("shoe_id")
        if shoe_id is None or shoe_id not in self.live_shoes:
            return self.hold if shoe_id is None else None  # an old run's retained state
        raw = s.get("hold")
        hold = None if raw is None else Hold(
            shoe_id=shoe_id, hand_no=s.get("hand_no"), reasons=tuple(raw.get("reasons") or ()),
            card_index=raw.get("card_index"), allowed=tuple(raw.get("allowed") or ()))
        if hold != self.hold:
            previous, self.hold = self.hold, hold
            if hold is not None:
                self._show_hold(hold, s)
            elif previous is not None:
                where = f"hand {previous.hand_no}" if previous.hand_no else "commencement"
                self.say(f"** hold released ({where})", GREEN)
        return self.hold

    def _show_hold(self, hold: Hold, s: dict[str, Any]) -> None:
        where = (f"hand {hold.hand_no}" if s.get("shoe_state") != "commencement"
                 else "commencement")
        card = ""
        if hold.card_index is not None:
            position = self.card_positions.get((hold.shoe_id, hold.card_index))
            card = f", card #{hold.card_index}" + (f" at {position}" if position else "")
        self.say(f"** HOLD {where}: {', '.join(hold.reasons)}{card}", YELLOW + BOLD)
        released = []
        for action in hold.allowed:
            if action == "manual_card" and hold.card_index is not None:
                released.append(f"manual_card (the face of #{hold.card_index})")
            else:
                released.append(action)
        self.say(f"released by a supervisor's command on {self.root}/cmd: "
                 f"{' or '.join(released)}", indent=3, hang=3)
        if self.supervisor:
            self.say("the simulated supervisor will release it in a moment "
                     "(--no-supervisor leaves it to you)", DIM, indent=3, hang=3)
            return
        if self.console_url:
            self.say(f"use the console at {self.console_url}, or:", indent=3, hang=3)
        command = "manual_card" if "manual_card" in hold.allowed else (
            "resume" if "resume" in hold.allowed else hold.allowed[0] if hold.allowed else "")
        if not command:
            return
        body: dict[str, Any] = {"request_id": f"hold-{int(time.time())}", "command": command,
                                "operator": "me"}
        if command == "manual_card":
            body.update(card_index=hold.card_index, card="KH")
        elif command == "void_hand":
            body.update(hand_no=hold.hand_no, reason="held")
        # JSON may break between its members: the command stays one copy-and-paste.
        self.write(f"   mosquitto_pub {self.broker_hint} -q 1 -t {self.root}/cmd -m '{{")
        members = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in body.items()]
        lines = textwrap.wrap(", ".join(members) + "}'", width=self.width,
                              initial_indent="     ", subsequent_indent="     ",
                              break_long_words=False, break_on_hyphens=False)
        for line in lines:
            self.write(line)
        if command == "manual_card":
            self.say("(the card as rank A 2-9 T J Q K and suit S H D C, e.g. KH for the "
                     "king of hearts)", DIM, indent=3, hang=4)

    def note(self, text: str, colour: str = "") -> None:
        self.say(text, colour or DIM, indent=3, hang=3)


# --- the simulated parties -----------------------------------------------------------------


Publish = Callable[[dict[str, Any]], Awaitable[None]]


class GameServer:
    """Closes betting `betting_s` after it opened (a result, a void, commencement's end)."""

    def __init__(self, betting_s: float) -> None:
        self.betting_s = betting_s
        self.opened: asyncio.Queue[int] = asyncio.Queue()
        self._last: str | None = None
        self._counter = 0

    def state(self, s: dict[str, Any]) -> None:
        betting = s.get("betting")
        if betting == "open" and self._last != "open":
            self.opened.put_nowait(int(s.get("seq") or 0))
        self._last = betting

    def reconnected(self) -> None:
        """A new connection: the retained `state` comes again, and betting still open then
        is closed (a close_betting sent as the broker went may never have arrived; a
        repeat answers ok and changes nothing)."""
        self._last = None
        while not self.opened.empty():
            self.opened.get_nowait()

    async def run(self, publish: Publish) -> None:
        while True:
            await self.opened.get()
            await asyncio.sleep(self.betting_s)
            self._counter += 1
            await publish({"request_id": f"demo-game-{os.getpid()}-{time.time_ns()}",
                           "command": "close_betting", "operator": "demo-game-server"})


class Supervisor:
    """Releases each hold `delay_s` after it appeared, visibly, so the demo never stalls.

    An unread or foreign card is entered with `manual_card`: the true card comes from the
    simulated shoe (a real supervisor reads it off the card). A resumable hold gets
    `resume`; a hold that allows neither is voided (`void_hand`). It tries each hold at
    most three times, then leaves it to the person at the console and says so.
    """

    ATTEMPTS = 3

    def __init__(self, view: TableView, shoe: SimulatedShoe, delay_s: float) -> None:
        self.view = view
        self.shoe = shoe
        self.delay_s = delay_s
        self.hold: Hold | None = None
        self.changed = asyncio.Event()
        self.answers: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._counter = 0

    def state(self, hold: Hold | None) -> None:
        if hold != self.hold:
            self.hold = hold
            self.changed.set()

    def response(self, answer: dict[str, Any]) -> None:
        future = self.answers.pop(str(answer.get("request_id")), None)
        if future is not None and not future.done():
            future.set_result(answer)

    def true_card(self, hold: Hold) -> str | None:
        if hold.card_index is None:
            return None
        device_index = self.view.device_index.get((hold.shoe_id, hold.card_index))
        return None if device_index is None else self.shoe.unread_cards.get(device_index)

    def decide(self, hold: Hold) -> tuple[dict[str, Any], str] | None:
        """The command that releases this hold, and the line that says why."""
        card = self.true_card(hold) if "manual_card" in hold.allowed else None
        if card is not None:
            return ({"command": "manual_card", "card_index": hold.card_index, "card": card},
                    f"supervisor (simulated): enters card #{hold.card_index} as "
                    f"{show_card(card)} with manual_card (the simulated shoe told it the "
                    f"card; at a real table the supervisor reads it off the card)")
        if "resume" in hold.allowed:
            return ({"command": "resume"},
                    f"supervisor (simulated): checked the table, sends resume "
                    f"({', '.join(hold.reasons)})")
        if "void_hand" in hold.allowed and hold.hand_no is not None:
            reason = f"demo supervisor: {', '.join(hold.reasons)}"
            return ({"command": "void_hand", "hand_no": hold.hand_no, "reason": reason},
                    f"supervisor (simulated): cannot tell the card, voids hand "
                    f"{hold.hand_no} with void_hand")
        return None

    async def run(self, publish: Publish) -> None:
        tried: dict[str, int] = {}
        while True:
            if self.hold is None:
                self.changed.clear()
                await self.changed.wait()
                continue
            hold = self.hold
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.delay_s):
                    await self.changed.wait()
                    continue  # the hold changed (or went) while waiting: look again
            key = repr(hold)
            if tried.get(key, 0) >= self.ATTEMPTS:
                self.changed.clear()
                await self.changed.wait()
                continue
            tried[key] = tried.get(key, 0) + 1
            decision = self.decide(hold)
            if decision is None:
                self.view.note(f"supervisor (simulated): nothing it may send releases this "
                               f"hold ({', '.join(hold.allowed) or 'no commands'}); it is "
                               f"left to you", YELLOW)
                tried[key] = self.ATTEMPTS
                continue
            command, line = decision
            self.view.note(line, BOLD if self.view.colour else "")
            answer = await self.send(publish, command)
            if answer is None:
                self.view.note(f"supervisor (simulated): no answer to {command['command']} "
                               f"in 5 s", YELLOW)
            elif not answer.get("ok"):
                error = answer.get("error") or {}
                self.view.note(f"supervisor (simulated): {command['command']} refused: "
                               f"{error.get('code')}: {error.get('message')}", YELLOW)
            if tried[key] >= self.ATTEMPTS and self.hold == hold:
                self.view.note("supervisor (simulated): gives up on this hold; it is left "
                               "to you", YELLOW)

    async def send(self, publish: Publish, command: dict[str, Any]) -> dict[str, Any] | None:
        self._counter += 1
        request_id = f"demo-supervisor-{os.getpid()}-{self._counter}-{time.time_ns()}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.answers[request_id] = future
        await publish({"request_id": request_id, "operator": "demo-supervisor", **command})
        try:
            async with asyncio.timeout(5):
                return await future
        except TimeoutError:
            return None
        finally:
            self.answers.pop(request_id, None)


class StateGate:
    """Applies a `state` snapshot once the events it reflects (up to its `seq`) were shown.

    The snapshot and the events travel on different topics; the view shows a hold after
    the cards that caused it. A snapshot whose events never come (a reconnect lost them)
    is applied after `patience_s`.
    """

    def __init__(self, apply: Callable[[dict[str, Any]], None], patience_s: float = 0.5
                 ) -> None:
        self.apply = apply
        self.patience_s = patience_s
        self.last_seq = 0
        self._pending: dict[str, Any] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def state(self, s: dict[str, Any]) -> None:
        if int(s.get("seq") or 0) <= self.last_seq:
            self._cancel()
            self._pending = None
            self.apply(s)
            return
        self._pending = s
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.patience_s, self.flush)

    def event(self, e: dict[str, Any]) -> None:
        self.last_seq = max(self.last_seq, int(e.get("seq") or 0))
        if self._pending is not None and int(self._pending.get("seq") or 0) <= self.last_seq:
            self.flush()

    def flush(self) -> None:
        self._cancel()
        pending, self._pending = self._pending, None
        if pending is not None:
            self.apply(pending)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


async def watch_table(settings: Settings, view: TableView, game: GameServer | None,
                      supervisor: Supervisor | None,
                      released: Callable[[], None] | None = None) -> None:
    """The demo's one MQTT client: reads events, state, roads and answers, sends commands.

    A lost broker is retried (a shared broker may restart); events are deduplicated by
    `event_id`, as delivery is at least once. `released` is called when the table is not
    held (the simulated dealer waits for it after an unread card).
    """
    root = settings.topic_root
    seen: set[str] = set()
    backoff = 0.5
    identifier = f"shoed-demo-{settings.table.id}-{os.getpid()}"
    bad_board_shown = False

    def apply_state(payload: dict[str, Any]) -> None:
        before = view.hold
        hold = view.state(payload)
        live = payload.get("shoe_id") in view.live_shoes
        if supervisor is not None:
            supervisor.state(hold)
        if game is not None and live:
            game.state(payload)
        if released is not None and live and hold is None and (
                before is not None or payload.get("shoe_state") in ("shoe_ended",
                                                                     "shoe_voided")):
            released()

    gate = StateGate(apply_state)
    while True:
        try:
            async with aiomqtt.Client(**client_args(settings, identifier)) as client:
                if game is not None:
                    game.reconnected()
                for topic in ("events", "state", "roads", "cmd/response"):
                    await client.subscribe(f"{root}/{topic}", qos=1)
                backoff = 0.5

                async def publish(command: dict[str, Any], client: aiomqtt.Client = client
                                  ) -> None:
                    await client.publish(f"{root}/cmd", json.dumps(command), qos=1)

                async with asyncio.TaskGroup() as group:
                    if game is not None:
                        group.create_task(game.run(publish))
                    if supervisor is not None:
                        group.create_task(supervisor.run(publish))
                    async for message in client.messages:
                        topic = str(message.topic)
                        if topic == f"{root}/roads":
                            try:
                                board = parse_board(topic, message.payload)
                            except ValueError as error:
                                if not bad_board_shown:
                                    view.note(str(error), YELLOW)
                                    bad_board_shown = True
                                continue
                            if board is not None:
                                view.roads(board)
                            continue
                        try:
                            payload = json.loads(message.payload)  # type: ignore[arg-type,unused-ignore]
                        except (TypeError, ValueError):
                            continue
                        if not isinstance(payload, dict):
                            continue
                        if topic == f"{root}/state":
                            gate.state(payload)
                        elif topic == f"{root}/cmd/response":
                            if supervisor is not None:
                                supervisor.response(payload)
                        elif payload.get("event_id") not in seen:
                            seen.add(str(payload.get("event_id")))
                            view.event(payload)
                            gate.event(payload)
        except (aiomqtt.MqttError, BaseExceptionGroup) as failure:
            # The broker lost while the task group ran comes wrapped in a group.
            why: BaseException = failure
            if isinstance(failure, BaseExceptionGroup):
                lost, rest = failure.split(aiomqtt.MqttError)
                if rest is not None or lost is None:
                    raise
                why = lost.exceptions[0]
            view.note(f"broker {settings.mqtt.urls[0]}: {why}; retrying in {backoff:g} s",
                      YELLOW)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)


# --- choosing the table --------------------------------------------------------------------


async def read_statuses(settings: Settings, topic: str, wait_s: float = 0.7
                        ) -> dict[str, bool]:
    """Retained `status` messages under `topic` (may hold a `+`): topic -> online."""
    found: dict[str, bool] = {}
    args = client_args(settings, f"shoed-demo-probe-{os.getpid()}-{time.time_ns()}")
    try:
        async with aiomqtt.Client(**args) as client:
            if refused_subscription(await client.subscribe(topic, qos=1)) is not None:
                raise DemoError(f"the broker at {settings.mqtt.urls[0]} does not let this demo "
                                f"read {topic}, so it cannot tell which tables are in use")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    async for message in client.messages:
                        try:
                            status = json.loads(message.payload)  # type: ignore[arg-type,unused-ignore]
                            online = bool(status.get("online"))
                        except (TypeError, ValueError, AttributeError):
                            online = bool(message.payload)  # unreadable: taken if not empty
                        found[str(message.topic)] = online
    except aiomqtt.MqttError as error:
        raise DemoError(f"cannot read the table statuses on {settings.mqtt.urls[0]}: {error}"
                        ) from None
    return found


async def choose_table(settings: Settings, fixed: str | None) -> str:
    """The table id to use on a shared broker: `fixed` if no shoed has it online, else
    (when not fixed) the first of DEMO, DEMO2, ... DEMO99 that none has."""
    if fixed is not None:
        root = settings.topic_root
        statuses = await read_statuses(settings, f"{root}/status")
        if statuses.get(f"{root}/status"):
            raise DemoError(f"table {fixed} is in use on {settings.mqtt.urls[0]}: a running "
                            f"shoed says online on {root}/status. Stop it, or give the demo "
                            f"another table (--table)")
        return fixed
    statuses = await read_statuses(settings, "shoed/+/status")
    online = {topic.split("/")[1] for topic, up in statuses.items() if up}
    for n in range(1, MAX_DEMO_TABLES + 1):
        table = DEMO_TABLE if n == 1 else f"{DEMO_TABLE}{n}"
        if table not in online:
            return table
    raise DemoError(f"tables {DEMO_TABLE} to {DEMO_TABLE}{MAX_DEMO_TABLES} are all online on "
                    f"{settings.mqtt.urls[0]}: give the demo a table (--table) or its own broker "
                    f"(--own-broker)")


# --- the optional web console --------------------------------------------------------------


async def start_console(settings: Settings, listen: str, tables: list[str],
                        websockets_url: str | None) -> str:
    """The web console (`shoed console`), in this process, for as long as the demo's
    event loop lives; the page reaches the demo's broker at `websockets_url`."""
    from shoed.console.server import serve_console

    if websockets_url:
        console = settings.console.model_copy(update={"ws_url": websockets_url})
        settings = settings.model_copy(update={"console": console})
    return await serve_console(settings, listen, tables)


def console_listen(asked: str | None) -> str:
    if asked:
        return asked
    return "127.0.0.1:8080" if not answers("127.0.0.1", 8080, 0.2) else f"127.0.0.1:{free_port()}"


# --- the demo ------------------------------------------------------------------------------


def _demo_settings(args: argparse.Namespace) -> Settings:
    try:
        settings = load_settings(args.config) if args.config else load_settings(None)
    except ConfigError as error:
        raise DemoError(str(error)) from None
    if args.broker:
        settings = _with(settings, mqtt={"url": args.broker})
    return settings


def _with(settings: Settings, **sections: dict[str, Any]) -> Settings:
    """`settings` with these keys changed (from the demo's options: a value that cannot
    be used is a DemoError naming the key, as in a config file)."""
    dumped = settings.model_dump()
    for name, changes in sections.items():
        dumped[name] = {**dumped[name], **changes}
    try:
        return Settings.model_validate(dumped)
    except ValidationError as error:
        raise DemoError(describe_errors(error)) from None


async def _demo(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        # Until the daemon takes these over (it stops on them), they stop the demo.
        loop.add_signal_handler(sig, stopping.set)
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    width = view_width()
    settings = _demo_settings(args)
    decks = args.decks if args.decks is not None else (
        settings.rules.decks if args.config else 8)
    args.decks = decks
    banner: list[str] = []
    host, port = settings.mqtt.host_port
    broker: PrivateMosquitto | None = None
    ws_login: tuple[str, str] | None = None  # the console page's sign-in on our own broker
    state_dir: pathlib.Path | None = None
    tasks: list[asyncio.Task[Any]] = []
    daemon: Daemon | None = None
    pty: PtyShoe | None = None
    view: TableView | None = None
    # The table: --table, else the config's (with its topic prefix) when it names one,
    # else DEMO (or the first free DEMOn on a shared broker). Never the default T01 of a
    # config without `[table] id` (outside review: that would put simulated hands on a
    # real table's topics whenever its daemon is stopped).
    named = args.config and "id" in settings.table.model_fields_set
    fixed: str | None = args.table or (settings.table.id if named else None)
    if args.table or not named:
        settings = _with(settings, table={"id": fixed or DEMO_TABLE},
                         mqtt={"topic_prefix": None})
    try:
        own = args.own_broker or not answers(host, port)
        why = "as asked" if args.own_broker else \
            f"no broker answered at {settings.mqtt.urls[0]}"
        ws = urllib.parse.urlsplit(console_ws_url(settings))
        if not own and not args.no_console and not answers(ws.hostname or host,
                                                           ws.port or 9001):
            if not (args.broker or args.config):
                # The broker found by default (Debian's own mosquitto, say) must also take
                # the console's WebSockets, or the page could never connect.
                own = True
                why = (f"the broker at {settings.mqtt.urls[0]} has no WebSockets listener "
                       f"for the console ({ws.geturl()})")
            else:
                # A broker the user chose: it is kept, but a page that can never connect
                # is said so (outside review: the console's URL was printed without a word).
                banner.append(f"console: nothing answers at {ws.geturl()}, where the page "
                              f"would reach the broker over WebSockets: the page cannot "
                              f"connect. Give the broker's WebSockets URL as [console] "
                              f"ws_url in a --config, or use --own-broker")
        if own:
            # The console's page signs in as DEMO_USER with a password made now, handed to
            # it in the URL's fragment: Debian 12's Mosquitto opens a WebSockets listener
            # on every interface, so an open one would take anyone on the network.
            ws_login = (DEMO_USER, secrets.token_urlsafe(12))
            broker = PrivateMosquitto(websockets=True, ws_users=dict([ws_login]))
            try:
                broker.start()
            except BrokerError as error:
                raise DemoError(f"could not start mosquitto: {error} (its files are in "
                                f"{broker.dir})") from None
            banner.append(f"{why}: started the demo's own mosquitto on port {broker.port} "
                          f"(WebSockets on {broker.ws_port}); it stops with the demo")
            host, port = "127.0.0.1", broker.port
            settings = _with(settings, mqtt={"url": f"mqtt://{host}:{port}",
                                             "username": None, "password_file": None,
                                             "ca_file": None, "cert_file": None,
                                             "key_file": None})
            if not args.no_console:
                # Its own broker takes the console's page as DEMO_USER only (with the
                # password in the printed URL): a supervisor (a real table maps users to
                # roles).
                settings = _with(settings, auth={"default_role": "supervisor"})
                banner.append(f"console: the demo's own broker takes the page as "
                              f"{DEMO_USER}, a supervisor, with the password in its URL "
                              f"(no one else: its WebSockets listener wants it)")
            table_id = settings.table.id
        else:
            banner.append(f"using the broker at {settings.mqtt.urls[0]}")
            table_id = await choose_table(settings, fixed)
            if table_id != settings.table.id:
                banner.append(f"table {DEMO_TABLE} is in use on this broker: this demo is "
                              f"table {table_id}")
        state_dir = pathlib.Path(tempfile.mkdtemp(prefix="shoed-demo-"))
        log_file = open(state_dir / "shoed.log", "a")  # noqa: SIM115 - for the demo's life
        logs.configure("json", "info", file=log_file)
        shoe = build_shoe(args, loop.time(), default_pace=0.6)
        shoe.script.wait_for_release = True  # no new shoe while an unread card is held
        shoe.script.wait_for_betting = args.betting == "commands"
        transport_factory = None
        if args.usb:
            from shoed.device.usb import UsbTransport

            from .usb import SimulatedUsbBackend

            backend = SimulatedUsbBackend(shoe)
            backend.start()
            transport_factory = lambda: UsbTransport(0x1209, 0xBAC0, backend=backend)  # noqa: E731
            device_port = "usb 1209:bac0 (simulated)"
        else:
            pty = PtyShoe(shoe, link_path=state_dir / "shoe")
            pty.plug()
            device_port = str(state_dir / "shoe")
        settings = _with(
            settings,
            table={"id": table_id, "betting_control": args.betting},
            device={"port": device_port, "transport": "usb" if args.usb else "serial"},
            rules={"decks": decks},
            state={"dir": state_dir})
        root = settings.topic_root
        ws_url = broker.ws_url if broker is not None else None
        console_url = None
        if not args.no_console:
            try:
                console_url = await start_console(settings, console_listen(args.console_listen),
                                                  [table_id], ws_url)
            except Exception as error:  # the demo goes on without it
                banner.append(f"the web console did not start: {error}")
        if console_url and ws_login is not None:  # the page signs in by itself
            console_url += "#" + urllib.parse.urlencode({"user": ws_login[0],
                                                         "password": ws_login[1]})
        if console_url:
            print(paint(f"console: {console_url}", BOLD, colour), flush=True)
        for line in banner:
            for part in textwrap.wrap(line, width=width, subsequent_indent="  "):
                print(part, flush=True)
        mqtt_hint = f"-h {host} -p {port}"
        view = TableView(colour, root, width=width, supervisor=not args.no_supervisor,
                         broker_hint=mqtt_hint, console_url=console_url)
        view.say(f"shoed demo: table {table_id}, {decks} decks, shoe on {device_port}, "
                 f"topics {root}/#", BOLD)
        view.say(f"journal and daemon log in: {state_dir}")
        supervisor_line = ("holds are left to you (--no-supervisor)" if args.no_supervisor
                           else f"a simulated supervisor releases holds after "
                                f"{args.supervisor_delay:g} s")
        view.say(f"unread cards: {args.unread_rate:.0%} of cards; {supervisor_line}")
        view.say("Ctrl-C to stop.")
        daemon = Daemon(settings, transport_factory=transport_factory)
        game = GameServer(args.betting_time) if args.betting == "commands" else None
        supervisor = (None if args.no_supervisor
                      else Supervisor(view, shoe, args.supervisor_delay))
        tasks.append(asyncio.create_task(daemon.run(), name="daemon"))
        if pty is not None:
            tasks.append(asyncio.create_task(pty.run(), name="shoe"))
        tasks.append(asyncio.create_task(
            watch_table(settings, view, game, supervisor, released=shoe.release), name="view"))
        waiter = asyncio.create_task(stopping.wait())
        # The daemon ends on Ctrl-C (it takes over SIGINT) or SIGTERM; the shoe and the
        # view never end on their own but by failing.
        done, _ = await asyncio.wait([*tasks, waiter], timeout=args.duration or None,
                                     return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        for task in done:
            if task is not waiter and not task.cancelled() and task.exception() is not None:
                failure = task.exception()
                print(f"shoed demo: the {task.get_name()} failed: {failure!r}",
                      file=sys.stderr, flush=True)
                return 1
        return 0
    except DemoError as error:
        print(f"shoed demo: {error}", file=sys.stderr, flush=True)
        return 2
    finally:
        await _stop(daemon, tasks, pty)
        if broker is not None:
            broker.remove()
        if view is not None:
            print(f"\n{view.results} hand results shown. Journal and log kept in:\n  "
                  f"{state_dir}", flush=True)
        elif state_dir is not None:
            shutil.rmtree(state_dir, ignore_errors=True)


async def _stop(daemon: Daemon | None, tasks: list[asyncio.Task[Any]], pty: PtyShoe | None
                ) -> None:
    """The daemon first (it flushes to the broker), then the view and the shoe, awaited so
    that no client is left half-closed on a stopped loop."""
    if daemon is not None:
        daemon.request_stop()
        if tasks:
            await asyncio.wait(tasks[:1], timeout=6)
    # Cancelled again until they end, for at most STOP_WAIT_S: a client's cancel can be
    # swallowed on Python 3.11 (aiomqtt's wait_for), and a single cancel then waited for
    # without end left the demo hanging on an early Ctrl-C (outside review of issue 18).
    stuck = await cancel_and_wait(tasks, timeout=STOP_WAIT_S)
    if stuck:
        print(f"shoed demo: {task_names(stuck)} did not stop within {STOP_WAIT_S:g} s; "
              "left to the end of the process", file=sys.stderr, flush=True)
    if pty is not None:
        pty.unplug()


def demo(args: argparse.Namespace) -> int:
    code = 0
    try:
        with contextlib.suppress(KeyboardInterrupt):
            code = asyncio.run(_demo(args))
    except DemoError as error:  # an option or the config, before the demo began
        print(f"shoed demo: {error}", file=sys.stderr, flush=True)
        return 2
    sys.stdout.flush()
    return code

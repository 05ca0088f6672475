"""Screenshots of the console for docs/console/: a private broker (with a WebSockets
listener), the simulated shoe on a pty, the daemon, the console and Debian's chromium.

    .venv/bin/python scripts/console_screenshots.py [--out docs/console]

Takes the table at 1920x1080 (a result on the board), the supervisor's tablet at 1024x768
(a hold on an unread card) and the pit. While the daemon does not publish `{root}/roads`
itself, this script publishes the board from the results it sees, by the rules of
roads.md (a short rendition, for the pictures only); once `{root}/roads` comes from the
daemon the script leaves it alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import tempfile
from typing import Any

import aiomqtt

from shoed.config import Settings
from shoed.console import start_console
from shoed.daemon import Daemon
from shoed.sim.broker import PrivateMosquitto, free_port
from shoed.sim.shoe import PtyShoe, Script, SimulatedShoe

ROWS = 6
PAUSE_AT = 18


def layout(keys: list[str]) -> list[tuple[int, int]]:
    """Big-road layout (roads.md section 3, tail_mode stay) of a sequence of keys."""
    taken: set[tuple[int, int]] = set()
    cells: list[tuple[int, int]] = []
    opened, col, row, turned, prev = -1, 0, 0, False, None
    for key in keys:
        if key != prev:
            col = opened + 1
            while (col, 0) in taken:
                col += 1
            opened, row, turned = col, 0, False
        elif not turned and row + 1 < ROWS and (col, row + 1) not in taken:
            row += 1
        else:
            turned, col = True, col + 1
        taken.add((col, row))
        cells.append((col, row))
        prev = key
    return cells


def colour(lengths: list[int], n: int, m: int, k: int) -> str | None:
    """Derived-road mark of entry (n, m), 1-based (roads.md section 4)."""
    if not (n > k + 1 or (n == k + 1 and m >= 2)):
        return None
    if m >= 2:
        p = lengths[n - k - 1]
        return "blue" if m == p + 1 else "red"
    return "red" if lengths[n - 2] == lengths[n - 2 - k] else "blue"


def board(results: list[dict[str, Any]], seq: int, shoe_id: str | None) -> dict[str, Any]:
    flags = [{"player_pair": r["player_pair"], "banker_pair": r["banker_pair"],
              "natural": r["player_natural"] or r["banker_natural"]} for r in results]
    bead = [{"hand_no": r["hand_no"], "winner": r["winner"], **f, "col": i // ROWS,
             "row": i % ROWS} for i, (r, f) in enumerate(zip(results, flags, strict=True))]
    entries: list[dict[str, Any]] = []
    ties_before = 0
    for r, f in zip(results, flags, strict=True):
        if r["winner"] == "tie":
            if entries:
                entries[-1]["ties"] += 1
            else:
                ties_before += 1
            continue
        entries.append({"hand_no": r["hand_no"], "winner": r["winner"], "ties": 0, **f})
    if entries:
        entries[0]["ties"] += ties_before
    elif ties_before:
        entries.append({"hand_no": None, "winner": None, "ties": ties_before,
                        "player_pair": False, "banker_pair": False, "natural": False})
    winners = [e["winner"] for e in entries if e["winner"]]
    for e, (c, r) in zip(entries, layout([e["winner"] or "-" for e in entries]), strict=True):
        e.update(col=c, row=r)
    lengths: list[int] = []
    position: list[tuple[int, int]] = []
    for i, w in enumerate(winners):
        if i and w == winners[i - 1]:
            lengths[-1] += 1
        else:
            lengths.append(1)
        position.append((len(lengths), lengths[-1]))

    def derived(k: int, extra: str | None = None) -> Any:
        ws = winners + ([extra] if extra else [])
        ls: list[int] = []
        pos: list[tuple[int, int]] = []
        for i, w in enumerate(ws):
            if i and w == ws[i - 1]:
                ls[-1] += 1
            else:
                ls.append(1)
            pos.append((len(ls), ls[-1]))
        marks = [m for m in (colour(ls, n, m, k) for n, m in pos) if m]
        return marks

    roads: dict[str, Any] = {}
    ask: dict[str, dict[str, Any]] = {"banker": {}, "player": {}}
    for name, k in (("big_eye_boy", 1), ("small_road", 2), ("cockroach_pig", 3)):
        marks = derived(k)
        roads[name] = {"marks": marks, "cells": [{"col": c, "row": r}
                                                 for c, r in layout(marks)]}
        for side in ("banker", "player"):
            more = derived(k, side)
            ask[side][name] = more[-1] if len(more) > len(marks) else None
    streaks = {"banker": 0, "player": 0}
    for w, length in zip([winners[i] for i in range(len(winners))
                          if i == 0 or winners[i] != winners[i - 1]], lengths, strict=True):
        streaks[w] = max(streaks[w], length)
    return {"schema_version": 1, "seq": seq, "shoe_id": shoe_id, "rows": ROWS,
            "tail_mode": "stay", "bead_plate": bead, "big_road": entries, **roads, "ask": ask,
            "stats": {"hands": len(results),
                      **{w: sum(r["winner"] == w for r in results)
                         for w in ("banker", "player", "tie")},
                      "player_pair": sum(f["player_pair"] for f in flags),
                      "banker_pair": sum(f["banker_pair"] for f in flags),
                      "natural": sum(f["natural"] for f in flags),
                      "longest_banker_streak": streaks["banker"],
                      "longest_player_streak": streaks["player"],
                      "current_streak": {"side": winners[-1], "length": lengths[-1]}
                      if winners else None}}


async def scoreboard(port: int, root: str, enter_until: int, shoe: SimulatedShoe,
                     stop: asyncio.Event) -> None:
    """Publishes the board unless the daemon does; enters unread cards (as a supervisor
    would) until hand `enter_until`, then leaves the next hold for the picture."""
    results: list[dict[str, Any]] = []
    mine: set[bytes] = set()
    daemon_roads = False
    async with aiomqtt.Client("127.0.0.1", port, identifier="screenshots") as client:
        await client.subscribe(f"{root}/#", qos=1)
        async for message in client.messages:
            if stop.is_set():
                return
            leaf = str(message.topic)[len(root) + 1:]
            if leaf in ("roads", "cmd/response") or not message.payload:
                daemon_roads = daemon_roads or (leaf == "roads" and message.payload not in mine)
                continue
            data = json.loads(message.payload)  # type: ignore[arg-type]
            if leaf == "events" and data["type"] == "hand_result":
                results.append(data)
                if not daemon_roads:
                    body = json.dumps(board(results, data["seq"], data["shoe_id"])).encode()
                    mine.add(body)
                    await client.publish(f"{root}/roads", body, qos=1, retain=True)
            if leaf == "state" and (data.get("hold") or {}).get("card_index") and \
                    (data.get("hand_no") or 0) < enter_until:
                index = data["hold"]["card_index"]
                await client.publish(f"{root}/cmd", json.dumps({
                    "request_id": f"shot-{index}", "command": "manual_card",
                    "operator": "screenshots", "card_index": index,
                    "card": shoe.dealt[index - 1]}), qos=1)


async def main(out: pathlib.Path) -> None:
    from playwright.async_api import async_playwright

    out.mkdir(parents=True, exist_ok=True)
    mqtt_port, ws_port = free_port(), free_port()
    broker = PrivateMosquitto(port=mqtt_port, extra_config=(
        f"listener {mqtt_port} 127.0.0.1\nallow_anonymous true\n"
        f"listener {ws_port} 127.0.0.1\nprotocol websockets\n"))
    broker.start()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="shoed-shots-"))
    loop = asyncio.get_running_loop()
    shoe = SimulatedShoe(decks=8, seed=21, script=Script(pace_s=0.06, shoes=1,
                                                         unread_rate=0.004), now=loop.time())
    pty = PtyShoe(shoe, link_path=tmp / "shoe")
    pty.plug()
    settings = Settings.model_validate({
        "table": {"id": "T01", "betting_control": "none"},
        "device": {"port": str(tmp / "shoe")},
        "mqtt": {"url": broker.url}, "state": {"dir": str(tmp / "state")},
        "log": {"format": "json", "level": "error"},
        "console": {"ws_url": f"ws://127.0.0.1:{ws_port}", "tables": ["T01", "T02", "T03"]}})
    daemon = Daemon(settings)
    stop = asyncio.Event()
    # The dealer waits after hand PAUSE_AT until the first picture is taken.
    resumed = asyncio.Event()
    deal = shoe._deal

    def paced_deal(now: float) -> None:
        engine = daemon.engine
        if engine is not None and not resumed.is_set() and \
                engine.public_state()["hands_played"] >= PAUSE_AT:
            return
        deal(now)

    shoe._deal = paced_deal  # type: ignore[method-assign]
    tasks = [asyncio.create_task(daemon.run()), asyncio.create_task(pty.run()),
             asyncio.create_task(scoreboard(mqtt_port, "shoed/T01", 24, shoe, stop))]
    console = await start_console(settings, "127.0.0.1:0")
    try:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path="/usr/bin/chromium")

            async def page(width: int, height: int, query: str) -> Any:
                ctx = await browser.new_context(viewport={"width": width, "height": height})
                pg = await ctx.new_page()
                await pg.goto(console.url + query)
                await pg.fill("input[name=username]", "pit-supervisor")
                await pg.click("[data-testid=login-submit]")
                return pg

            table = await page(1920, 1080, "?table=T01")
            tablet = await page(1024, 768, "?table=T01")
            pit = await page(1920, 1080, "")
            await table.wait_for_function(
                "() => Number(document.querySelector('[data-testid=result]').dataset.hand"
                f" || 0) >= {PAUSE_AT}", timeout=300_000)
            await asyncio.sleep(1.0)
            await table.screenshot(path=str(out / "table-1920x1080.png"))
            await pit.screenshot(path=str(out / "pit-1920x1080.png"))
            resumed.set()
            await tablet.wait_for_selector("[data-testid=hold]", state="visible",
                                           timeout=300_000)
            await tablet.click("[data-testid=hold-action][data-command=manual_card]")
            await tablet.screenshot(path=str(out / "tablet-hold-1024x768.png"))
            await browser.close()
    finally:
        stop.set()
        daemon.request_stop()
        await asyncio.wait(tasks[:1], timeout=10)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await console.close()
        pty.unplug()
        broker.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("docs/console"))
    asyncio.run(main(parser.parse_args().out))

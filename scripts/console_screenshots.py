"""Screenshots of the console for docs/console/: a private broker (with a WebSockets
listener), two simulated shoes on ptys, two daemons, the console and Debian's chromium.

    .venv/bin/python scripts/console_screenshots.py [--out docs/console]

Everything on the pictures is what the daemons publish: the board is each daemon's retained
`{root}/roads`, the alarms are its `state.alarms`. Table T01 deals a shuffled eight-deck
shoe: the table at 1920x1080 (a result on the board), then the supervisor's tablet at
1024x768 (a hold on an unread card, the card picker open). Table T02 deals packs in
new-deck order with `[integrity] on_unshuffled = "alarm"`: its `shoe_unshuffled` alarms
(ackable) on the tablet at 1024x768, and highlighted on the pit page beside T01 (and T03,
a table that does not report).
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

PAUSE_AT = 18


async def supervisor(port: int, root: str, enter_until: int, shoe: SimulatedShoe,
                     stop: asyncio.Event) -> None:
    """Enters unread cards (as a supervisor would) until hand `enter_until`, then leaves
    the next hold for the picture."""
    async with aiomqtt.Client("127.0.0.1", port, identifier="screenshots") as client:
        await client.subscribe(f"{root}/state", qos=1)
        async for message in client.messages:
            if stop.is_set():
                return
            if not message.payload:
                continue
            data = json.loads(message.payload)  # type: ignore[arg-type]
            if (data.get("hold") or {}).get("card_index") and \
                    (data.get("hand_no") or 0) < enter_until:
                index = data["hold"]["card_index"]
                await client.publish(f"{root}/cmd", json.dumps({
                    "request_id": f"shot-{index}", "command": "manual_card",
                    "operator": "screenshots", "card_index": index,
                    "card": shoe.dealt[index - 1]}), qos=1)


def table_settings(tmp: pathlib.Path, table: str, broker: PrivateMosquitto, ws_port: int,
                   **sections: Any) -> Settings:
    data: dict[str, Any] = {
        "table": {"id": table, "betting_control": "none"},
        "device": {"port": str(tmp / f"shoe-{table}")},
        "mqtt": {"url": broker.url}, "state": {"dir": str(tmp / f"state-{table}")},
        "log": {"format": "json", "level": "error"},
        "console": {"ws_url": f"ws://127.0.0.1:{ws_port}", "tables": ["T01", "T02", "T03"]},
        **sections}
    return Settings.model_validate(data)


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
    packed = SimulatedShoe(decks=8, seed=3, script=Script(pace_s=0.06, shoes=1,
                                                          unshuffled=True), now=loop.time())
    settings = table_settings(tmp, "T01", broker, ws_port)
    daemons = {"T01": Daemon(settings),
               "T02": Daemon(table_settings(tmp, "T02", broker, ws_port,
                                            integrity={"on_unshuffled": "alarm"}))}
    ptys = [PtyShoe(shoe, link_path=tmp / "shoe-T01"), PtyShoe(packed, link_path=tmp / "shoe-T02")]
    for pty in ptys:
        pty.plug()
    stop = asyncio.Event()
    # Each dealer waits until the pages are open (they see every event), and after hand
    # PAUSE_AT until the pictures of the board are taken.
    dealing = asyncio.Event()
    resumed = asyncio.Event()

    def pause(sim: SimulatedShoe, daemon: Daemon) -> None:
        deal = sim._deal

        def paced_deal(now: float) -> None:
            if not dealing.is_set():
                return
            recorder = getattr(daemon, "recorder", None)
            if recorder is not None and not resumed.is_set() and \
                    recorder.engine.public_state()["hands_played"] >= PAUSE_AT:
                return
            deal(now)

        sim._deal = paced_deal  # type: ignore[method-assign]

    pause(shoe, daemons["T01"])
    pause(packed, daemons["T02"])
    tasks = [asyncio.create_task(d.run()) for d in daemons.values()]
    tasks += [asyncio.create_task(pty.run()) for pty in ptys]
    tasks.append(asyncio.create_task(supervisor(mqtt_port, "shoed/T01", 24, shoe, stop)))
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

            reached = ("() => Number(document.querySelector('[data-testid=result]')"
                       f".dataset.hand || 0) >= {PAUSE_AT}")
            table = await page(1920, 1080, "?table=T01")
            tablet = await page(1024, 768, "?table=T01")
            alarms = await page(1024, 768, "?table=T02")
            pit = await page(1920, 1080, "")
            for pg in (table, tablet, alarms, pit):
                await pg.wait_for_selector("#connection[data-state=connected]",
                                           state="attached", timeout=30_000)
            dealing.set()
            await table.wait_for_function(reached, timeout=300_000)
            await alarms.wait_for_function(
                "() => Number(document.querySelector('[data-testid=stats] [data-stat=hands] b')"
                f"?.innerText || 0) >= {PAUSE_AT}", timeout=300_000)
            await alarms.wait_for_selector("[data-testid=alarm][data-code=shoe_unshuffled]"
                                           " [data-testid=ack]", timeout=30_000)
            await pit.wait_for_selector("[data-testid=pit-table][data-table=T02]"
                                        "[data-alarmed=true]", timeout=30_000)
            await asyncio.sleep(1.0)
            await table.screenshot(path=str(out / "table-1920x1080.png"))
            await pit.screenshot(path=str(out / "pit-1920x1080.png"))
            await alarms.locator("[data-testid=alarms]").scroll_into_view_if_needed()
            await alarms.screenshot(path=str(out / "tablet-alarms-1024x768.png"))
            resumed.set()
            await tablet.wait_for_selector("[data-testid=hold]", state="visible",
                                           timeout=300_000)
            await tablet.click("[data-testid=hold-action][data-command=manual_card]")
            await tablet.screenshot(path=str(out / "tablet-hold-1024x768.png"))
            await browser.close()
    finally:
        stop.set()
        for daemon in daemons.values():
            daemon.request_stop()
        await asyncio.wait(tasks[:2], timeout=10)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await console.close()
        for pty in ptys:
            pty.unplug()
        broker.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("docs/console"))
    asyncio.run(main(parser.parse_args().out))

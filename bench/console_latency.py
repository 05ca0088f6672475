"""Card-to-page latency of the console, and the console's idle CPU (docs/performance.md).

    .venv/bin/python bench/console_latency.py --cards 500 --idle 30

A private Mosquitto (MQTT and WebSockets listeners), the simulated shoe on a pty, `shoed
run` and `shoed console` as their own processes, and one console page open in Debian's
chromium (Playwright, headless). Card-to-page: the CARD frame written to the pty -> the
card's element in the page's DOM (a MutationObserver notes when an element with the
card's `data-card-index` first appears). Both ends read the same wall clock (Python's
time.time(), the page's performance.timeOrigin + performance.now()). Card-to-event, the
same frame -> the `card` event at a local MQTT subscriber, is shown beside it: the page's
own share is the difference. Idle CPU: the
console server's CPU over `--idle` seconds with the page open and the table quiet, then
over the dealing. Run it on a quiet machine for the project's figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiomqtt  # noqa: E402
from procfs import cpu_seconds, rss_kb, stop  # noqa: E402
from quiet import ignore_closed_subscriber_writer  # noqa: E402

from firmware_protocol.messages import Card  # noqa: E402
from shoed.config import write_config  # noqa: E402
from shoed.sim.broker import PrivateMosquitto, answers, free_port  # noqa: E402
from shoed.sim.shoe import PtyShoe, Script, SimulatedShoe  # noqa: E402

OBSERVER = """() => {
  window.__seen = {};
  const note = (el) => {
    if (!(el instanceof Element)) return;
    const found = el.matches('[data-card-index]') ? [el] : [];
    for (const c of [...found, ...el.querySelectorAll('[data-card-index]')]) {
      const i = c.dataset.cardIndex;
      if (i && !(i in window.__seen)) window.__seen[i] = performance.timeOrigin + performance.now();
    }
  };
  new MutationObserver((records) => {
    for (const r of records) for (const n of r.addedNodes) note(n);
  }).observe(document.body, {childList: true, subtree: true});
}"""


class WrittenShoe(SimulatedShoe):
    """The simulated shoe, noting (wall clock) when each CARD frame first went out."""

    def __post_init__(self) -> None:
        self.written: list[float] = []  # i-th card dealt (host card_index i + 1)
        super().__post_init__()

    def _send(self, message: Any, now: float) -> bool:
        ok = super()._send(message, now)
        if ok and isinstance(message, Card):
            self.written.append(time.time())
        return ok


async def online(port: int, timeout: float = 30.0) -> None:
    """Returns once the daemon's retained status says it is online (connected)."""
    async with aiomqtt.Client("127.0.0.1", port) as client:
        await client.subscribe("shoed/B1/status", qos=1)
        async with asyncio.timeout(timeout):
            async for message in client.messages:
                with contextlib.suppress(ValueError, TypeError):
                    if json.loads(message.payload).get("online"):  # type: ignore[arg-type]
                        return


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    ignore_closed_subscriber_writer(asyncio.get_running_loop())
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-console-"))
    mqtt_port, ws_port, http_port = free_port(), free_port(), free_port()
    broker = PrivateMosquitto(port=mqtt_port, directory=tmp / "broker", extra_config=(
        f"listener {mqtt_port} 127.0.0.1\nallow_anonymous true\n"
        f"listener {ws_port} 127.0.0.1\nprotocol websockets\n"))
    (tmp / "broker").mkdir()
    broker.start()
    decks = max(1, (args.cards + args.warmup + 40) // 52 + 1)
    loop = asyncio.get_running_loop()
    shoe = WrittenShoe(decks=decks, seed=3, now=loop.time(),
                       script=Script(pace_s=args.pace, shoes=1, cut_card_from_end=20))
    pty = PtyShoe(shoe, link_path=tmp / "shoe")
    config = write_config(tmp / "shoed.toml", {
        "table": {"id": "B1", "betting_control": "none"},
        "device": {"port": str(tmp / "shoe"), "reconnect_max_s": 0.3},
        "mqtt": {"url": f"mqtt://127.0.0.1:{mqtt_port}"}, "rules": {"decks": decks},
        "state": {"dir": str(tmp / "state")}, "log": {"format": "json"},
        "console": {"ws_url": f"ws://127.0.0.1:{ws_port}"}})
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    console = subprocess.Popen([sys.executable, "-m", "shoed.cli", "console", "--config",
                                str(config), "--listen", f"127.0.0.1:{http_port}"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    daemon: subprocess.Popen[bytes] | None = None
    runner: asyncio.Task[None] | None = None
    on_mqtt: dict[int, float] = {}  # card_index -> first `card` event at a local subscriber

    async def subscribe(ready: asyncio.Event) -> None:
        async with aiomqtt.Client("127.0.0.1", mqtt_port) as client:
            await client.subscribe("shoed/B1/events", qos=1)
            ready.set()
            async for message in client.messages:
                now = time.time()
                event = json.loads(message.payload)  # type: ignore[arg-type]
                if event["type"] == "card" and event["card_index"] is not None:
                    on_mqtt.setdefault(event["card_index"], now)

    ready = asyncio.Event()
    subscriber = asyncio.create_task(subscribe(ready))
    await ready.wait()
    try:
        for _ in range(200):
            if answers("127.0.0.1", http_port):
                break
            await asyncio.sleep(0.05)
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=args.chromium)
            page = await browser.new_page(viewport={"width": 1920, "height": 1080})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.goto(f"http://127.0.0.1:{http_port}/")
            await page.fill("input[name=username]", "bench")
            await page.click("[data-testid=login-submit]")
            await page.wait_for_selector("#connection[data-state=connected]", state="attached")
            await page.evaluate(OBSERVER)
            # Idle: the page open, no daemon, nothing on the table's topics.
            before = cpu_seconds(console.pid)
            await asyncio.sleep(args.idle)
            idle_cpu = (cpu_seconds(console.pid) - before) / args.idle
            daemon = subprocess.Popen([sys.executable, "-m", "shoed.cli", "run", "--config",
                                       str(config)], env=env,
                                      stdout=open(tmp / "shoed.log", "wb"),  # noqa: SIM115
                                      stderr=subprocess.STDOUT)
            # The shoe is plugged in once the daemon is online, and cards are measured from
            # a second after the first card event: cards dealt while the daemon still
            # starts or opens the line wait for it, and measured the start, not the page
            # (the earlier figures' p99 of ~690 ms was cards 6-19 of that backlog).
            await online(mqtt_port)
            pty.plug()
            runner = asyncio.create_task(pty.run())
            started = time.monotonic()
            cpu_dealing = cpu_seconds(console.pid)
            deadline = started + args.cards * max(args.pace, 0.01) * 4 + 120
            while not on_mqtt and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            settled = time.time() + 1.0
            while time.monotonic() < deadline and sum(
                    t > settled for t in shoe.written) < args.cards + args.warmup:
                await asyncio.sleep(0.1)
            # Wait (up to 15 s) until the page has shown every card written.
            written = len(shoe.written)
            for _ in range(150):
                shown = await page.evaluate("() => Object.keys(window.__seen).length")
                if shown >= written:
                    break
                await asyncio.sleep(0.1)
            dealing_s = time.monotonic() - started
            dealing_cpu = (cpu_seconds(console.pid) - cpu_dealing) / dealing_s
            seen: dict[str, float] = await page.evaluate("() => window.__seen")
            await browser.close()
        # The first cards of a run wait for the daemon to open the shoe: not measured.
        first = next((i for i, t in enumerate(shoe.written) if t > settled),
                     len(shoe.written)) + args.warmup
        wanted = range(first, min(first + args.cards, len(shoe.written)))
        samples = [(seen[str(i + 1)] / 1000 - shoe.written[i]) * 1000 for i in wanted
                   if str(i + 1) in seen]
        missing = len(wanted) - len(samples)
        to_event = [(on_mqtt[i + 1] - shoe.written[i]) * 1000 for i in wanted if i + 1 in on_mqtt]
        return {"cards_written": len(shoe.written), "cards_measured": len(samples),
                "cards_not_seen": missing,
                "card_to_page_ms": {"p50": round(statistics.median(samples), 2),
                                    "p99": round(pct(samples, 0.99), 2),
                                    "max": round(max(samples), 2)} if samples else None,
                "card_to_event_ms": {"p50": round(statistics.median(to_event), 2),
                                     "p99": round(pct(to_event, 0.99), 2)} if to_event else None,
                "console_idle_cpu_percent": round(idle_cpu * 100, 3),
                "console_cpu_percent_while_dealing": round(dealing_cpu * 100, 3),
                "console_rss_kb": rss_kb(console.pid), "idle_s": args.idle,
                "pace_s": args.pace, "page_errors": errors[:5]}
    finally:
        subscriber.cancel()
        if runner is not None:
            runner.cancel()
        for proc in (daemon, console):
            if proc is not None:
                stop(proc)
        pty.unplug()
        broker.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", type=int, default=500)
    parser.add_argument("--pace", type=float, default=0.05, help="seconds between pulls")
    parser.add_argument("--idle", type=float, default=30.0, help="idle window, seconds")
    parser.add_argument("--warmup", type=int, default=5, help="first cards not measured")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=2))

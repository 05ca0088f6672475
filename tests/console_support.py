"""Helpers for the console's browser tests: Debian's chromium driven by Playwright.

Playwright launches the system chromium (`executable_path`); it never downloads a browser.
Without chromium or Playwright the browser tests skip, naming what to run
(scripts/bootstrap-browser); under scripts/test (SHOED_REQUIRE_BROWSER=1) they fail.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
from collections.abc import AsyncIterator
from typing import Any

import pytest

from shoed.config import Settings
from shoed.console import start_console

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def need_browser() -> None:
    missing = []
    if not pathlib.Path(CHROMIUM).exists():
        missing.append("chromium (apt-get install chromium)")
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install -e '.[browser]')")
    if missing:
        text = f"needs {' and '.join(missing)}: run scripts/bootstrap-browser"
        if os.environ.get("SHOED_REQUIRE_BROWSER"):
            pytest.fail(text)
        pytest.skip(text)


def console_settings(tmp_path: pathlib.Path, ws_url: str, table: str = "T9",
                     **console: Any) -> Settings:
    data = {"table": {"id": table}, "state": {"dir": str(tmp_path / "console-state")},
            "console": {"ws_url": ws_url, "whoami_timeout_s": 0.7, **console}}
    return Settings.model_validate(data)


class Browser:
    """One chromium; `page()` opens a signed-in console page in its own context."""

    def __init__(self, browser: Any, url: str) -> None:
        self.browser = browser
        self.url = url
        self.errors: list[str] = []

    async def page(self, username: str = "pit1", password: str = "", query: str = "",
                   width: int = 1920, height: int = 1080) -> Any:
        context = await self.browser.new_context(viewport={"width": width, "height": height})
        page = await context.new_page()
        page.on("pageerror", lambda error: self.errors.append(f"{username}: {error}"))
        await page.goto(self.url + query)
        await page.fill("input[name=username]", username)
        await page.fill("input[name=password]", password)
        await page.click("[data-testid=login-submit]")
        await page.wait_for_selector("#connection[data-state=connected]", state="attached",
                                     timeout=10_000)
        return page


@contextlib.asynccontextmanager
async def console_browser(settings: Settings, tables: list[str] | None = None
                          ) -> AsyncIterator[Browser]:
    from playwright.async_api import async_playwright

    console = await start_console(settings, "127.0.0.1:0", tables)
    try:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM)
            try:
                b = Browser(browser, console.url)
                yield b
                assert not b.errors, f"errors in the page: {b.errors}"
            finally:
                await browser.close()
    finally:
        await console.close()


# Installed in the page by a test: a snapshot of the hand each time a result shows (in the
# same turn as the page draws it), kept by hand number, so a test can read hand N's even
# after the next hand began.
SNAPSHOT_OBSERVER = """() => {
  window.__snaps = {};
  const take = () => {
    const result = document.querySelector('[data-testid=result][data-state=result]');
    if (!result || !result.dataset.hand || window.__snaps[result.dataset.hand]) return;
    const cards = [...document.querySelectorAll('[data-testid=hand] [data-testid=card]')]
      .map(c => ({position: c.dataset.position || null, card: c.dataset.card,
                  manual: c.classList.contains('manual')}));
    const payouts = Object.fromEntries([...result.querySelectorAll('[data-testid=payout]')]
      .map(p => [p.dataset.bet, Number(p.dataset.value)]));
    const flags = Object.fromEntries([...result.querySelectorAll('[data-flag]')]
      .map(f => [f.dataset.flag, f.dataset.on === 'true']));
    window.__snaps[result.dataset.hand] = {
      hand: Number(result.dataset.hand), winner: result.dataset.winner, cards, payouts,
      flags, text: result.innerText,
      player_total: document.querySelector('[data-testid=player-total]').innerText,
      banker_total: document.querySelector('[data-testid=banker-total]').innerText};
  };
  new MutationObserver(take).observe(document.body,
    {childList: true, subtree: true, attributes: true});
  take();
}"""

# Waits for the snapshot of hand `hand` (see SNAPSHOT_OBSERVER).
SNAPSHOT_RESULT = "(hand) => window.__snaps && window.__snaps[hand]"

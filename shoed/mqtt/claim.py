"""One daemon per root: before it connects under its own client id, a daemon looks at
the retained `{root}/status` through a probe connection (another client id, no will, so
nobody is kicked off). Another live daemon's status there (online, another `run_id`,
fresh, online before us) means the root is taken: this daemon does not publish under it,
backs off, says so, and keeps serving and journalling the shoe."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import aiomqtt

from shoed.errors import BrokerError

PROBE_WAIT_S = 0.3  # a retained message comes right after the SUBACK, or there is none
LIVE_S = 120.0  # a live daemon republishes its status every 30 s


class RootTaken(BrokerError):
    """Another live daemon publishes under this root."""

    def __init__(self, root: str, ours: str, theirs: dict[str, Any]) -> None:
        self.theirs = theirs
        self.other_run_id = str(theirs.get("run_id"))
        super().__init__(f"another daemon (run_id {self.other_run_id}) is live on {root}; "
                         f"this one (run_id {ours}) does not publish there")


async def check_root(args: dict[str, Any], root: str, run_id: str,
                     online_since: float | None) -> None:
    """Raise RootTaken when another live daemon holds `root`."""
    # A clean, short-lived session: the daemon's own persistent one stays untouched.
    probe_args = {k: v for k, v in args.items()
                  if k not in ("will", "clean_start", "clean_session", "properties",
                               "queue_type")}
    probe_args["identifier"] = f"{args['identifier']}-probe-{run_id}"
    body: dict[str, Any] = {}
    async with aiomqtt.Client(**probe_args) as probe:
        await probe.subscribe(f"{root}/status", qos=1)
        reader = asyncio.ensure_future(anext(aiter(probe.messages)))
        try:
            done, _ = await asyncio.wait((reader,), timeout=PROBE_WAIT_S)
        finally:
            reader.cancel()
        if reader in done and not reader.cancelled() and reader.exception() is None:
            with contextlib.suppress(ValueError, TypeError):
                body = dict(json.loads(reader.result().payload))
    other = body.get("run_id")
    if not body.get("online") or other in (None, run_id):
        return
    fresh = time.time() - float(body.get("ts") or 0) < LIVE_S
    first = online_since is None or float(body.get("online_since") or 0) <= online_since
    if fresh and first:
        raise RootTaken(root, run_id, body)

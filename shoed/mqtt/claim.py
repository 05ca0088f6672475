"""One daemon per root: before it connects under its own client id, a daemon looks at
the retained `{root}/status` through a probe connection (another client id, no will, so
nobody is kicked off). Another live daemon's status there (online, another `run_id`,
fresh, online before us) means the root is taken: this daemon does not publish under it,
backs off, says so, and keeps serving and journalling the shoe.

The episode is audited in the daemon's own stream (:class:`RootClaim`): the alarm
`table_id_conflict` is raised when the conflict is first seen (journalled at once,
published once this daemon holds the root) and cleared when it is alone again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from typing import Any

import aiomqtt

from shoed.core.engine import CONFLICT_KEY
from shoed.core.inputs import RootConflict
from shoed.device.inputs import stamp
from shoed.errors import BrokerError
from shoed.store.recorder import Recorder

PROBE_WAIT_S = 0.3  # a retained message comes right after the SUBACK, or there is none
LIVE_S = 120.0  # a live daemon republishes its status every 30 s


class RootTaken(BrokerError):
    """Another live daemon publishes under this root."""

    def __init__(self, root: str, ours: str, theirs: dict[str, Any]) -> None:
        self.theirs = theirs
        self.other_run_id = str(theirs.get("run_id"))
        super().__init__(f"another daemon (run_id {self.other_run_id}) is live on {root}; "
                         f"this one (run_id {ours}) does not publish there")


#: MQTT 5 DISCONNECT reason "Session taken over": another client connected with our id.
SESSION_TAKEN_OVER = 0x8E
# A broker that closes a connection taken over without saying why: this many closes
# within this window, each of a connection younger than SHORT_CONNECTION_S, mean a
# session taken over (a reconnect storm of two clients with one client id).
TAKEOVER_DROPS = 3
TAKEOVER_WINDOW_S = 30.0
SHORT_CONNECTION_S = 10.0


class SessionTakenOver(RootTaken):
    """The broker handed this daemon's MQTT session to another client with the same
    client id: a second daemon with this table id, on this root or another, or a foreign
    client. Seen from the broker's MQTT 5 DISCONNECT 0x8E (Mosquitto 2.0.12 and later,
    EMQX, HiveMQ), or, from a broker that just closes the connection (Mosquitto 2.0.11,
    MQTT 3.1.1), as the connection closed TAKEOVER_DROPS times within TAKEOVER_WINDOW_S,
    each soon after it was made. The other's run_id is not known from the broker; when
    it is a daemon on this root, the next look at the root names it."""

    def __init__(self, root: str, ours: str, client_id: str, evidence: str) -> None:
        BrokerError.__init__(
            self, f"the broker handed this daemon's MQTT session (client id {client_id}) "
                  f"to another client ({evidence}): another daemon with this table id or "
                  f"client id (run_id unknown); this one (run_id {ours}) does not publish "
                  f"under {root} for now")
        self.evidence = evidence
        self.theirs = {}
        self.other_run_id = f"unknown (another client took client id {client_id})"
        self.client_id = client_id


def side_connection_args(args: dict[str, Any], name: str) -> dict[str, Any]:
    """The daemon's connection arguments for a connection beside it: the same broker and
    login, client id `<client_id>-<name>`, a clean short-lived session and no will (the
    daemon's own persistent session stays untouched, nobody is kicked off)."""
    side = {k: v for k, v in args.items()
            if k not in ("will", "clean_start", "clean_session", "properties", "queue_type")}
    side["identifier"] = f"{args['identifier']}-{name}"
    return side


async def check_root(args: dict[str, Any], root: str, run_id: str,
                     online_since: float | None, instance: str | None = None) -> None:
    """Raise RootTaken when another live daemon holds `root`. A status of this journal's
    own `instance` is this daemon's previous run (the journal's lock admits one daemon),
    e.g. one whose offline status never reached the broker: not a conflict."""
    probe_args = side_connection_args(args, f"probe-{run_id}")
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
    if instance is not None and body.get("instance") == instance:
        return
    fresh = time.time() - _seconds(body.get("ts")) < LIVE_S
    first = online_since is None or _seconds(body.get("online_since")) <= online_since
    if fresh and first:
        raise RootTaken(root, run_id, body)


def _seconds(value: Any) -> float:
    """A time in a retained status, or 0 (long ago) when it is not a finite number: a
    status nobody can read is nobody's claim (anyone may publish a retained message
    there, and the daemon must start all the same)."""
    if isinstance(value, bool):
        return 0.0
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return seconds if math.isfinite(seconds) else 0.0


class TakeoverWatch:
    """Was a connection that ended taken over by another client with our client id? The
    broker says so (MQTT 5), or its closes say it (a reconnect storm, MQTT 3.1.1)."""

    def __init__(self) -> None:
        self.connected_at: float | None = None  # loop time the connection was made
        self._short_drops: list[float] = []  # loop times of short connections' ends

    def evidence(self, disconnect_reason: Any, now: float) -> str | None:
        """Why the connection that ended at `now` was taken over, or None."""
        if getattr(disconnect_reason, "value", None) == SESSION_TAKEN_OVER:
            return "the broker said so: MQTT 5 DISCONNECT 0x8E, session taken over"
        if self.connected_at is None or now - self.connected_at >= SHORT_CONNECTION_S:
            return None
        self._short_drops = [t for t in self._short_drops if now - t < TAKEOVER_WINDOW_S]
        self._short_drops.append(now)
        if len(self._short_drops) < TAKEOVER_DROPS:
            return None
        return (f"the broker closed the connection {len(self._short_drops)} times within "
                f"{TAKEOVER_WINDOW_S:g} s, each less than {SHORT_CONNECTION_S:g} s after "
                "it was made")


class RootClaim:
    """The `table_id_conflict` alarm's raise and clear, committed through the recorder.

    :meth:`taken` when a look at the root found another live daemon, :meth:`alone` when a
    look found none. The engine's state says whether the alarm is up (also after a
    restart mid-conflict), so a conflict seen again every 10 s journals nothing more.
    When the journal cannot be written the input is not committed: the next look tries
    again (the raise), or the next connection (the clear)."""

    def __init__(self, recorder: Recorder, root: str, run_id: str, log: Any) -> None:
        self.recorder = recorder
        self.root = root
        self.run_id = run_id
        self.log = log

    @property
    def raised(self) -> bool:
        return any(alarm.key == CONFLICT_KEY for alarm in self.recorder.state.alarms)

    def taken(self, error: RootTaken) -> None:
        if not self.raised:
            self._commit(RootConflict(
                **stamp(self.recorder.uptime), active=True, other_run_id=error.other_run_id,
                message=f"this daemon (run_id {self.run_id}) does not publish under "
                        f"{self.root}; it serves and journals the shoe"))

    def alone(self) -> None:
        if self.raised:
            self._commit(RootConflict(
                **stamp(self.recorder.uptime), active=False,
                message=f"this daemon (run_id {self.run_id}) is alone on {self.root} again"))

    def _commit(self, conflict: RootConflict) -> None:
        if self.recorder.commit([conflict]) is None:
            self.log.warning("table_id_conflict_not_journalled", active=conflict.active,
                             error=self.recorder.status.storage_error,
                             action="tried again at the next look at the root")

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
from collections.abc import Callable
from typing import Any, Literal

import aiomqtt

from shoed.core.engine import CONFLICT_KEY
from shoed.core.inputs import RootConflict
from shoed.device.inputs import stamp
from shoed.errors import BrokerError
from shoed.store.recorder import Recorder

PROBE_WAIT_S = 0.3  # a retained message comes right after the SUBACK, or there is none
# A live daemon republishes its status at least every 30 s (RETAINED_EVERY_S), each with a
# new `ts`: one whose `ts` this daemon has seen unchanged for LIVE_S (on its own monotonic
# clock: another machine's wall clock may be minutes off) is a dead daemon's.
LIVE_S = 120.0
# After a conflict, a root found without any status (a broker restarted without its
# retained messages) is watched this long before it is taken: the daemon that holds it
# republishes its status when it reconnects, and at least every 30 s.
CONFIRM_S = 35.0
WATCH_STEP_S = 5.0  # a watch says it is alive at least this often


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


class StatusesSeen:
    """Each other daemon's status `ts` and when this daemon first saw it (monotonic): a
    status is live until its `ts` has stood still for LIVE_S here. No wall clock of
    another machine is compared with ours (table PCs' clocks may be minutes apart)."""

    KEPT = 16

    def __init__(self) -> None:
        self._first_seen: dict[tuple[str, str], float] = {}

    def live(self, body: dict[str, Any], now: float) -> bool:
        key = (str(body.get("run_id")), repr(body.get("ts")))
        first = self._first_seen.setdefault(key, now)
        if len(self._first_seen) > self.KEPT:
            del self._first_seen[next(iter(self._first_seen))]
        return now - first < LIVE_S


async def check_root(args: dict[str, Any], root: str, run_id: str,
                     online_since: float | None, instance: str | None = None, *,
                     seen: StatusesSeen | None = None, confirm_s: float = 0.0,
                     alive: Callable[[], None] | None = None) -> None:
    """Raise RootTaken when another live daemon holds `root`. A status of this journal's
    own `instance` is this daemon's previous run (the journal's lock admits one daemon),
    e.g. one whose offline status never reached the broker: not a conflict.

    A status is live until its `ts` has stood still for LIVE_S in `seen` (kept by the
    caller across looks). `confirm_s`: when the root has no status at all, keep watching
    it this long (the caller's conflict may still be on, behind a broker that lost its
    retained messages); a status that says offline ends the watch at once."""
    seen = seen if seen is not None else StatusesSeen()
    loop = asyncio.get_running_loop()
    probe_args = side_connection_args(args, f"probe-{run_id}")
    async with aiomqtt.Client(**probe_args) as probe:
        await probe.subscribe(f"{root}/status", qos=1)
        messages = aiter(probe.messages)
        until = loop.time() + PROBE_WAIT_S
        first = True
        watching = False  # nothing was retained: the conflict's watch (confirm_s) runs
        while True:
            body = await _next_status(messages, min(until - loop.time(), WATCH_STEP_S))
            if alive is not None:
                alive()  # a long watch is progress, not a stuck connection loop
            if body is None:
                if loop.time() < until:
                    continue
                if first and confirm_s > PROBE_WAIT_S:
                    until = loop.time() + confirm_s - PROBE_WAIT_S  # nothing retained
                    first, watching = False, True
                    continue
                return  # nothing (more) came: the root is free
            first = False
            taken = _taken_by(body, run_id, online_since, instance, seen, loop.time())
            if taken:
                raise RootTaken(root, run_id, body)
            if not watching or not body.get("online") or loop.time() >= until:
                return


async def _next_status(messages: Any, timeout: float) -> dict[str, Any] | None:
    """The next `status` body within `timeout` seconds (an unreadable one as {}), or None.
    A probe connection that broke raises (it proves nothing about the root)."""
    if timeout <= 0:
        return None
    reader = asyncio.ensure_future(anext(messages))
    try:
        done, _ = await asyncio.wait((reader,), timeout=timeout)
    finally:
        reader.cancel()
    if reader not in done or reader.cancelled():
        return None
    error = reader.exception()
    if isinstance(error, (StopAsyncIteration, aiomqtt.MqttError)):
        # The broker went while the probe read (a restart): a disconnect, not "not a
        # broker" (the connect's own failures are read apart, brokers.connect_failure).
        raise BrokerError(f"the probe's connection ended while it watched the root: "
                          f"{error}") from error
    if error is not None:
        raise error
    with contextlib.suppress(ValueError, TypeError):
        return dict(json.loads(reader.result().payload))
    return {}


def _taken_by(body: dict[str, Any], run_id: str, online_since: float | None,
              instance: str | None, seen: StatusesSeen, now: float) -> bool:
    """Does this status show another live daemon that keeps the root?"""
    return status_verdict(body, run_id, online_since, instance, seen, now) == "taken"


def status_verdict(body: dict[str, Any], run_id: str, online_since: float | None,
                   instance: str | None, seen: StatusesSeen, now: float
                   ) -> Literal["taken", "later"] | None:
    """What a status on our root says: "taken" (another live daemon, online before us,
    keeps the root), "later" (another live daemon came online after us: we keep it, and
    it must learn so), None (ours, our journal's previous run, offline, stale, or not a
    daemon's). Two online at the same moment: the smaller run_id keeps the root."""
    other = body.get("run_id")
    if not body.get("online") or other in (None, run_id):
        return None
    if instance is not None and body.get("instance") == instance:
        return None
    if not _seconds(body.get("ts")):
        return None  # its time is no number: nobody's claim (anyone may write there)
    if not seen.live(body, now):
        return None
    theirs = _seconds(body.get("online_since"))
    first = online_since is None or theirs < online_since or (
        theirs == online_since and str(other) < run_id)
    return "taken" if first else "later"


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

    def attempt_failed(self) -> None:
        """A connection attempt failed (refused, unreachable, no CONNACK): the broker
        was away, which a takeover never causes; the short connections before it were
        a broker restarting or a network flapping, not another client (outside review:
        four broker restarts raised `table_id_conflict`)."""
        self._short_drops.clear()

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

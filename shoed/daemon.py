"""`shoed run`: builds the rooms, runs their supervised tasks, stops them.

The order of things for every frame from the shoe (spec section 3, durability rule):
decode -> engine input(s) -> one fdatasynced entry of the record log (inputs, dedup
state; the next journal transaction copies it into SQLite) -> ACK -> engine -> events
to the publisher -> PUBACK -> their outbox rows (fsynced then, where no card waits; a
crash before them regenerates them from the record, same seq and event_id). For every
command: validate -> one fsynced transaction (input, events, answer) -> answer. An
event counts as delivered only after the broker's PUBACK, so a dead broker, a kill -9
or a noisy line loses nothing and applies nothing twice (docs/decisions.md 28).
docs/architecture.md draws the rooms and a card's way.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from shoed import logs
from shoed.aio import cancel_and_wait, loop_name
from shoed.config import Settings, load_manifest
from shoed.core.config import EngineConfig
from shoed.core.engine import build_models
from shoed.desk import CommandDesk
from shoed.device.session import TIMER_MAX_S, DeviceSession
from shoed.device.transports import Transport
from shoed.errors import StorageError, SupervisionFailed
from shoed.sdnotify import Notifier
from shoed.status import TableStatus
from shoed.store.outbox import Outbox
from shoed.store.recorder import Recorder
from shoed.supervisor import Supervisor

if TYPE_CHECKING:
    from shoed.mqtt.service import MqttService

HOUSEKEEPING_S = 10.0  # status line, WAL checkpoint, storage retry, prune (at most)
DRAIN_ON_STOP_S = 0.3  # stopping: how long the publisher may drain a backlog
# The device loop may go this long (plus twice its longest back-off) between two steps
# outside serving before the watchdog stops: an open (USB, serial) takes well under 1 s.
DEVICE_STEP_SLACK_S = 30.0


class Daemon:
    """One table's daemon. `transport_factory` lets tests hand in another transport."""

    def __init__(self, settings: Settings, *,
                 transport_factory: Callable[[], Transport] | None = None,
                 notifier: Notifier | None = None) -> None:
        self.settings = settings
        self.log = logs.get("shoed").bind(table=settings.table.id)
        self.notifier = notifier or Notifier()
        self.status = TableStatus(settings.table.id)
        self.supervisor = Supervisor(self.status, self.log)
        self._transport_factory = transport_factory
        self._stop = asyncio.Event()
        self._stopped = False  # shutdown() ran
        self._check: asyncio.Task[None] | None = None  # the integrity check after READY
        self._last_line = ""
        self._mqtt: MqttService | None = None  # built after READY (build_mqtt)
        rules = settings.rules
        self.engine_config = EngineConfig(
            table_id=settings.table.id, decks=rules.decks, table_type=rules.table_type,
            unnecessary_cards=rules.unnecessary_cards,
            betting_control=settings.table.betting_control, paytable=rules.paytable(),
            integrity=settings.integrity.thresholds(),
            on_unshuffled=settings.integrity.on_unshuffled,
            roads_rows=settings.roads.rows, roads_tail_mode=settings.roads.tail_mode)
        self.manifest = (load_manifest(settings.cards.manifest)
                         if settings.cards.manifest else None)

    def build(self) -> None:
        """Open the journal, rebuild the engine, and wire the rooms together."""
        self.build_table()
        self.build_mqtt()

    def build_table(self) -> None:
        """The rooms READY stands for: the journal restored, the device session, the desk."""
        self.recorder = Recorder.open(self.settings, self.engine_config, self.status,
                                      self.log)
        self.outbox: Outbox = self.recorder.outbox
        self.status.outbox_depth = self.outbox.depth
        self.status.instance = self.recorder.state.instance_id
        self.session = DeviceSession(self.settings, self.recorder, self.status, self.log,
                                     transport_factory=self._transport_factory,
                                     manifest=self.manifest)
        self.desk = CommandDesk(self.recorder, self.log, self.settings)
        supervisor = self.supervisor
        self.session.on_timer_failed = self._timer_failed
        self.session.on_timer_ok = lambda: supervisor.recovered("timer")
        supervisor.on_give_up = self.request_stop
        supervisor.check("timer", self._timer_alive)
        supervisor.check("mqtt", self._mqtt_alive)
        supervisor.check("device", self._device_alive)
        self.status.on_change(self.notify_status)

    @property
    def mqtt(self) -> MqttService:
        """The MQTT service (built by `build`, or by `run` right after READY)."""
        assert self._mqtt is not None, "build_mqtt() first"
        return self._mqtt

    def build_mqtt(self) -> None:
        """The MQTT service. Built after READY in `run` (its import, aiomqtt and paho
        with it, is ~60 ms of a start that READY need not wait for)."""
        from shoed.mqtt.publisher import IDLE_WAKE_S
        from shoed.mqtt.service import BACKOFF_S, CONNECT_TIMEOUT_S, MqttService

        # The longest the MQTT loop may show no sign of life before the watchdog stops.
        self._mqtt_quiet_limit_s = 3 * (self.settings.mqtt.publish_timeout_s + IDLE_WAKE_S
                                        + CONNECT_TIMEOUT_S) + BACKOFF_S[1]
        engine = self.recorder.engine
        self._mqtt = MqttService(self.settings, self.outbox, self.status, self.desk,
                                self.recorder.engine.public_state,
                                {"status": self.status.payload,
                                 "device": self.session.device_payload}, self.log,
                                roads=(lambda: engine.roads_seq, engine.roads_message),
                                state_seq=lambda: engine.seq)

    def _timer_failed(self, error: BaseException) -> None:
        self.supervisor.failed("timer", error)

    def _timer_alive(self) -> bool:
        fired = self.session.timer_fired
        return fired is None or time.monotonic() - fired < 5 * TIMER_MAX_S

    def _device_alive(self) -> bool:
        """The device loop serves a transport, or tries to open one (its back-off is at
        most reconnect_max_s): stuck in an open or a close, the watchdog stops."""
        return not self.session.loop_stuck(
            DEVICE_STEP_SLACK_S + 2 * self.settings.device.reconnect_max_s)

    def _mqtt_alive(self) -> bool:
        """The connection loop tries, or the publisher looks at the outbox, regularly."""
        if self._mqtt is None:
            return True  # not built yet: the moments after READY
        progress = self._mqtt.progress
        return progress is None or \
            asyncio.get_running_loop().time() - progress < self._mqtt_quiet_limit_s

    def notify_status(self) -> None:
        line = self.status.line()
        if line != self._last_line:  # systemd needs changes, not repetitions
            self._last_line = line
            self.notifier.notify(STATUS=line)

    async def housekeeping(self) -> None:
        interval = self.notifier.watchdog_interval_s
        while True:
            await asyncio.sleep(min(interval or HOUSEKEEPING_S, HOUSEKEEPING_S))
            if interval and self.supervisor.healthy():
                self.notifier.notify(WATCHDOG=1)  # from the loop, only while all is well
            self.notify_status()
            retention = self.settings.state.retention_days
            answers_s = self.settings.commands.request_id_memory_h * 3600
            if self.recorder.housekeeping(retention, answers_s):
                await self.recorder.prune(retention, answers_s)

    def request_stop(self) -> None:
        self._stop.set()

    def _hangup(self) -> None:
        self.log.warning("sighup_ignored", action="shoed reads its configuration only at "
                         "start: restart it (systemctl restart shoed) to apply a change")

    async def run(self) -> None:
        """Serve until a stop is requested (SIGTERM, or the supervisor gave up). However
        it ends (a failure after READY, a cancel from Ctrl-C in the restore), the tasks
        are stopped before it returns: left running, the loop's own clean-up would cancel
        them, the supervisor would take that for a stray cancel and start them again,
        and the process would hang forever with the watchdog fed (issue 13 section 1)."""
        try:
            self.build_table()
        except StorageError:
            raise  # the journal cannot be opened: `cannot_start`, said by the caller
        except Exception as error:
            self.log.error("daemon_failed", error=repr(error), exc_info=error,
                           action="not started (exit 1)")
            raise
        try:
            await self._serve()
        except Exception as error:
            self.log.error("daemon_failed", error=repr(error), exc_info=error,
                           action="stopping (exit 1)")
            raise
        finally:
            await self.shutdown()
        if self.supervisor.gave_up is not None:
            raise self.supervisor.gave_up

    async def _serve(self) -> None:
        # What exists now (modules, schemas, the restored state) lives as long as the
        # process: keep it out of the collector's full passes, which would otherwise walk
        # it every few thousand allocations and stall a card by milliseconds.
        gc.collect()
        gc.freeze()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
        with contextlib.suppress(NotImplementedError, RuntimeError):
            # By default SIGHUP ends a process at once, which systemd counts as a clean
            # exit (no restart): the table would be left without a daemon.
            loop.add_signal_handler(signal.SIGHUP, self._hangup)
        self.session.arm_timer()
        self.supervisor.start("device", self.session.run)
        self.supervisor.start("housekeeping", self.housekeeping)
        self.notifier.notify(READY=1, STATUS="journal restored; device transport started")
        self.log.info("ready", root=self.settings.topic_root, run_id=self.status.run_id,
                      instance=self.recorder.state.instance_id, event_loop=loop_name())
        self.build_mqtt()
        build_models()  # the validators deferred at import, before the first card needs them
        gc.freeze()  # what these made lives as long, too (no second full collection)
        self.supervisor.start("mqtt", self.mqtt.run)
        # One full integrity check after READY; it ends by itself (not a supervised loop).
        check = asyncio.create_task(self.recorder.integrity_check(), name="integrity_check")
        check.add_done_callback(self._check_done)
        self._check = check
        await self._stop.wait()

    def _check_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (error := task.exception()) is not None:
            self.log.error("journal_check_failed", error=repr(error), exc_info=error)

    async def shutdown(self) -> None:
        """Stop taking cards, flush what the broker takes (briefly), say offline, stop
        the tasks, close the link, snapshot. Unpublished events stay in the journal."""
        if self._stopped:
            return
        self._stopped = True
        self.notifier.notify(STOPPING=1, STATUS="stopping")
        self.log.info("stopping", outbox=self.outbox.depth())
        self.session.stop_accepting()
        self.session.stop_timer()
        if self._mqtt is not None:
            await self._mqtt.farewell(DRAIN_ON_STOP_S)
        await self.supervisor.stop(timeout=0.3)
        if self._check is not None:  # a check still running writes nothing after close
            await cancel_and_wait((self._check,), timeout=0.3)
        self.recorder.close()
        self.log.info("stopped")


__all__ = ["Daemon", "SupervisionFailed"]

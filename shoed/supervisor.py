"""The daemon's long-lived tasks, named and supervised.

A task that ends or fails while no stop was requested (a CancelledError nobody asked
for included) is logged at error level with its exception, shown in the status, and
started again after a back-off. A task that fails again and again (more than
GIVE_UP_AFTER times without HEALTHY_S of running in between) cannot be kept running:
the supervisor then asks the daemon to stop, and it exits non-zero (systemd restarts it).

`healthy()` is what the watchdog asks before every ping: every task running, none back
from a failure for less than SETTLE_S, and every progress check true (a loop that is
alive but no longer gets anywhere stops the pings too).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine
from typing import Any

from shoed.aio import cancel_and_wait, clear_stray_cancel, task_names
from shoed.errors import SupervisionFailed
from shoed.status import TableStatus

BACKOFF_S = (0.5, 8.0)  # first and longest wait before a restart
GIVE_UP_AFTER = 5  # failures in a row before the daemon exits non-zero
HEALTHY_S = 60.0  # running this long resets the count of failures in a row
SETTLE_S = 2.0  # a restarted task counts as healthy once it ran this long

Factory = Callable[[], Coroutine[Any, Any, None]]


class Supervisor:
    def __init__(self, status: TableStatus, log: Any) -> None:
        self.status = status
        self.log = log
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.checks: dict[str, Callable[[], bool]] = {}
        self.failures: dict[str, int] = {}
        self.restarts = 0
        self.stopping = False
        self.gave_up: SupervisionFailed | None = None
        self.on_give_up: Callable[[], None] = lambda: None
        self._down_until: dict[str, float] = {}
        self._healthy_since: dict[str, float] = {}

    def start(self, name: str, factory: Factory) -> None:
        self.tasks[name] = asyncio.create_task(self._keep(name, factory), name=name)

    def check(self, name: str, predicate: Callable[[], bool]) -> None:
        """`predicate()` must hold for the daemon to count as healthy."""
        self.checks[name] = predicate

    def healthy(self) -> bool:
        now = asyncio.get_running_loop().time()
        if self.gave_up is not None or any(task.done() for task in self.tasks.values()):
            return False
        if any(now < until for until in self._down_until.values()):
            return False
        return all(predicate() for predicate in self.checks.values())

    def failed(self, name: str, error: BaseException) -> float | None:
        """Count a failure of `name`: the back-off before it runs again, or None when it
        failed too often (the daemon then stops, non-zero)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if now - self._healthy_since.get(name, now) >= HEALTHY_S:
            self.failures[name] = 0
        count = self.failures[name] = self.failures.get(name, 0) + 1
        self._down_until[name] = math.inf
        self.status.task_down(name, repr(error))
        if count > GIVE_UP_AFTER:
            self.gave_up = SupervisionFailed(
                f"task {name} failed {count} times in a row, the last time with {error!r}")
            self.log.error("task_given_up", task=name, failures=count, error=repr(error),
                           action="the daemon stops (exit 1)")
            self.on_give_up()
            return None
        delay = float(min(BACKOFF_S[0] * 2 ** (count - 1), BACKOFF_S[1]))
        self.log.error("task_failed", task=name, error=repr(error), failures=count,
                       restart_in_s=delay, exc_info=error)
        return delay

    def recovered(self, name: str) -> None:
        """`name` runs again (a task restarted, a timer that fired)."""
        now = asyncio.get_running_loop().time()
        if self._down_until.get(name) == math.inf:
            self._down_until[name] = now + SETTLE_S
            self._healthy_since[name] = now
            self.status.task_up(name)
            self.restarts += 1
            self.log.warning("task_restarted", task=name)

    async def _keep(self, name: str, factory: Factory) -> None:
        loop = asyncio.get_running_loop()
        self._healthy_since[name] = loop.time()
        while True:
            error: BaseException
            try:
                await factory()
                error = SupervisionFailed(f"task {name} ended by itself")
            except asyncio.CancelledError:
                if self.stopping:
                    raise
                error = SupervisionFailed(f"task {name} was cancelled though no stop was "
                                          f"requested ({clear_stray_cancel()} stray cancels)")
            except Exception as failure:
                error = failure
            delay = self.failed(name, error)
            if delay is None:
                return
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:
                if self.stopping:
                    raise
                # A stray cancel during the back-off: restarted all the same, at once
                # (outside review: it ended the supervised task for good, unlogged).
                self.log.error("task_cancelled_unasked", task=name,
                               stray_cancels=clear_stray_cancel(), action="restarted now")
            self.recovered(name)

    async def stop(self, timeout: float) -> None:
        """Cancel every task; wait at most `timeout` for them to end."""
        self.stopping = True
        stuck = await cancel_and_wait(self.tasks.values(), timeout=timeout,
                                      on_stuck=self._stuck)
        if stuck:
            self.log.warning("tasks_not_stopped", tasks=task_names(stuck), timeout_s=timeout)

    def _stuck(self, tasks: set[asyncio.Future[Any]]) -> None:
        self.log.warning("cancel_repeated", tasks=task_names(tasks))

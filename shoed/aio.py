"""asyncio helpers shared by the daemon and the simulator.

None of them relies on ``asyncio.timeout``, ``asyncio.wait_for`` or a TaskGroup's
cancellation of its parent: their cancellation semantics differ between 3.11 patch
releases. On Debian 12's 3.11.2 a task whose cancel count was left above zero (by a
TaskGroup whose child failed) sees every later ``asyncio.timeout`` that expires raise
CancelledError instead of TimeoutError (fixed in 3.11.3), and a long-lived loop ended
*cancelled* although nobody had asked it to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Literal

RECANCEL_S = 0.2  # a cancelled task still running after this is cancelled again


class TimedWait:
    """One waiter at a time on a future, woken by :meth:`wake` or after its timeout,
    without a timer of its own per wait: one timer is kept across waits and armed again
    only when it would fire too early for the wait in progress (aioquic's asyncio
    protocol keeps its connection's one timer so). The live publisher waits twice a
    card, each with a timeout of seconds that almost never expires: a ``call_later``
    each, its handle, its place in the loop's heap and its cancel, was a few per cent of
    the daemon's CPU per card (docs/performance.md, "Tenth pass")."""

    def __init__(self) -> None:
        self._waiter: asyncio.Future[bool] | None = None
        self._deadline = 0.0  # loop time the wait in progress ends at, at the latest
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = 0.0  # loop time the timer fires at
        self._loop: asyncio.AbstractEventLoop | None = None  # the timer's

    def wake(self) -> None:
        """End the wait in progress (if any): it returns True."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    async def wait(self, timeout: float) -> bool:
        """Until :meth:`wake`, at most `timeout` seconds; True if woken."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        deadline = self._deadline = loop.time() + max(timeout, 0.0)
        if self._timer is None or self._loop is not loop or self._armed_for > deadline:
            if self._timer is not None:
                self._timer.cancel()
            self._arm(loop, deadline)
        try:
            woken: bool = await waiter
        finally:
            self._waiter = None
        return woken

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self._loop, self._armed_for = loop, when
        self._timer = loop.call_at(when, self._expire)

    def _expire(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # nobody waits: the next wait arms it again
        if self._deadline <= self._armed_for:
            waiter.set_result(False)
        else:  # armed for an earlier wait: on to this one's end
            self._arm(waiter.get_loop(), self._deadline)


class Wakeup:
    """A flag a coroutine can wait on with a timeout (a :class:`TimedWait`), no cancel
    counting. One waiter at a time."""

    def __init__(self) -> None:
        self._set = False
        self._wait = TimedWait()

    def set(self) -> None:
        self._set = True
        self._wait.wake()

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    async def wait(self, timeout: float) -> bool:
        """Wait until set, at most `timeout` seconds; True if it was set."""
        if self._set:
            return True
        await self._wait.wait(timeout)
        return self._set


async def cancel_and_wait(
        tasks: Iterable[asyncio.Future[Any]], timeout: float | None = None,
        on_stuck: Callable[[set[asyncio.Future[Any]]], None] | None = None,
) -> set[asyncio.Future[Any]]:
    """Cancel `tasks` and wait until they have ended (at most `timeout` seconds, when
    given); returns those still running.

    A task still running RECANCEL_S after its cancel is cancelled again (`on_stuck` is
    told which first): on Python 3.11 ``asyncio.wait_for`` swallows a cancellation that
    arrives as the awaited future completes, and libraries use it (aiomqtt's publish
    waits for its PUBACK with it). The task then goes back to waiting, on its message
    queue say, and a single cancel followed by an unbounded wait never returns.

    The caller cancelled meanwhile (a supervisor stopping the caller, which re-cancels
    on the same period) still waits here until the tasks have ended or `timeout` is
    over, then raises CancelledError: its tasks are not left running behind it.

    What the tasks that ended raised is retrieved (asyncio reports nothing of it); a
    caller that wants it still reads it from the task.
    """
    tasks = set(tasks)
    pending = {task for task in tasks if not task.done()}
    for task in pending:
        task.cancel()
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    interrupted: asyncio.CancelledError | None = None
    while pending:
        step = RECANCEL_S if deadline is None else min(RECANCEL_S, deadline - loop.time())
        if step <= 0:
            break
        try:
            _, pending = await asyncio.wait(pending, timeout=step)
        except asyncio.CancelledError as error:
            interrupted = error  # raised once the tasks have ended (below)
            pending = {task for task in pending if not task.done()}
        if pending and (deadline is None or loop.time() < deadline):
            if on_stuck is not None:
                on_stuck(pending)
            for task in pending:
                task.cancel()
    for task in tasks - pending:
        if not task.cancelled():
            task.exception()
    if interrupted is not None:
        raise interrupted
    return pending


def task_names(tasks: Iterable[asyncio.Future[Any]]) -> list[str]:
    """The tasks' names, sorted (for a log line)."""
    return sorted(t.get_name() if isinstance(t, asyncio.Task) else repr(t) for t in tasks)


async def wait_set(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait for `event` at most `timeout` seconds (None: no limit); True if it is set.

    For the client library (it runs in other people's tasks) and the simulator: no
    ``asyncio.wait_for``, which on 3.11 can swallow the caller's cancellation, and no
    ``asyncio.timeout``, which on 3.11.2 misbehaves in a task with a cancel count left
    above zero. ``asyncio.wait`` neither cancels nor absorbs anything.
    """
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait((waiter,), timeout=timeout)
    finally:
        if not waiter.done():
            waiter.cancel()
    # set meanwhile, even if cleared again before this task ran on
    return event.is_set() or (waiter.done() and not waiter.cancelled())


def clear_stray_cancel() -> int:
    """Reset the current task's cancel count left by a cancellation that was handled
    (so later timeouts behave); returns how many there were."""
    task = asyncio.current_task()
    count = 0
    while task is not None and task.cancelling():
        task.uncancel()
        count += 1
    return count


def run_until_signalled(main: Coroutine[Any, Any, int]) -> int:
    """Run `main` on a new loop until it returns; SIGTERM or SIGINT cancels it (exit 0).
    Other exceptions propagate to the caller, after the loop is closed. The loop is
    asyncio's `Runner`'s: tasks still pending at the end are cancelled and awaited and
    async generators closed first, so none is destroyed pending ("Task was destroyed
    but it is pending!")."""
    async def until_signalled() -> int:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, task.cancel)
        try:
            return await main
        except asyncio.CancelledError:
            return 0

    with asyncio.Runner() as runner:
        return runner.run(until_signalled())


def loop_factory(kind: Literal["asyncio", "uvloop"]
                 ) -> tuple[Callable[[], asyncio.AbstractEventLoop] | None, str]:
    """The event loop `shoed run` asks for (`daemon.event_loop`, which the config has
    checked): the factory for ``asyncio.Runner`` (None: the standard library's) and what
    it is, for the log ("asyncio", "uvloop", or "asyncio (uvloop is not installed)")."""
    if kind == "asyncio":
        return None, "asyncio"
    try:
        import uvloop
    except ImportError:
        return None, "asyncio (uvloop is not installed)"
    return uvloop.new_event_loop, "uvloop"


def loop_name() -> str:
    """What the running loop is: "uvloop" or "asyncio"."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.startswith("uvloop") else "asyncio"


async def in_background_thread(fn: Callable[[], Any], name: str, idle: bool = True) -> Any:
    """`fn()` in a daemon thread of its own; with `idle`, one that the kernel runs only
    when no other thread of the machine wants the CPU (Linux's SCHED_IDLE; elsewhere, or
    where it is refused, at the normal priority). For long work the daemon starts by
    itself, such as the journal's full integrity check after READY: on the table PC's two
    cores, at the normal priority, it took a core from the cards dealt meanwhile and
    stalled some by 16-80 ms (docs/performance.md, "Thirteenth pass"). A thread of its
    own, not the loop's executor: an unprivileged thread may not leave SCHED_IDLE again,
    the executor's threads are reused, and the interpreter's exit waits for every
    executor thread (asyncio.run's shutdown_default_executor): a driver call that never
    returns in one (a USB open or close, decisions.md 225) would keep a stopped daemon
    from exiting. Returns fn's result or raises its error."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def run() -> None:
        if idle:
            with contextlib.suppress(AttributeError, OSError):  # not Linux, or refused
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        try:
            result = fn()
        except BaseException as error:  # handed to the awaiting task, never lost
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(settle, None, error)
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await done


#: The threads of the driver's calls that may never return (a hung USB open or close).
HANGING_CALLS = ("shoe-open", "shoe-close")


def exit_past_hung_device_calls(code: int, wait_s: float = 2.0) -> int:
    """`code`, once a device open or close still running in its thread has had `wait_s` to
    return. One that has not is a driver that hangs (decisions.md 225): it holds pyusb's
    lock, which pyusb's own cleanup at the interpreter's exit waits for, so the process
    would never end and a unit's stop would wait for SIGKILL. The daemon's work is done
    (the journal closed): it is said, and the process exits without that cleanup."""
    deadline = time.monotonic() + wait_s
    for thread in threading.enumerate():
        if thread.name in HANGING_CALLS:
            thread.join(max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threading.enumerate() if t.name in HANGING_CALLS and t.is_alive()]
    if not hung:
        return code
    from shoed import logs

    logs.get().error("device_call_never_returned", threads=hung,
                     action="exiting without the interpreter's cleanup")
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)

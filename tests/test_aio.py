"""shoed.aio's helpers against the cancellation Python 3.11 loses: ``asyncio.wait_for``
returns the result instead of raising when the cancel arrives as the awaited future
completes (aiomqtt's publish waits for its PUBACK that way). A task that lost its cancel
goes back to waiting; one cancel and an unbounded wait then never returns (CI saw it in
tests/test_client_gaps.py on Debian's 3.11.2)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any

import pytest
from kit import asynctest

from shoed.aio import cancel_and_wait, task_names, wait_set
from shoed.client import TableConnection


async def _swallows_once(queue: asyncio.Queue[int]) -> None:
    """What a task does after 3.11's wait_for lost its cancel: carries on waiting."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(3600)
    await queue.get()


async def _publisher_like(futures: list[asyncio.Future[None]], queue: asyncio.Queue[int]
                          ) -> None:
    """aiomqtt's publish (wait_for on the PUBACK's future), then its message queue."""
    loop = asyncio.get_running_loop()
    while True:
        future = loop.create_future()
        futures.append(future)
        await asyncio.wait_for(future, 10)
        await queue.get()


@asynctest
async def test_a_swallowed_cancel_is_repeated_until_the_task_ends() -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    task = asyncio.create_task(_swallows_once(queue), name="stubborn")
    await asyncio.sleep(0)
    # The old way: one cancel, then a wait. The task is still there a second later.
    task.cancel()
    await asyncio.wait((task,), timeout=1.0)
    assert not task.done()
    told: list[list[str]] = []
    task2 = asyncio.create_task(_swallows_once(queue), name="stubborn-2")
    await asyncio.sleep(0)
    started = asyncio.get_running_loop().time()
    stuck = await cancel_and_wait((task, task2), on_stuck=lambda t: told.append(task_names(t)))
    assert stuck == set() and task.cancelled() and task2.cancelled()
    assert told == [["stubborn-2"]]  # the first had its own cancel still pending
    assert asyncio.get_running_loop().time() - started < 5.0  # ended, not hung


@asynctest
async def test_the_caller_cancelled_meanwhile_still_ends_its_tasks_then_raises() -> None:
    """A supervisor stops the caller (re-cancelling it on the same period) while the
    caller waits for a task that lost its cancel: the task is still ended, then the
    caller's cancel goes on up."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    child = asyncio.create_task(_swallows_once(queue), name="child")
    await asyncio.sleep(0)

    async def caller() -> None:
        await cancel_and_wait((child,))

    outer = asyncio.create_task(caller())
    await asyncio.sleep(0.05)  # the child swallowed the first cancel; outer is waiting
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(outer, 5)
    assert child.cancelled()  # not left running behind the caller


@asynctest
async def test_wait_for_losing_the_cancel_as_the_puback_arrives_still_ends() -> None:
    futures: list[asyncio.Future[None]] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    task = asyncio.create_task(_publisher_like(futures, queue))
    await asyncio.sleep(0)
    futures[-1].set_result(None)  # the PUBACK arrives ...
    task.cancel()  # ... in the same turn as the cancel
    await asyncio.wait((task,), timeout=0.5)
    if sys.version_info < (3, 12):
        assert not task.done(), "3.11's wait_for swallowed the cancel (the bug this is for)"
    stuck = await cancel_and_wait((task,), timeout=5)
    assert not stuck and task.cancelled()


@asynctest
async def test_a_task_that_never_stops_is_returned_after_the_timeout() -> None:
    release = asyncio.Event()
    cancels = 0

    async def refuses() -> None:
        nonlocal cancels
        while not release.is_set():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancels += 1

    task = asyncio.create_task(refuses())
    await asyncio.sleep(0)
    stuck = await cancel_and_wait((task,), timeout=0.5)
    assert stuck == {task} and cancels >= 2  # cancelled again, then given up on
    release.set()
    task.cancel()
    await task


@asynctest
async def test_wait_set_times_out_returns_when_set_and_never_keeps_a_cancel() -> None:
    event = asyncio.Event()
    assert await wait_set(event, 0.05) is False
    asyncio.get_running_loop().call_later(0.05, event.set)
    assert await wait_set(event, 5) is True
    assert await wait_set(event, 0) is True  # set already: no wait at all
    flicker = asyncio.Event()

    def set_and_clear() -> None:
        flicker.set()
        flicker.clear()  # cleared before the waiter runs on: it was set all the same

    asyncio.get_running_loop().call_later(0.02, set_and_clear)
    assert await wait_set(flicker, 5) is True

    other = asyncio.Event()
    waiter = asyncio.create_task(wait_set(other, 10))
    await asyncio.sleep(0.01)
    other.set()  # set in the same turn as the cancel: the cancel still wins
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    await asyncio.sleep(0)
    assert all(t.done() for t in leftover)  # no event.wait() left behind


@asynctest
async def test_table_connection_close_ends_a_connection_that_lost_its_cancel() -> None:
    connection = TableConnection("mqtt://127.0.0.1:1", "T1")
    queue: asyncio.Queue[int] = asyncio.Queue()

    async def run() -> None:  # what aiomqtt's publish then its message loop would do
        await _swallows_once(queue)

    connection._run = run  # type: ignore[method-assign]
    await connection.start()
    await asyncio.sleep(0)
    task: Any = connection._task
    await asyncio.wait_for(connection.close(), 5)
    assert task.cancelled() and connection._task is None


def _where() -> tuple[str, int]:
    import os
    import threading
    return threading.current_thread().name, os.sched_getscheduler(0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_IDLE is Linux's")
@asynctest
async def test_background_work_runs_in_its_own_thread_at_the_idle_priority() -> None:
    import os

    from shoed.aio import in_background_thread
    name, policy = await in_background_thread(_where, "journal_check_test")
    assert (name, policy) == ("journal_check_test", os.SCHED_IDLE)
    assert _where()[1] != os.SCHED_IDLE  # the loop's own thread keeps its priority
    # the loop's executor is not lowered either (its threads are reused)
    assert (await asyncio.to_thread(_where))[1] != os.SCHED_IDLE

    def fails() -> None:
        raise ValueError("the check's own error")
    with pytest.raises(ValueError, match="the check's own error"):
        await in_background_thread(fails, "failing")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_IDLE is Linux's")
def test_the_journal_check_after_ready_runs_at_the_idle_priority(tmp_path: Any) -> None:
    import os

    from rig import make_settings

    from shoed import logs
    from shoed.daemon import Daemon
    from shoed.status import TableStatus
    from shoed.store.recorder import Recorder

    settings = make_settings(tmp_path / "state", "mqtt://127.0.0.1:1")
    recorder = Recorder.open(settings, Daemon(settings).engine_config, TableStatus("T9"),
                             logs.get("shoed"))
    seen: list[tuple[str, int]] = []
    checked = recorder.journal.integrity_check
    recorder.journal.integrity_check = lambda: (seen.append(_where()), checked())[1]  # type: ignore[method-assign]
    try:
        asyncio.run(recorder.integrity_check())
    finally:
        recorder.journal.close()
    assert seen == [("integrity_check", os.SCHED_IDLE)]


def test_run_until_signalled_cancels_what_is_left_and_closes_async_generators() -> None:
    """As `asyncio.run` does: a task still pending when `main` returns is cancelled and
    awaited (its clean-up runs; it is not destroyed pending, which asyncio reports on
    stderr), and a suspended async generator is closed, before the loop is."""
    from shoed.aio import run_until_signalled

    cleaned: list[str] = []

    async def stray() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned.append("task")

    async def events() -> Any:
        try:
            while True:
                yield 1
                await asyncio.sleep(0)
        finally:
            cleaned.append("generator")

    async def main() -> int:
        asyncio.get_running_loop().create_task(stray())
        await asyncio.sleep(0)
        async for _ in events():
            break  # left suspended, as `async for` leaves it on an exception
        return 3

    assert run_until_signalled(main()) == 3
    assert sorted(cleaned) == ["generator", "task"]

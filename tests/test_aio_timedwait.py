"""shoed.aio.TimedWait and Wakeup: woken or timed out, with one timer kept across waits."""

from __future__ import annotations

import asyncio
import time

from shoed.aio import TimedWait, Wakeup


def scheduled(loop: asyncio.AbstractEventLoop) -> int:
    """Timers the loop holds that are not cancelled (the standard loop's heap)."""
    return sum(1 for handle in loop._scheduled if not handle.cancelled())  # type: ignore[attr-defined]


def test_woken_waits_share_one_timer_and_a_timeout_still_ends_a_wait() -> None:
    async def scenario() -> tuple[list[bool], int, bool, float]:
        loop = asyncio.get_running_loop()
        wait = TimedWait()
        before = scheduled(loop)
        woken = []
        for _ in range(200):
            loop.call_soon(wait.wake)
            woken.append(await wait.wait(5.0))
        timers = scheduled(loop) - before  # one, armed by the first wait
        started = time.monotonic()
        timed_out = await wait.wait(0.05)  # sooner than the timer: armed again, sooner
        return woken, timers, timed_out, time.monotonic() - started

    woken, timers, timed_out, took = asyncio.run(scenario())
    assert woken == [True] * 200
    assert timers == 1
    assert timed_out is False
    assert 0.04 <= took < 2.0


def test_a_timer_armed_for_an_earlier_wait_goes_on_to_the_later_ones_end() -> None:
    async def scenario() -> tuple[bool, float]:
        wait = TimedWait()
        asyncio.get_running_loop().call_soon(wait.wake)
        await wait.wait(0.05)  # the timer: 0.05 s from now
        await asyncio.sleep(0.03)
        started = time.monotonic()
        result = await wait.wait(0.2)  # ends 0.2 s from now, not at the old 0.05
        return result, time.monotonic() - started

    result, took = asyncio.run(scenario())
    assert result is False
    assert took >= 0.19


def test_a_wait_on_a_new_loop_gets_a_timer_there() -> None:
    wait = TimedWait()

    async def woken_then_left() -> None:
        asyncio.get_running_loop().call_soon(wait.wake)
        assert await wait.wait(3600) is True  # its timer stays with this loop

    asyncio.run(woken_then_left())
    assert asyncio.run(asyncio.wait_for(wait.wait(0.05), 5)) is False


def test_a_cancelled_wait_leaves_nothing_waiting() -> None:
    async def scenario() -> bool:
        wait = TimedWait()
        task = asyncio.create_task(wait.wait(10))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        wait.wake()  # nobody to wake: nothing happens
        asyncio.get_running_loop().call_soon(wait.wake)
        return await wait.wait(10)

    assert asyncio.run(scenario()) is True


def test_wakeup_set_before_or_during_a_wait_and_its_timeout() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        flag = Wakeup()
        flag.set()
        already = await flag.wait(10)
        flag.clear()
        asyncio.get_running_loop().call_later(0.01, flag.set)
        during = await flag.wait(10)
        flag.clear()
        expired = await flag.wait(0.02)
        return already, during, expired

    assert asyncio.run(scenario()) == (True, True, False)

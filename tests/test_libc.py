"""The C library's two services: the C heap's free pages handed back (`trim_heap`, each
housekeeping tick of the daemon) and the loader `shoed.clock` asks adjtimex through."""

from __future__ import annotations

import asyncio
import ctypes
import pathlib

import pytest
from test_shell_seams import table

from shoed import daemon as daemon_module
from shoed.libc import libc, trim_heap

BLOCK = 64 * 1024  # under glibc's mmap threshold: from the heap, not a mapping of its own
BLOCKS = 1200  # ~75 MB


def rss_anon_kb() -> int:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")


def test_trim_heap_gives_the_free_pages_inside_the_c_heap_back() -> None:
    lib = libc()
    if lib is None or not hasattr(lib, "malloc_trim"):
        pytest.skip("no glibc here")
    lib.malloc.restype = ctypes.c_void_p
    lib.free.argtypes = [ctypes.c_void_p]
    blocks = [lib.malloc(BLOCK) for _ in range(BLOCKS)]
    assert all(blocks)
    for block in blocks:
        ctypes.memset(block, 1, BLOCK)  # touched: in the RSS
    for block in blocks[:-1]:  # the last one stays: glibc cannot shrink the heap's top
        lib.free(block)
    before = rss_anon_kb()
    assert trim_heap() is True
    after = rss_anon_kb()
    lib.free(blocks[-1])
    assert before - after > BLOCK * BLOCKS // 1024 * 3 // 4, (before, after)


def test_the_daemons_housekeeping_trims_the_heap_each_tick(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[float] = []
    monkeypatch.setattr(daemon_module, "HOUSEKEEPING_S", 0.05)
    monkeypatch.setattr(daemon_module, "trim_heap",
                        lambda: trims.append(asyncio.get_running_loop().time()) or True)

    async def main() -> None:
        async with table(tmp_path, "whole") as (daemon, _, deal):
            task = asyncio.create_task(daemon.housekeeping())
            await deal(3, 0.3)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    asyncio.run(main())
    assert len(trims) >= 3, trims

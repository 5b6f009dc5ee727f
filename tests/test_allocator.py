"""glibc's mmap threshold is pinned where glibc is the C library (consumer_sdk.allocator)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import platform
import threading
from pathlib import Path

import pytest

from consumer_sdk.allocator import (
    give_back_every,
    give_back_free_memory,
    heap_usage,
    pin_mmap_threshold,
)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_the_threshold_is_pinned_on_glibc() -> None:
    assert pin_mmap_threshold(256 * 1024) is True
    assert pin_mmap_threshold() is True  # back to the SDK's value for the rest of the run


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallinfo2 is glibc's")
def test_the_heap_usage_sees_an_allocation_and_its_free() -> None:
    libc = ctypes.CDLL(None)
    libc.malloc.argtypes, libc.malloc.restype = (ctypes.c_size_t,), ctypes.c_void_p
    libc.free.argtypes, libc.free.restype = (ctypes.c_void_p,), None
    before = heap_usage()
    assert before is not None
    block = libc.malloc(64 * 1024 * 1024)  # above the mmap threshold: its own mapping
    held = heap_usage()
    libc.free(block)
    after = heap_usage()
    assert held is not None and after is not None
    assert held.allocated - before.allocated >= 64 * 1024 * 1024
    assert held.allocated - after.allocated >= 64 * 1024 * 1024


def anonymous_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_free_pages_in_the_middle_of_the_heap_are_given_back() -> None:
    libc = ctypes.CDLL(None)
    libc.malloc.argtypes, libc.malloc.restype = (ctypes.c_size_t,), ctypes.c_void_p
    libc.free.argtypes, libc.free.restype = (ctypes.c_void_p,), None
    libc.memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
    blocks = [libc.malloc(8 * 1024) for _ in range(8 * 1024)]  # 64 MiB under the threshold
    for block in blocks:
        libc.memset(block, 1, 8 * 1024)  # touched: resident
    for block in blocks[:-1]:
        libc.free(block)  # the last one stays, so glibc cannot trim the heap's top itself
    kept = anonymous_kib()
    give_back_free_memory()
    given_back = anonymous_kib()
    libc.free(blocks[-1])
    assert kept - given_back > 32 * 1024, (kept, given_back)


def test_the_program_gives_back_again_and_again_on_its_event_loop_thread() -> None:
    async def three_rounds() -> list[int]:
        threads: list[int] = []
        three = asyncio.Event()

        def counted() -> None:
            threads.append(threading.get_ident())
            if len(threads) == 3:
                three.set()

        giver = asyncio.create_task(give_back_every(interval_s=0.01, give_back=counted))
        try:
            await asyncio.wait_for(three.wait(), timeout=30)
        finally:
            giver.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await giver
        assert giver.cancelled()
        return threads

    # The loop's own thread: mimalloc gives back only the caches of the thread that asks.
    assert asyncio.run(three_rounds()) == [threading.get_ident()] * 3

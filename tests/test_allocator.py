"""glibc's mmap threshold is pinned where glibc is the C library (consumer_sdk.allocator)."""

from __future__ import annotations

import ctypes
import platform

import pytest

from consumer_sdk.allocator import heap_usage, pin_mmap_threshold


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

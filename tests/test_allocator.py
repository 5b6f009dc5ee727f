"""glibc's mmap threshold is pinned where glibc is the C library (consumer_sdk.allocator)."""

from __future__ import annotations

import platform

import pytest

from consumer_sdk.allocator import pin_mmap_threshold


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_the_threshold_is_pinned_on_glibc() -> None:
    assert pin_mmap_threshold(256 * 1024) is True
    assert pin_mmap_threshold() is True  # back to the SDK's value for the rest of the run

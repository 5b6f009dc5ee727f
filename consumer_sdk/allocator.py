"""Pin glibc's mmap threshold, so buffers the size of a fetch go back to the system when freed.

glibc serves allocations above its mmap threshold (128 KiB at start) with their own mappings,
returned to the system on free. But by default the threshold rises to the size of the largest
such block freed: after the first fetches, every later fetch-sized buffer comes from the heap,
whose freed pages stay resident. A consumer that decodes a fetch of megabytes, holds it while a
batch fills and frees it then, keeps the high-water mark of those heaps. Pinning the threshold
(which also stops it rising) measured 6-15 MiB less peak working set per consumer on Apache
Kafka, in every row (``benchmarks/results/consumer_memory_apache_pinned.md``).

Process-wide, so the SDK's own program (``consumer_sdk.cli``) calls it at start; a program
embedding the consumer may call it too. It does nothing where the C library is not glibc.

``heap_usage`` reads what glibc's allocator holds (``mallinfo2``): what is allocated and what
it keeps freed, for telling a native leak from pages an allocator keeps.

The allocators also keep what a backlog's batches freed: glibc in free chunks between live
ones (only the heap's top is trimmed by itself), Arrow's pool (mimalloc) in its own caches.
Across 30 backlogs of 64 MiB a consumer writing through Spark Connect kept 4 -> 26 MiB in
glibc's heaps while what it had allocated grew 0.9 MiB, and its anonymous memory wandered
127-200 MiB with mimalloc's caches (``benchmarks/results/consumer_backlogs_spark.md``). The
consumer program therefore gives free pages back every minute (``give_back_every``), on its
event loop's thread: mimalloc returns the caches of the thread that asks. Asked from a thread
of its own, the same trim gave back 1.4-2.2 MiB after a drain; on the loop's thread, 13-35.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)
M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD_BYTES = 128 * 1024
GIVE_BACK_INTERVAL_S = 60.0


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (malloc.h, glibc >= 2.33): ten ``size_t`` fields."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@dataclass(frozen=True)
class HeapUsage:
    """What glibc's allocator holds over all its arenas, in bytes."""

    allocated: int  # in use: heap chunks and blocks mapped on their own
    kept_free: int  # freed into the heaps and not returned to the system


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def heap_usage() -> HeapUsage | None:
    """glibc's ``mallinfo2`` totals; None where the C library has none (not glibc, or older
    than 2.33)."""
    libc = _libc()
    mallinfo2 = getattr(libc, "mallinfo2", None)
    if mallinfo2 is None:
        return None
    mallinfo2.argtypes = ()
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return HeapUsage(allocated=info.uordblks + info.hblkhd, kept_free=info.fordblks)


def give_back_free_memory() -> bool:
    """Return the pages glibc's heaps and Arrow's pool keep freed to the system
    (``malloc_trim(0)``, and the pool's ``release_unused`` if Arrow is loaded); True if glibc
    trimmed any."""
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        arrow.default_memory_pool().release_unused()
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
        return False
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    return bool(trim(0))


async def give_back_every(
    interval_s: float = GIVE_BACK_INTERVAL_S,
    give_back: Callable[[], object] = give_back_free_memory,
) -> None:
    """Call ``give_back`` every ``interval_s`` on the running event loop's thread, until
    cancelled (the consumer program's policy: what the allocators keep after a backlog is
    given back within a minute). On the loop's thread because that is where the record path
    allocates, and mimalloc gives back only the asking thread's caches."""
    while True:
        await asyncio.sleep(interval_s)
        give_back()


def pin_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Set glibc's M_MMAP_THRESHOLD to ``threshold`` bytes (fixed from now on); False where
    there is no glibc ``mallopt`` or it refused."""
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    pinned = bool(mallopt(M_MMAP_THRESHOLD, threshold))
    if not pinned:
        log.debug("mallopt(M_MMAP_THRESHOLD, %d) refused", threshold)
    return pinned

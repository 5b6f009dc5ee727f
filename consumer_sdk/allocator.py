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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)
M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD_BYTES = 128 * 1024


def pin_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Set glibc's M_MMAP_THRESHOLD to ``threshold`` bytes (fixed from now on); False where
    there is no glibc ``mallopt`` or it refused."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    pinned = bool(mallopt(M_MMAP_THRESHOLD, threshold))
    if not pinned:
        log.debug("mallopt(M_MMAP_THRESHOLD, %d) refused", threshold)
    return pinned

"""How much the Kafka client may fetch, so a consumer holds about one batch ahead.

The client buffers one fetched slice per partition whose records the consumer has not taken
yet, and keeps fetching the other partitions while the pipeline is full: what it holds ahead
is (assigned partitions) x (bytes a fetch asks of each partition). Sizing the per-partition
ask to a share of ``batch_bytes`` keeps that near one batch whatever the partition count;
a fixed ask made it grow with the partitions (32 partitions x 4 MiB behind a slow sink).
"""

from __future__ import annotations

from typing import Any

from consumer_sdk.config import MIB

KIB = 1024
# Below this a fetch returns too little per round trip; Kafka still returns a whole record
# batch larger than the ask, so a big record is never stuck.
MIN_PARTITION_FETCH_BYTES = 64 * KIB
MAX_PARTITION_FETCH_BYTES = 4 * MIB


# What the client may hold fetched ahead of the batch being built, in batches: each
# partition is asked for this share of batch_bytes over the assigned partitions.
FETCH_AHEAD_BATCHES = 1.0


def partition_fetch_bytes(batch_bytes: int, partitions: int) -> int:
    """Bytes each fetch asks of one partition when ``partitions`` are assigned: an equal share
    of ``FETCH_AHEAD_BATCHES`` batches, within [64 KiB, 4 MiB]."""
    share = int(batch_bytes * FETCH_AHEAD_BATCHES) // max(1, partitions)
    return max(MIN_PARTITION_FETCH_BYTES, min(MAX_PARTITION_FETCH_BYTES, share))


def fetch_max_bytes(batch_bytes: int) -> int:
    """Bytes one fetch response may hold: one batch (at least 1 MiB)."""
    return max(MIB, batch_bytes)


def resize_partition_fetches(client: Any, batch_bytes: int, partitions: int) -> None:
    """Apply :func:`partition_fetch_bytes` to a running aiokafka consumer (its fetcher reads
    the value for every request it builds; aiokafka's minor version is pinned)."""
    fetcher = getattr(client, "_fetcher", None)
    if fetcher is not None and hasattr(fetcher, "_max_partition_fetch_bytes"):
        fetcher._max_partition_fetch_bytes = partition_fetch_bytes(batch_bytes, partitions)

"""The client's fetch sizes: what it holds ahead stays about one batch."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from consumer_sdk.fetch_sizes import (
    MAX_PARTITION_FETCH_BYTES,
    MIN_PARTITION_FETCH_BYTES,
    fetch_max_bytes,
    partition_fetch_bytes,
    resize_partition_fetches,
)

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("batch_bytes", "partitions", "expected"),
    [
        (16 * MIB, 32, MIB // 2),  # an equal share of one batch
        (16 * MIB, 1, MAX_PARTITION_FETCH_BYTES),  # capped
        (16 * MIB, 0, MAX_PARTITION_FETCH_BYTES),  # nothing assigned yet
        (16 * MIB, 1024, MIN_PARTITION_FETCH_BYTES),  # floored
        (1 * MIB, 8, 128 * 1024),
    ],
)
def test_partition_fetch_bytes_is_a_share_of_one_batch_within_its_bounds(
    batch_bytes: int, partitions: int, expected: int
) -> None:
    assert partition_fetch_bytes(batch_bytes, partitions) == expected


@pytest.mark.parametrize("partitions", [1, 4, 16, 64, 256])
def test_what_the_client_holds_ahead_stays_near_one_batch(partitions: int) -> None:
    batch = 16 * MIB
    ahead = partitions * partition_fetch_bytes(batch, partitions)
    assert ahead <= max(batch, partitions * MIN_PARTITION_FETCH_BYTES)


def test_fetch_max_bytes_is_one_batch_and_at_least_1_mib() -> None:
    assert fetch_max_bytes(16 * MIB) == 16 * MIB
    assert fetch_max_bytes(4096) == MIB


def test_a_running_client_is_resized_and_one_without_a_fetcher_is_left_alone() -> None:
    client = SimpleNamespace(_fetcher=SimpleNamespace(_max_partition_fetch_bytes=4 * MIB))
    resize_partition_fetches(client, 16 * MIB, 64)
    assert client._fetcher._max_partition_fetch_bytes == MIB // 4
    bare = SimpleNamespace()
    resize_partition_fetches(bare, 16 * MIB, 64)
    assert not hasattr(bare, "_fetcher")

"""Which Iceberg snapshots the sink may expire (pure): never the one holding a partition's
highest offset, so resuming reads the same offsets before and after."""

from __future__ import annotations

import random

import pytest

from consumer_sdk.lake.commit_offsets import encode_offsets, stored_offsets
from consumer_sdk.lake.iceberg.expiry import SnapshotOffsets, snapshots_to_expire

MINUTE_MS = 60_000


def snapshot(
    snapshot_id: int,
    minute: int,
    offsets: dict[int, int] | None,
    *,
    bound_for: str = "",
    topic_id: str = "",
) -> SnapshotOffsets:
    text = (
        None
        if offsets is None
        else encode_offsets("orders", offsets, bound_for=bound_for, topic_id=topic_id)
    )
    return SnapshotOffsets(snapshot_id, minute * MINUTE_MS, text)


def test_old_snapshots_go_but_each_partitions_highest_offset_stays() -> None:
    snapshots = [
        snapshot(1, 0, {0: 10, 1: 20}),
        snapshot(2, 1, {0: 15}),  # partition 1 is never written again
        snapshot(3, 2, None),  # not the sink's (a compaction)
        snapshot(4, 3, {0: 30}),
        snapshot(5, 59, {0: 40}),
    ]
    expired = snapshots_to_expire(snapshots, now_ms=60 * MINUTE_MS, keep_ms=5 * MINUTE_MS)
    assert expired == [4, 3, 2]  # 1 holds partition 1's 20, 5 is recent and partition 0's
    kept = [s.offsets for s in snapshots if s.snapshot_id not in expired]
    every = [s.offsets for s in snapshots]
    assert stored_offsets(kept, "orders") == stored_offsets(every, "orders") == {0: 40, 1: 20}


def test_the_newest_are_kept_whatever_their_age() -> None:
    snapshots = [snapshot(i, i, None) for i in range(1, 6)]
    expired = snapshots_to_expire(snapshots, now_ms=1_000 * MINUTE_MS, keep_ms=0, keep_last=2)
    assert expired == [3, 2, 1]


def test_topic_ids_and_dead_letter_tables_count_apart() -> None:
    """An earlier topic of the name and dead letters bound for another table keep theirs."""
    snapshots = [
        snapshot(1, 0, {0: 90}, topic_id="old-id"),
        snapshot(2, 1, {0: 5}, topic_id="new-id"),
        snapshot(3, 2, {0: 7}, bound_for="payments"),
        snapshot(4, 3, {0: 8}, topic_id="new-id"),
    ]
    assert snapshots_to_expire(snapshots, now_ms=10 * MINUTE_MS, keep_ms=0) == [2]


def test_a_later_commit_with_a_lower_offset_does_not_replace_the_highest() -> None:
    """Commits of two writers may carry clocks apart: the highest offset decides."""
    snapshots = [snapshot(1, 5, {0: 100}), snapshot(2, 6, {0: 90}), snapshot(3, 7, {1: 1})]
    assert snapshots_to_expire(snapshots, now_ms=60 * MINUTE_MS, keep_ms=0) == [2]


def test_resuming_reads_the_same_offsets_after_any_expiry() -> None:
    chance = random.Random(20261207)
    for _ in range(200):
        snapshots = []
        for i in range(chance.randint(1, 40)):
            written = {p: chance.randint(0, 1_000) for p in range(4) if chance.random() < 0.4}
            snapshots.append(snapshot(i, chance.randint(0, 100), written or None))
        expired = set(
            snapshots_to_expire(
                snapshots, now_ms=100 * MINUTE_MS, keep_ms=chance.randint(0, 50) * MINUTE_MS
            )
        )
        kept = [s.offsets for s in snapshots if s.snapshot_id not in expired]
        assert stored_offsets(kept, "orders") == stored_offsets(
            [s.offsets for s in snapshots], "orders"
        )
        assert len(kept) >= 1


@pytest.mark.parametrize(("keep_last", "keep_ms"), [(0, 0), (1, -1)])
def test_bad_bounds_are_refused(keep_last: int, keep_ms: int) -> None:
    with pytest.raises(ValueError, match="keep_last must be >= 1"):
        snapshots_to_expire([], now_ms=0, keep_ms=keep_ms, keep_last=keep_last)

"""Fetched records cut into batches of at most N bytes (pure: no client, no sink)."""

from __future__ import annotations

from consumer_sdk.records.pending import Batch, PendingRecords
from consumer_sdk.sink import HEADER_FIXED_BYTES, RECORD_FIXED_BYTES, Record


def holding(records: list[Record]) -> PendingRecords[int]:
    """Pending records keyed by partition, added one poll per record."""
    pending: PendingRecords[int] = PendingRecords()
    for r in records:
        pending.add(r.partition, [r])
    return pending


def records(partitions: int, per_partition: int, value_size: int) -> list[Record]:
    return [
        Record("t", p, o, 0, None, b"x" * value_size)
        for o in range(per_partition)
        for p in range(partitions)
    ]


def offsets_of(batch: Batch[int]) -> dict[int, list[int]]:
    return {p: [r.offset for r in recs] for p, recs in batch.records.items()}


def test_batches_stay_within_the_limit_and_take_each_partition_in_order() -> None:
    held = records(3, 10, 100)
    pending = holding(held)
    assert pending.bytes == sum(r.size for r in held)
    limit = 7 * held[0].size + 1
    batches = []
    while pending.bytes:
        batch = pending.take(limit=limit)
        assert batch.bytes == sum(r.size for recs in batch.records.values() for r in recs)
        assert batch.bytes <= limit
        batches.append(batch)
    assert len(batches) == -(-len(held) // 7)  # full batches of 7 records, then the rest
    per_partition: dict[int, list[int]] = {}
    for batch in batches:
        for partition, offsets in offsets_of(batch).items():
            per_partition.setdefault(partition, []).extend(offsets)
    assert per_partition == {p: list(range(10)) for p in range(3)}  # once each, in order
    assert not pending.take()


def test_a_record_larger_than_the_limit_is_a_batch_of_its_own() -> None:
    pending = holding([*records(1, 1, 5000), Record("t", 0, 1, 0, None, b"small")])
    assert offsets_of(pending.take(limit=1000)) == {0: [0]}
    assert offsets_of(pending.take(limit=1000)) == {0: [1]}
    assert pending.bytes == 0


def test_without_a_limit_the_chosen_partitions_go_whole_and_drop_forgets() -> None:
    held = records(3, 4, 100)
    pending = holding(held)
    taken = pending.take({1})
    assert offsets_of(taken) == {1: [0, 1, 2, 3]} and taken.next_offsets() == {1: 4}
    pending.drop(0)
    assert pending.bytes == 4 * held[0].size
    assert offsets_of(pending.take()) == {2: [0, 1, 2, 3]}


def test_offsets_fetched_again_after_a_seek_are_held_once() -> None:
    pending: PendingRecords[int] = PendingRecords()
    first = records(1, 5, 10)
    pending.add(0, first[:3])
    pending.add(0, first)  # re-delivered from offset 0 after a repositioning
    pending.add(0, first[:2])  # nothing new
    assert offsets_of(pending.take()) == {0: [0, 1, 2, 3, 4]}
    assert pending.bytes == 0


def test_headers_become_a_tuple_and_null_keys_and_values_count_no_bytes_of_their_own() -> None:
    pending: PendingRecords[int] = PendingRecords()
    pending.add(0, [Record("t", 0, 0, 0, None, None, [("h", b"v")])])  # type: ignore[arg-type]
    batch = pending.take()
    assert batch.records[0][0].headers == (("h", b"v"),)
    # The fixed cells of the record and of its one header, and the header's 2 bytes.
    assert batch.bytes == RECORD_FIXED_BYTES + HEADER_FIXED_BYTES + 2


def test_a_record_counts_its_bytes_as_a_batch_holds_them() -> None:
    plain = Record("t", 0, 0, 0, b"key", b"value")
    assert plain.size == RECORD_FIXED_BYTES + 8
    headed = plain._replace(headers=(("é", b"12"), ("k", None)))
    assert headed.size == plain.size + 2 * HEADER_FIXED_BYTES + len("é".encode()) + 2 + 1


def test_first_offsets_name_where_dropped_partitions_resume() -> None:
    held = records(3, 10, 100)
    pending = holding(held)
    pending.take({0}, limit=3 * held[0].size)  # offsets 0-2 of partition 0 go to a write
    pending.take({2})  # all of partition 2
    assert pending.first_offsets({0, 1, 2}) == {0: 3, 1: 0}
    pending.drop(0)
    assert pending.first_offsets({0, 1}) == {1: 0}

"""The columnar pending buffer cuts exactly the batches the record buffer cuts.

Both buffers get the same fetches (the columnar one as RecordColumns chunks, the other as
records) and the same sequence of take/drop calls; every batch must hold the same records of
the same partitions and commit the same offsets. Pure: no client, no sink.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer_sdk.records.pending import PendingRecords
from consumer_sdk.records.pending_columns import PendingColumns
from consumer_sdk.records.record_columns import RecordColumns
from consumer_sdk.sink import HEADERS, RECORD_SCHEMA, Record


def chunk(partition: int, records: list[Record], next_offset: int) -> RecordColumns:
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([r.offset for r in records], pa.int64()),
            pa.array([r.timestamp for r in records], pa.int64()),
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            pa.array([list(r.headers) for r in records], HEADERS),
        ],
        schema=RECORD_SCHEMA,
    )
    return RecordColumns("t", partition, batch, next_offset)


def as_offsets(records: dict[Any, Any]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for partition, held in records.items():
        if isinstance(held, pa.Table):
            out[partition] = held.column("offset").to_pylist()
        else:
            out[partition] = [r.offset for r in held]
    return out


fetch = st.tuples(
    st.integers(min_value=0, max_value=2),  # partition
    st.lists(st.integers(min_value=0, max_value=400), min_size=1, max_size=12),  # value sizes
    st.integers(min_value=0, max_value=3),  # how many already-held offsets come back
)
step = st.one_of(
    st.tuples(st.just("fetch"), fetch),
    st.tuples(st.just("take"), st.integers(min_value=1, max_value=2500)),
    st.tuples(st.just("take_partition"), st.integers(min_value=0, max_value=2)),
    st.tuples(st.just("drop"), st.integers(min_value=0, max_value=2)),
)


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=30))
def test_same_batches_as_the_record_buffer(steps: list[tuple[str, Any]]) -> None:
    records: PendingRecords[int] = PendingRecords()
    columns: PendingColumns[int] = PendingColumns()
    next_offset = {0: 0, 1: 0, 2: 0}
    for kind, argument in steps:
        if kind == "fetch":
            partition, sizes, replay = argument
            first = max(0, next_offset[partition] - replay)  # a repositioning re-reads
            fetched = [
                Record(
                    "t",
                    partition,
                    first + i,
                    1000 + i,
                    b"k" if i % 2 else None,
                    b"v" * size,
                    (("h", b"x" * (i % 4)),) if i % 3 == 0 else (),
                )
                for i, size in enumerate(sizes)
            ]
            next_offset[partition] = max(next_offset[partition], first + len(sizes))
            records.add(partition, fetched)
            columns.add(partition, [chunk(partition, fetched, first + len(sizes))])
        elif kind == "drop":
            records.drop(argument)
            columns.drop(argument)
        else:
            partitions = {argument} if kind == "take_partition" else None
            limit = argument if kind == "take" else None
            want = records.take(partitions, limit)
            got = columns.take(partitions, limit)
            assert as_offsets(got.records) == as_offsets(want.records)
            assert got.sizes == want.sizes
            assert got.next_offsets() == want.next_offsets()
        assert columns.bytes == records.bytes
        assert columns.first_offsets({0, 1, 2}) == records.first_offsets({0, 1, 2})


def test_a_partition_whose_first_record_does_not_fit_stays_whole() -> None:
    records: PendingRecords[int] = PendingRecords()
    columns: PendingColumns[int] = PendingColumns()
    for partition, size in ((0, 600), (1, 500)):
        fetched = [Record("t", partition, 0, 0, None, b"v" * size)]
        records.add(partition, fetched)
        columns.add(partition, [chunk(partition, fetched, 1)])
    want, got = records.take(limit=1000), columns.take(limit=1000)
    assert as_offsets(got.records) == as_offsets(want.records) == {0: [0]}
    assert got.next_offsets() == want.next_offsets() == {0: 1}
    assert columns.bytes == records.bytes == Record("t", 1, 0, 0, None, b"v" * 500).size


def _addresses(table: pa.Table) -> set[int]:
    return {
        buffer.address
        for column in table.columns
        for piece in column.chunks
        for buffer in piece.buffers()
        if buffer is not None and buffer.size
    }


def test_a_chunk_cut_by_a_batch_leaves_no_part_holding_the_other() -> None:
    fetched = [Record("t", 0, n, 0, None, b"v" * 100, (("h", b"x"),)) for n in range(10)]
    original = chunk(0, fetched, 10)
    columns: PendingColumns[int] = PendingColumns()
    columns.add(0, [original])
    first = columns.take(limit=4 * fetched[0].size)
    second = columns.take()
    assert as_offsets(first.records) == {0: [0, 1, 2, 3]}
    assert as_offsets(second.records) == {0: list(range(4, 10))}
    assert first.bytes == 4 * fetched[0].size and second.bytes == 6 * fetched[0].size
    # Each part is a copy: neither keeps the fetched chunk (or the other part) alive.
    whole = _addresses(pa.Table.from_batches([original.batch]))
    first_buffers, second_buffers = _addresses(first.records[0]), _addresses(second.records[0])
    assert not first_buffers & whole and not second_buffers & whole
    assert not first_buffers & second_buffers
    assert first.records[0].to_pylist() + second.records[0].to_pylist() == (
        pa.Table.from_batches([original.batch]).to_pylist()
    )

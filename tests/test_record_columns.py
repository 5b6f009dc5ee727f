"""Record batches to Arrow columns: the native decoder against aiokafka's own reader.

Batches are written by aiokafka's DefaultRecordBatchBuilder (what a producer sends); the
expected records are what went in. Both decoders (native, and the aiokafka fallback) must
return exactly them.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer_sdk.records import record_columns
from consumer_sdk.records.inflate import CODEC_NAMES
from consumer_sdk.records.record_columns import CorruptRecords, RecordColumns, decode_records
from consumer_sdk.sink import REFUSED_HEADER, Record
from fuzz.seeds import batch
from tests.columns_helpers import column_rows

Header = tuple[str, bytes | None]
Row = tuple[bytes | None, bytes | None, list[Header]]

pytestmark = pytest.mark.skipif(
    not record_columns.native_available(), reason="the native decoder is not built"
)


def expected(rows: list[Row], base_offset: int, timestamp: int = 1_700_000_000_000) -> list[Any]:
    return [
        (base_offset + i, timestamp + 3 * i, key, value, headers)
        for i, (key, value, headers) in enumerate(rows)
    ]


def both_decoders(data: bytes, fetch_offset: int, **options: Any) -> list[RecordColumns]:
    """The native result and the fallback's, which must agree."""
    native = decode_records("t", 3, data, fetch_offset, **options)
    sections, refusals, _ = record_columns._sections(data, fetch_offset, True, (), False)
    assert refusals == []
    fallback = record_columns._decode_with_aiokafka(sections, fetch_offset, [])
    assert fallback.equals(native.batch)
    # Sizes come from the offsets buffers: both decoders must give a null slot no bytes.
    assert list(record_columns.record_sizes(fallback)) == list(
        record_columns.record_sizes(native.batch)
    )
    return [native]


maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=8), maybe_bytes), max_size=3)
rows_strategy = st.lists(st.tuples(maybe_bytes, maybe_bytes, headers), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(
        st.tuples(rows_strategy, st.sampled_from(list(CODEC_NAMES))), min_size=1, max_size=4
    ),
    skip=st.integers(min_value=0, max_value=60),
)
def test_any_records_decode_as_written(batches: list[tuple[list[Row], int]], skip: int) -> None:
    data, want, offset = b"", [], 100
    for rows, codec in batches:
        data += batch(rows, offset, codec=codec)
        want += expected(rows, offset)
        offset += len(rows)
    fetch_offset = 100 + skip
    [columns] = both_decoders(data, fetch_offset)
    assert column_rows(columns) == [row for row in want if row[0] >= fetch_offset]
    assert columns.next_offset == max(offset, fetch_offset)
    # What batch_bytes counts is the same on both record paths: Record.size.
    sizes = [
        Record("t", 3, offset, timestamp, key, value, tuple(pairs)).size
        for offset, timestamp, key, value, pairs in column_rows(columns)
    ]
    assert columns.bytes == sum(sizes)
    # ... and it is no less than the decoded buffers with the sink's partition column (4 B a
    # record), past the few bytes of fixed per-buffer overhead: so batch_bytes bounds memory.
    held = columns.batch.get_total_buffer_size() + 4 * columns.count
    assert columns.bytes + 64 >= held
    for start in range(min(3, len(sizes) + 1)):  # a slice reads its own part of the offsets
        part = columns.batch.slice(start, max(len(sizes) - 2 * start, 0))
        assert list(record_columns.record_sizes(part)) == sizes[start : start + part.num_rows]
        assert record_columns.chunk_bytes(part) == sum(sizes[start : start + part.num_rows])


def test_a_batch_cut_by_the_fetch_limit_is_left_for_the_next_fetch() -> None:
    first = batch([(b"k", b"v1", [])], 0)
    second = batch([(None, b"v2", [])], 1)
    columns = decode_records("t", 0, first + second[:-5], 0)
    assert [row[3] for row in column_rows(columns)] == [b"v1"]
    assert columns.next_offset == 1


def test_log_append_time_batches_carry_the_brokers_time() -> None:
    data = batch([(None, b"a", []), (None, b"b", [])], 7, flags=0x08)
    (max_timestamp,) = struct.unpack_from(">q", data, 35)
    columns = decode_records("t", 0, data, 7)
    assert columns.batch.column(1).to_pylist() == [max_timestamp, max_timestamp]


def test_control_batches_are_skipped_but_moved_past() -> None:
    marker = batch([(struct.pack(">hh", 0, 1), b"", [])], 5, producer_id=9, flags=0x30)
    data = batch([(None, b"x", [])], 4) + marker + batch([(None, b"y", [])], 6)
    columns = decode_records("t", 0, data, 4)
    assert [row[0] for row in column_rows(columns)] == [4, 6]
    assert decode_records("t", 0, batch([(None, b"x", [])], 4) + marker, 4).next_offset == 6


def test_read_committed_drops_aborted_transactions() -> None:
    aborted = batch([(None, b"gone", [])], 0, producer_id=1, transactional=True)
    abort_marker = batch([(struct.pack(">hh", 0, 0), b"", [])], 1, producer_id=1, flags=0x30)
    kept = batch([(None, b"kept", [])], 2, producer_id=2, transactional=True)
    data = aborted + abort_marker + kept
    committed = decode_records("t", 0, data, 0, aborted_transactions=[(1, 0)], read_committed=True)
    assert [row[3] for row in column_rows(committed)] == [b"kept"]
    everything = decode_records("t", 0, data, 0, aborted_transactions=[(1, 0)])
    assert [row[3] for row in column_rows(everything)] == [b"gone", b"kept"]


def refused(columns: RecordColumns) -> list[tuple[int, str]]:
    """The refusal rows: (offset, reason text)."""
    return [
        (offset, dict(pairs)[REFUSED_HEADER].decode())  # type: ignore[union-attr]
        for offset, _, key, value, pairs in column_rows(columns)
        if REFUSED_HEADER in dict(pairs)
    ]


def with_crc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 17, calc_crc32c(bytes(data[21:])))
    return bytes(data)


def test_a_corrupt_batch_becomes_a_refusal_row_and_the_next_batch_is_read() -> None:
    data = bytearray(batch([(b"key", b"value", []), (b"k", b"v", [])], 0))
    data[-1] ^= 0xFF
    after = batch([(None, b"after", [])], 2)
    columns = decode_records("t", 0, bytes(data) + after, 0)
    assert refused(columns) == [(1, "CRC mismatch (record batch, offsets 0-1)")]
    assert [row[3] for row in column_rows(columns)] == [None, b"after"]
    assert columns.next_offset == 3
    # A batch whose CRC matches but whose records end early: refused, not read past its end.
    short = bytearray(batch([(b"key", b"value", [])], 0))
    struct.pack_into(">i", short, 57, 2)  # claims two records, holds one
    struct.pack_into(">i", short, 23, 1)  # and two offsets
    assert "records do not parse" in refused(decode_records("t", 0, with_crc(short), 0))[0][1]


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda b: struct.pack_into(">i", b, 23, -1), "offset range"),  # lastOffsetDelta
        (lambda b: struct.pack_into(">i", b, 57, 5), "record count 5 for 1 offsets"),
        (lambda b: struct.pack_into(">h", b, 21, 6), "unknown compression codec 6"),
        (lambda b: struct.pack_into(">i", b, 57, -1), "record count -1"),
    ],
)
def test_a_batch_header_that_cannot_be_right_is_refused(mutate: Any, reason: str) -> None:
    data = bytearray(batch([(None, b"v", [])], 0))
    mutate(data)
    [(_, text)] = refused(decode_records("t", 0, with_crc(data), 0))
    assert reason in text


def test_a_record_offset_outside_its_batch_is_refused() -> None:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, 0, 0, 1 << 20)
    builder.append(0, 0, None, b"v", [])
    builder.append(5, 0, None, b"w", [])  # offset delta 5
    data = bytearray(builder.build())
    struct.pack_into(">i", data, 23, 1)  # the batch claims offsets +0 and +1 only
    [(_, text)] = refused(decode_records("t", 0, with_crc(data), 0))
    assert "a record's offset is outside the batch's range" in text


def test_a_header_key_that_is_not_utf8_is_refused() -> None:
    data = batch([(None, b"v", [("h", b"1")])], 0)
    position = data.index(b"\x02h") + 1  # the key "h" after its zigzag length 1
    broken = bytearray(data)
    broken[position] = 0xFF
    [(_, text)] = refused(decode_records("t", 0, with_crc(broken), 0))
    assert "header key is not UTF-8" in text


@pytest.mark.parametrize("length", [-12, 0, 48])
def test_a_batch_too_short_to_be_one_is_an_error_at_once(length: int) -> None:
    # A negative length once made the batch walk yield the same header for ever.
    data = bytearray(batch([(None, b"v", [])], 0))
    struct.pack_into(">i", data, 8, length)
    with pytest.raises(CorruptRecords, match=f"length {length}"):
        decode_records("t", 0, bytes(data) + bytes(200), 0)


def test_a_batch_whose_last_offset_passes_int64_is_refused_within_int64() -> None:
    # Found by the whole-fetch fuzzer: the refusal row's offset overflowed Arrow's int64.
    data = bytearray(batch([(None, b"v", [])], (1 << 63) - 10))
    struct.pack_into(">i", data, 23, 100)  # lastOffsetDelta: past 2^63 - 1
    columns = decode_records("t", 0, with_crc(data), 0)
    [(offset, text)] = refused(columns)
    assert offset == columns.next_offset == (1 << 63) - 1
    assert "last offset past 2^63 - 1" in text


def test_a_fetch_offset_past_int64_is_an_error() -> None:
    with pytest.raises(CorruptRecords, match="fetch offset"):
        decode_records("t", 0, batch([(None, b"v", [])], 0), 1 << 63)


def test_log_append_time_holds_even_when_the_brokers_time_is_negative() -> None:
    data = bytearray(batch([(None, b"a", [])], 7, flags=0x08))
    struct.pack_into(">q", data, 35, -5)  # maxTimestamp
    columns = decode_records("t", 0, with_crc(data), 7)
    assert columns.batch.column(1).to_pylist() == [-5]


def test_a_batch_that_inflates_past_the_bound_is_refused_and_reading_goes_on() -> None:
    bomb = batch([(None, bytes(4096), [])] * 64, 0, codec=4)  # 256 KiB of zeros, zstd
    after = batch([(None, b"after", [])], 64)
    columns = decode_records("t", 0, bomb + after, 0, max_record_batch_bytes=64 << 10)
    [(offset, text)] = refused(columns)
    assert offset == 63
    assert "zstd batch inflates past max_record_batch_bytes" in text
    assert column_rows(columns)[-1][3] == b"after"
    assert columns.next_offset == 65


def test_many_empty_records_are_refused_before_inflating() -> None:
    empty = batch([(None, None, [])] * 2000, 0, codec=1)  # 2000 x 34 B in memory
    [(_, text)] = refused(decode_records("t", 0, empty, 0, max_record_batch_bytes=32 << 10))
    assert "2000 records take more than max_record_batch_bytes" in text


def test_batches_past_the_fetchs_room_wait_for_the_next_fetch() -> None:
    # Each inflates to about 40 KiB: two do not fit in 64 KiB, so the second is left for the
    # next fetch (its offsets are fetched again) rather than refused.
    rows: list[Row] = [(None, bytes(1000), [])] * 40
    data = batch(rows, 0, codec=3) + batch(rows, 40, codec=3)
    first = decode_records("t", 0, data, 0, max_record_batch_bytes=64 << 10)
    assert (first.count, first.next_offset, refused(first)) == (40, 40, [])
    second = decode_records("t", 0, data, first.next_offset, max_record_batch_bytes=64 << 10)
    assert (second.count, second.next_offset, refused(second)) == (40, 80, [])


def test_without_the_native_library_the_fallback_gives_the_same_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows: list[Row] = [(b"k", None, [("h", None), ("i", b"1")]), (None, b"v", [])]
    data = batch(rows, 10, codec=1)
    native = decode_records("t", 0, data, 10)
    monkeypatch.setattr(record_columns, "_native", lambda: None)
    fallback = decode_records("t", 0, data, 10)
    assert fallback.batch.equals(native.batch)
    assert column_rows(fallback) == expected(rows, 10)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=100), st.integers(min_value=0, max_value=7))
def test_crc32c_matches_the_reference_on_every_native_path(data: bytes, start: int) -> None:
    # Unaligned starts and every tail length (0..7 bytes past the last whole word).
    view = memoryview(data)[min(start, len(data)) :]
    reference = calc_crc32c(bytes(view))
    assert record_columns.crc32c(view) == reference
    assert record_columns.crc32c(view, portable=True) == reference

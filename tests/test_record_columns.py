"""Record batches to Arrow columns: the native decoder against aiokafka's own reader.

Batches are written by aiokafka's DefaultRecordBatchBuilder (what a producer sends); the
expected records are what went in. Both decoders (native, and the aiokafka fallback) must
return exactly them.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer_sdk.records import native_decoder, record_columns
from consumer_sdk.records.batch_header import CorruptRecords
from consumer_sdk.records.inflate import CODEC_NAMES
from consumer_sdk.records.record_columns import RecordColumns, decode_pieces, decode_records
from consumer_sdk.sink import REFUSED_HEADER, Record
from fuzz.seeds import batch
from tests.columns_helpers import column_rows

Header = tuple[str, bytes | None]
Row = tuple[bytes | None, bytes | None, list[Header]]

pytestmark = pytest.mark.skipif(
    not native_decoder.native_available(), reason="the native decoder is not built"
)


def expected(rows: list[Row], base_offset: int, timestamp: int = 1_700_000_000_000) -> list[Any]:
    return [
        (base_offset + i, timestamp + 3 * i, key, value, headers)
        for i, (key, value, headers) in enumerate(rows)
    ]


def both_decoders(data: bytes, fetch_offset: int, **options: Any) -> list[RecordColumns]:
    """The native result and the fallback's, which must agree."""
    native = decode_records("t", 3, data, fetch_offset, **options)
    outcomes = record_columns._batches(data, fetch_offset, True, (), False, 1 << 26, 1 << 22)
    sections = [outcome for _, outcome in outcomes if outcome is not None]
    assert all(isinstance(section, native_decoder.Section) for section in sections)
    refusals: list[str] = []
    fallback = record_columns._decode_with_aiokafka(
        sections,  # type: ignore[arg-type]
        fetch_offset,
        lambda _, reason: refusals.append(reason),
    )
    assert refusals == []
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


def test_a_batch_failing_its_crc_stops_reading_where_it_starts() -> None:
    good = batch([(b"key", b"value", []), (b"k", b"v", [])], 0)
    spoilt = bytearray(batch([(None, b"spoilt", [])], 2))
    spoilt[-1] ^= 0xFF
    after = batch([(None, b"after", [])], 3)
    pieces = decode_pieces("t", 0, good + bytes(spoilt) + after, 0)
    first = next(pieces)  # what passed its CRC is handed over
    assert [row[3] for row in column_rows(first)] == [b"value", b"v"] and first.next_offset == 2
    with pytest.raises(CorruptRecords, match="t:0: the record batch after offset 1 fails its CRC"):
        next(pieces)
    # Its base offset (outside the CRC) decides nothing: ahead or behind, nothing is read.
    for base in (1 << 40, 0):
        moved = bytearray(spoilt)
        struct.pack_into(">q", moved, 0, base)
        with pytest.raises(CorruptRecords):
            list(decode_pieces("t", 0, bytes(moved) + after, 2))


def test_a_batch_that_fails_to_parse_becomes_a_refusal_row() -> None:
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


def test_batches_past_a_piece_start_the_next_piece() -> None:
    # Each inflates to about 40 KiB: two do not fit in a piece of 64 KiB, so the second starts
    # the next piece, decoded only when it is asked for.
    rows: list[Row] = [(None, bytes(1000), [])] * 40
    data = batch(rows, 0, codec=3) + batch(rows, 40, codec=3)
    pieces = decode_pieces("t", 0, data, 0, piece_bytes=64 << 10)
    first = next(pieces)
    assert (first.count, first.next_offset, refused(first)) == (40, 40, [])
    second = next(pieces)
    assert (second.count, second.next_offset, refused(second)) == (40, 80, [])
    assert list(pieces) == []


def large_rows(count: int) -> list[Row]:
    return [(b"%d" % i, b"value-%d;" % i * (20 + i % 40), [("i", b"%d" % i)]) for i in range(count)]


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=lambda codec: CODEC_NAMES[codec])
@pytest.mark.parametrize("fetch_offset", [0, 1234])
def test_a_batch_past_a_piece_is_decoded_a_piece_at_a_time(codec: int, fetch_offset: int) -> None:
    rows = large_rows(3000)  # about 1.2 MiB once inflated, one batch
    data = batch(rows, 0, codec=codec) + batch([(None, b"after", [])], 3000, codec=codec)
    pieces = list(decode_pieces("t", 0, data, fetch_offset, piece_bytes=64 << 10))
    assert len(pieces) > 15
    assert all(piece.bytes <= 64 << 10 for piece in pieces)
    offsets = [piece.next_offset for piece in pieces]
    assert offsets == sorted(offsets) and offsets[-1] == 3001
    got = [row for piece in pieces for row in column_rows(piece)]
    assert got == (expected(rows, 0) + expected([(None, b"after", [])], 3000))[fetch_offset:]
    # Each piece's position is where the next fetch would start: no record twice, none lost.
    for piece, following in itertools.pairwise(pieces):
        if following.count:
            assert column_rows(following)[0][0] >= piece.next_offset


def recompressed(data: bytes, codec: int, section: bytes) -> bytes:
    """``data``'s batch (uncompressed) with ``section`` as its records, compressed."""
    import cramjam

    compress: dict[int, Callable[[bytes], Any]] = {
        1: zlib.compress,
        3: cramjam.lz4.compress,
        4: cramjam.zstd.compress,
    }
    body = bytes(compress[codec](section))
    header = bytearray(data[:61])
    struct.pack_into(">i", header, 8, 49 + len(body))
    (attributes,) = struct.unpack_from(">h", header, 21)
    struct.pack_into(">h", header, 21, attributes | codec)
    return with_crc(header + body)


@pytest.mark.parametrize("codec", [1, 3, 4], ids=lambda codec: CODEC_NAMES[codec])
def test_a_large_batch_with_a_bad_record_near_its_end_is_refused_whole(codec: int) -> None:
    rows = large_rows(3000)
    rows[2990] = (None, b"v", [("zz", b"1")])
    plain = batch(rows, 0)
    section = plain[61:].replace(b"\x04zz", b"\x04\xff\xfe")  # a header key, not UTF-8
    data = recompressed(plain, codec, section) + batch([(None, b"after", [])], 3000)
    pieces = list(decode_pieces("t", 0, data, 0, piece_bytes=64 << 10))
    got = [row for piece in pieces for row in column_rows(piece)]
    assert [offset for offset, *_ in got] == [2999, 3000]  # nothing of it was handed over
    [(offset, text)] = [r for piece in pieces for r in refused(piece)]
    assert (offset, text) == (2999, "a header key is not UTF-8 (record batch, offsets 0-2999)")


def test_a_large_batch_that_passes_the_bound_past_its_first_pieces_is_refused_whole() -> None:
    bomb = batch([(None, bytes(4096), [])] * 64, 0, codec=4)  # 256 KiB of zeros, zstd
    after = batch([(None, b"after", [])], 64)
    pieces = list(
        decode_pieces(
            "t", 0, bomb + after, 0, max_record_batch_bytes=128 << 10, piece_bytes=16 << 10
        )
    )
    got = [row for piece in pieces for row in column_rows(piece)]
    assert [offset for offset, *_ in got] == [63, 64]
    [(_, text)] = [r for piece in pieces for r in refused(piece)]
    assert text.startswith("zstd batch inflates past max_record_batch_bytes (131072 bytes)")


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
    assert native_decoder.crc32c(view) == reference
    assert native_decoder.crc32c(view, portable=True) == reference

"""Inflating a piece at a time (consumer_sdk.records.inflate_stream) and the records path's
bound (consumer_sdk.records.bounded_batches): what each codec gives per read, how broken
input fails, and the one-row batch that stands for a refused one."""

from __future__ import annotations

import os
import struct
import zlib

import cramjam
import pytest
from aiokafka.record.default_records import DefaultRecordBatch

from consumer_sdk.records.bounded_batches import checked_batch
from consumer_sdk.records.inflate import (
    CODEC_NAMES,
    GZIP,
    LZ4,
    SNAPPY,
    ZSTD,
    InflateError,
    TooLarge,
)
from consumer_sdk.records.inflate_stream import inflated_size, open_stream
from consumer_sdk.sink import REFUSED_HEADER
from fuzz.seeds import batch

# Half random, half repeated: inflates a few times over, like text.
PAYLOAD = b"".join(os.urandom(64) + bytes(192) for _ in range(4096))  # 1 MiB
COMPRESS = {
    GZIP: lambda data: zlib.compress(data),
    SNAPPY: lambda data: bytes(cramjam.snappy.compress_raw(data)),
    LZ4: lambda data: bytes(cramjam.lz4.compress(data)),
    ZSTD: lambda data: bytes(cramjam.zstd.compress(data)),
}
codecs = pytest.mark.parametrize("codec", list(COMPRESS), ids=lambda c: CODEC_NAMES[c])


@codecs
def test_each_read_gives_at_most_what_was_asked_and_all_of_it_in_order(codec: int) -> None:
    stream = open_stream(codec, COMPRESS[codec](PAYLOAD))
    pieces = []
    while piece := stream.read(50_000):
        assert len(piece) <= 50_000
        pieces.append(piece)
    assert b"".join(pieces) == PAYLOAD
    assert len(pieces) >= len(PAYLOAD) // 50_000


def test_snappy_in_the_xerial_framing_java_producers_write_reads_block_by_block() -> None:
    blocks = [PAYLOAD[i : i + 32768] for i in range(0, len(PAYLOAD), 32768)]
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for block in blocks:
        compressed = bytes(cramjam.snappy.compress_raw(block))
        framed += struct.pack(">i", len(compressed)) + compressed
    stream = open_stream(SNAPPY, framed)
    out = b""
    while piece := stream.read(10_000):
        out += piece
    assert out == PAYLOAD


@codecs
def test_the_size_is_measured_without_keeping_it_and_refused_past_the_bound(codec: int) -> None:
    compressed = COMPRESS[codec](PAYLOAD)
    assert inflated_size(codec, compressed, len(PAYLOAD)) == len(PAYLOAD)
    with pytest.raises(TooLarge, match=r"inflates past max_record_batch_bytes \(1048575 bytes\)"):
        inflated_size(codec, compressed, len(PAYLOAD) - 1)


@pytest.mark.parametrize("codec", [GZIP, LZ4, SNAPPY], ids=lambda c: CODEC_NAMES[c])
def test_a_truncated_stream_is_an_inflate_error(codec: int) -> None:
    compressed = COMPRESS[codec](PAYLOAD)
    with pytest.raises(InflateError, match=CODEC_NAMES[codec]):
        inflated_size(codec, compressed[: len(compressed) // 2], 1 << 30)


def test_a_truncated_zstd_frame_just_ends_early() -> None:
    # python-zstandard's reader stops at the end of its input: the batch's record count,
    # which the decoder checks, is what tells a truncated zstd batch apart.
    compressed = COMPRESS[ZSTD](PAYLOAD)
    assert inflated_size(ZSTD, compressed[: len(compressed) // 2], 1 << 30) < len(PAYLOAD)


@codecs
def test_garbage_is_an_inflate_error_naming_the_codec(codec: int) -> None:
    garbage = b"\x82SNAPPY\x00" + bytes(8) + b"\x00\x00\x00\x08" + b"\xff" * 8
    with pytest.raises(InflateError, match=CODEC_NAMES[codec]):
        inflated_size(codec, garbage if codec == SNAPPY else b"\xff" * 64, 1 << 30)


def test_a_snappy_block_claiming_more_than_snappy_can_reach_is_refused_unread() -> None:
    claims = b"\xff\xff\xff\x7f"  # a raw block's length varint: 268 MB, from 12 bytes
    with pytest.raises(InflateError, match="claims 268435455 inflated"):
        inflated_size(SNAPPY, claims + b"\x00" * 8, 1 << 30)


def test_the_records_path_gets_a_dead_letter_row_for_a_batch_past_the_bound() -> None:
    bomb = batch([(None, bytes(1 << 16), [])] * 64, 100, codec=ZSTD)  # 4 MiB of zeros
    replacement = checked_batch(memoryview(bomb), 1 << 20)
    assert replacement is not None
    [record] = list(DefaultRecordBatch(replacement.batch))
    read = DefaultRecordBatch(replacement.batch)
    assert read.validate_crc() and read.next_offset == 164
    assert (record.offset, record.key, record.value) == (163, None, None)
    text = (
        b"zstd batch inflates past max_record_batch_bytes (1048576 bytes) "
        b"(record batch, offsets 100-163)"
    )
    assert list(record.headers) == [(REFUSED_HEADER, text)]
    assert replacement.reason == text.decode()


def test_the_records_path_reads_batches_within_the_bound_as_they_are() -> None:
    small = batch([(None, bytes(1 << 16), [])] * 8, 0, codec=ZSTD)  # 512 KiB of zeros
    assert checked_batch(memoryview(small), 1 << 20) is None
    plain = batch([(None, b"v", [])], 0)
    assert checked_batch(memoryview(plain), 1) is None  # not compressed: aiokafka's as is


def test_the_records_path_gets_a_dead_letter_row_for_a_batch_that_does_not_inflate() -> None:
    good = bytearray(batch([(None, bytes(4096), [])] * 64, 0, codec=LZ4))
    good[70:90] = b"\xff" * 20  # inside the lz4 frame
    replacement = checked_batch(memoryview(bytes(good)), 1 << 10)
    assert replacement is not None
    assert replacement.reason.startswith("lz4: ")
    assert replacement.reason.endswith("(record batch, offsets 0-63)")


def test_the_records_path_leaves_a_batch_of_impossible_length_to_aiokafka() -> None:
    broken = bytearray(batch([(None, b"v", [])], 0, codec=ZSTD))
    struct.pack_into(">i", broken, 8, 12)  # shorter than an empty batch's 49 bytes
    assert checked_batch(memoryview(bytes(broken)), 1) is None

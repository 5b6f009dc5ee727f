"""The fixed part of Kafka record batches (message format v2), and a batch left out.

Pure: :func:`batch_headers` walks a message set one ``struct`` call per batch; a
:class:`Refusal` is a batch the decoder leaves out, with the reason its dead-letter row carries.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_SIZE = BATCH_HEADER.size  # 61
LENGTH_PREFIX = 12  # baseOffset and batchLength: batchLength counts the bytes after them
CRC_START = 21  # the CRC covers attributes to the end of the batch
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LENGTH_PREFIX  # a batch with no records: 49
CODEC_MASK = 0x07
_TIMESTAMP_LOG_APPEND = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
MAX_OFFSET = (1 << 63) - 1


class CorruptRecords(ValueError):
    """A batch failed its CRC or its records do not parse; the message says which."""


@dataclass(frozen=True)
class BatchHeader:
    """The fixed part of one record batch, and where its records are."""

    base_offset: int
    last_offset_delta: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    record_count: int
    crc: int
    start: int  # of the batch in the message set
    end: int

    @property
    def next_offset(self) -> int:
        """The offset after the batch (also when compaction removed its last records)."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        """0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & CODEC_MASK

    @property
    def uses_log_append_time(self) -> int:
        """1 if the broker's time (maxTimestamp) is every record's timestamp, else 0."""
        return 1 if self.attributes & _TIMESTAMP_LOG_APPEND else 0

    @property
    def is_control(self) -> bool:
        """A transaction marker, never handed to applications."""
        return bool(self.attributes & _CONTROL)

    @property
    def is_transactional(self) -> bool:
        """Written inside a transaction."""
        return bool(self.attributes & _TRANSACTIONAL)


def batch_headers(data: bytes | memoryview) -> Iterator[BatchHeader]:
    """The complete batches of a message set, in order. A Fetch response may end inside a
    batch (the broker cuts at the byte limit): that partial batch is left out."""
    view = memoryview(data)
    position = 0
    while position + BATCH_HEADER_SIZE <= len(view):
        fields = BATCH_HEADER.unpack_from(view, position)
        base_offset, length, _, magic, crc, attributes, last_delta = fields[:7]
        base_timestamp, max_timestamp, producer_id, _, _, count = fields[7:]
        if length < _MIN_BATCH_LENGTH:  # the next batch cannot be found past this one
            raise CorruptRecords(
                f"record batch at offset {base_offset}: length {length} "
                f"(at least {_MIN_BATCH_LENGTH})"
            )
        end = position + LENGTH_PREFIX + length
        if end > len(view):
            return
        if magic != 2:
            raise CorruptRecords(f"record batch at offset {base_offset}: magic {magic} (only v2)")
        yield BatchHeader(
            base_offset,
            last_delta,
            attributes,
            base_timestamp,
            max_timestamp,
            producer_id,
            count,
            crc,
            position,
            end,
        )
        position = end


@dataclass(frozen=True)
class Refusal:
    """A batch (or what is left of one) kept out of the columns, and why."""

    first_offset: int
    last_offset: int
    timestamp: int
    reason: str

    def describe(self) -> str:
        """The text the dead-letter row carries."""
        return f"{self.reason} (record batch, offsets {self.first_offset}-{self.last_offset})"


def refusal(header: BatchHeader, reason: str, first_offset: int | None = None) -> Refusal:
    """``header``'s batch refused, from ``first_offset`` (its base offset by default) on."""
    last = min(max(header.base_offset, header.next_offset - 1), MAX_OFFSET)
    first = header.base_offset if first_offset is None else min(first_offset, last)
    return Refusal(first, last, header.max_timestamp, reason)

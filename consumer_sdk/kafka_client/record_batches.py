"""Kafka's v2 record batches built and read with aiokafka's record classes, for the record
path where its own (native) decoder is not the one to use: the fallback reader, control
records, crc32c without the native library, and small batches the SDK builds itself (a
dead-letter stand-in, the warm-up sample)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from aiokafka.record.control_record import ABORT_MARKER, ControlRecord
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

Headers = list[tuple[str, bytes]]


@dataclass(frozen=True)
class BatchRecord:
    """One record of a batch, as Kafka stores it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = field(default_factory=list)


def build_batch(
    records: Sequence[BatchRecord],
    *,
    transactional: bool = False,
    producer_id: int = -1,
) -> bytearray:
    """An uncompressed v2 batch of ``records`` (offsets relative to the batch's base 0)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=int(transactional),
        producer_id=producer_id,
        producer_epoch=-1 if producer_id < 0 else 0,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for record in records:
        builder.append(
            record.offset,
            timestamp=record.timestamp,
            key=record.key,
            value=record.value,
            headers=record.headers,
        )
    built: bytearray = builder.build()
    return built


def read_batch(batch: bytes) -> Iterator[BatchRecord]:
    """The records of a whole uncompressed v2 batch (header included). Raises whatever
    aiokafka's reader raises on bytes that do not parse."""
    for record in DefaultRecordBatch(batch):
        yield BatchRecord(
            record.offset, record.timestamp, record.key, record.value, list(record.headers)
        )


def is_abort_marker(batch: bytes) -> bool:
    """Whether a control batch's record marks its transaction aborted (a malformed one
    marks nothing)."""
    try:
        record = next(iter(DefaultRecordBatch(batch)), None)
        return record is not None and ControlRecord.parse(record.key) == ABORT_MARKER
    except Exception:  # whatever the reader raises on bad bytes
        return False


def portable_crc32c(data: bytes) -> int:
    """CRC-32C of ``data`` in Python (aiokafka's), where the native decoder is not built."""
    return int(calc_crc32c(data))

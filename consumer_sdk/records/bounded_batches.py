"""The records path's bound: a compressed batch aiokafka would inflate past it is replaced.

aiokafka's own reader (``record_path = "records"``) inflates a whole batch before its first
record, unbounded. Before it does, :func:`checked_batch` measures a compressed v2 batch that
could pass ``max_record_batch_bytes`` (its compressed size times the codec's densest ratio
passes it) through a stream that keeps nothing, and puts in its place a batch of one
dead-letter row (:data:`~consumer_sdk.sink.REFUSED_HEADER`, at the batch's last offset) when
it inflates past the bound or does not inflate at all. aiokafka then reads that row like any
other and moves past the batch; the sink writes it to the dead-letter table, as it does the
columnar path's refusals.
"""

from __future__ import annotations

from typing import NamedTuple

from consumer_sdk.kafka_client.record_batches import BatchRecord, build_batch
from consumer_sdk.records.batch_header import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    CorruptRecords,
    Refusal,
    batch_headers,
    refusal,
)
from consumer_sdk.records.inflate import (
    GZIP,
    LZ4,
    SNAPPY,
    ZSTD,
    InflateError,
    TooLarge,
    past_bound,
)
from consumer_sdk.records.inflate_stream import inflated_size
from consumer_sdk.sink import REFUSED_HEADER

# At most how many times its compressed size each codec inflates to (zstd: a 4-byte RLE
# block of 128 KiB); a batch below the bound by these is not measured.
DENSEST_RATIO = {GZIP: 1032, SNAPPY: 32, LZ4: 256, ZSTD: 1 << 15}


class Replacement(NamedTuple):
    """A batch of one dead-letter row, and why the batch it replaces was refused."""

    batch: bytes
    reason: str


def checked_batch(batch: memoryview, limit: int) -> Replacement | None:
    """A one-row replacement for the v2 batch ``batch`` when it inflates past ``limit`` or
    does not inflate; None when aiokafka may read it as it is."""
    if len(batch) < BATCH_HEADER_SIZE or batch[16] != 2:  # legacy formats: aiokafka's
        return None
    try:
        header = next(batch_headers(batch), None)
    except CorruptRecords:  # a length no batch can have: aiokafka's reader says so itself
        return None
    if header is None or not header.codec or header.is_control:
        return None
    body = batch[BATCH_HEADER_SIZE:]
    if len(body) * DENSEST_RATIO.get(header.codec, 1 << 30) <= limit:
        return None
    try:
        inflated_size(header.codec, body, limit)
    except TooLarge:
        reason = past_bound(header.codec, limit)
    except InflateError as exc:
        reason = str(exc)
    else:
        return None
    refused = refusal(header, reason)
    return Replacement(refusal_batch(header, refused), refused.describe())


def refusal_batch(header: BatchHeader, refused: Refusal) -> bytes:
    """An uncompressed batch of one row standing for ``header``'s batch: at its last offset,
    of its producer and transaction, with ``refused``'s text in :data:`REFUSED_HEADER`."""
    row = BatchRecord(
        0, header.max_timestamp, None, None, [(REFUSED_HEADER, refused.describe().encode())]
    )
    built = build_batch(
        [row], transactional=header.is_transactional, producer_id=header.producer_id
    )
    # The base offset is outside the CRC: the row sits at the batch's last offset.
    built[0:8] = refused.last_offset.to_bytes(8, "big", signed=True)
    return bytes(built)

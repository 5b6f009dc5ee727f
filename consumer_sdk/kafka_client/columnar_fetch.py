"""aiokafka's fetcher handing over Arrow columns instead of a ConsumerRecord per record.

An ``AIOKafkaConsumer`` created with ``key_deserializer=COLUMNAR`` (after :func:`install`)
returns from ``getmany`` :class:`~consumer_sdk.records.record_columns.RecordColumns`, each a
piece of one partition's fetch response (``getmany(max_records=n)`` takes n pieces), decoded
by :mod:`consumer_sdk.records.record_columns` as it is taken. Everything else stays
aiokafka's: fetch requests, positions (each piece moves the position to its
``next_offset``), pause, seek, rebalancing. A consumer created with
``key_deserializer=BoundedRecords(...)`` gets aiokafka's records, with compressed batches
past the bound replaced by a dead-letter row (:mod:`consumer_sdk.records.bounded_batches`).
Other consumers in the process are untouched: the fetcher builds their records as before.

How: the fetcher wraps each partition's bytes in ``MemoryRecords`` and iterates a
``PartitionRecords``; :func:`install` swaps both names in aiokafka's fetcher module for
versions that keep the raw bytes and, for our consumers only, decode them in pieces or check
their batches. This reaches into aiokafka's internals, which is why the aiokafka minor
version is pinned (tests/test_aiokafka_pin.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from aiokafka.consumer import fetcher
from aiokafka.record.memory_records import MemoryRecords

from consumer_sdk import metrics
from consumer_sdk.records.batch_header import LENGTH_PREFIX, CorruptRecords
from consumer_sdk.records.bounded_batches import checked_batch
from consumer_sdk.records.corrupt_fetches import CORRUPT_FETCHES, STUCK_AFTER
from consumer_sdk.records.inflate import DEFAULT_MAX_RECORD_BATCH_BYTES
from consumer_sdk.records.record_columns import (
    DEFAULT_PIECE_BYTES,
    RecordColumns,
    decode_pieces,
)

_READ_COMMITTED = 1
log = logging.getLogger(__name__)


class ColumnarDecoding:
    """Passed as ``key_deserializer``: never called, only recognised by the fetcher, which
    then decodes columns with these settings (``COLUMNAR``: the defaults). Each
    ``RecordColumns`` takes about ``piece_bytes`` at most: ask ``getmany`` for one at a time
    (``max_records=1``) and a batch that inflates to many is decoded as they are taken."""

    def __init__(
        self,
        max_record_batch_bytes: int = DEFAULT_MAX_RECORD_BATCH_BYTES,
        piece_bytes: int = DEFAULT_PIECE_BYTES,
    ) -> None:
        self.max_record_batch_bytes = max_record_batch_bytes
        self.piece_bytes = piece_bytes

    def __call__(self, key: bytes | None) -> bytes | None:
        raise TypeError("COLUMNAR is a marker, not a deserializer")

    def __repr__(self) -> str:
        return (
            f"COLUMNAR(max_record_batch_bytes={self.max_record_batch_bytes}, "
            f"piece_bytes={self.piece_bytes})"
        )


COLUMNAR = ColumnarDecoding()


class BoundedRecords:
    """Passed as ``key_deserializer`` to a consumer on aiokafka's records path: the fetcher
    replaces each compressed batch that would inflate past ``max_record_batch_bytes`` by a
    dead-letter row (:mod:`consumer_sdk.records.bounded_batches`) and hands keys over as they
    are (it is never called)."""

    def __init__(self, max_record_batch_bytes: int = DEFAULT_MAX_RECORD_BATCH_BYTES) -> None:
        self.max_record_batch_bytes = max_record_batch_bytes

    def __call__(self, key: bytes | None) -> bytes | None:
        return key

    def __repr__(self) -> str:
        return f"BoundedRecords(max_record_batch_bytes={self.max_record_batch_bytes})"


_original_partition_records: Any = fetcher.PartitionRecords


class RawMemoryRecords:
    """aiokafka's MemoryRecords that also keeps the bytes it was made from, and once
    :meth:`bound`, replaces the batches that would inflate past the bound."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._records = MemoryRecords(data)
        self._limit: int | None = None
        self._topic = ""
        self._position = 0

    def bound(self, max_record_batch_bytes: int, topic: str) -> None:
        """Check each compressed batch (of ``topic``) against ``max_record_batch_bytes``
        before aiokafka inflates it."""
        self._limit = max_record_batch_bytes
        self._topic = topic

    def has_next(self) -> bool:
        """Whether a complete batch remains."""
        return bool(self._records.has_next())

    def next_batch(self) -> Any:
        """The next batch, as aiokafka reads it (or its one-row replacement)."""
        if self._limit is None:
            return self._records.next_batch()
        start = self._position
        length = int.from_bytes(self.data[start + 8 : start + LENGTH_PREFIX], "big", signed=True)
        self._position = start + LENGTH_PREFIX + max(length, 0)
        replacement = checked_batch(memoryview(self.data)[start : self._position], self._limit)
        batch = self._records.next_batch()  # keeps aiokafka's position in step (inflates nothing)
        if replacement is None:
            return batch
        from aiokafka.record.default_records import DefaultRecordBatch

        metrics.BATCHES_REFUSED.labels(self._topic).inc()
        log.warning(
            "%s: 1 record batch refused (a dead-letter row): %s", self._topic, replacement.reason
        )
        return DefaultRecordBatch(replacement.batch)

    def size_in_bytes(self) -> int:
        """Bytes held."""
        return int(self._records.size_in_bytes())


class ColumnarPartitionRecords:
    """One partition's fetched bytes, yielded as a single RecordColumns (none if empty)."""

    def __init__(
        self,
        tp: Any,
        records: RawMemoryRecords,
        aborted_transactions: Any,
        fetch_offset: int,
        check_crcs: bool,
        isolation_level: int,
        decoding: ColumnarDecoding = COLUMNAR,
    ) -> None:
        self._tp = tp
        self._decoding = decoding
        self._data: bytes | None = records.data
        self._aborted = [(pid, first) for pid, first in (aborted_transactions or [])]
        self._check_crcs = check_crcs
        self._read_committed = isolation_level == _READ_COMMITTED
        self._pieces: Iterator[RecordColumns] | None = None
        self.next_fetch_offset = fetch_offset

    def __iter__(self) -> ColumnarPartitionRecords:
        return self

    @property
    def held_bytes(self) -> int:
        """Bytes fetched and not yet all decoded (none once handed over)."""
        return 0 if self._data is None else len(self._data)

    def __next__(self) -> RecordColumns:
        if self._data is None:
            raise StopIteration
        topic, partition = self._tp.topic, self._tp.partition
        if self._pieces is None:
            self._pieces = decode_pieces(
                topic,
                partition,
                self._data,
                self.next_fetch_offset,
                check_crcs=self._check_crcs,
                aborted_transactions=self._aborted,
                read_committed=self._read_committed,
                max_record_batch_bytes=self._decoding.max_record_batch_bytes,
                piece_bytes=self._decoding.piece_bytes,
            )
        while True:
            try:
                columns = next(self._pieces)
            except StopIteration:
                self._data = self._pieces = None
                raise
            except CorruptRecords as exc:
                # Batches that cannot be told apart, or one failing its CRC: nothing more of
                # this response is handed over and the position stays, so it is fetched
                # again. Raising would lose the records aiokafka already handed over of
                # other partitions in this poll.
                self._data = self._pieces = None
                metrics.CORRUPT_FETCHES.labels(topic).inc()
                failure = CORRUPT_FETCHES.failed(topic, partition, self.next_fetch_offset, str(exc))
                if failure.count == 1:
                    log.warning("%s:%d at offset %d: %s", topic, partition, failure.offset, exc)
                elif failure.count == STUCK_AFTER:
                    log.error(
                        "%s:%d is stuck at offset %d: %d fetches in a row failed the same way "
                        "(the broker's copy, not the wire): %s; it is fetched again after a "
                        "growing pause, and nothing of it is skipped",
                        topic,
                        partition,
                        failure.offset,
                        failure.count,
                        exc,
                    )
                raise StopIteration from None
            if columns.refused:
                metrics.BATCHES_REFUSED.labels(topic).inc(columns.refused)
                log.warning(
                    "%s:%d: %d record batch(es) refused (a dead-letter row each): %s",
                    topic,
                    partition,
                    columns.refused,
                    "; ".join(columns.refusal_reasons()),
                )
            self.next_fetch_offset = columns.next_offset
            CORRUPT_FETCHES.read(topic, partition, columns.next_offset)
            if columns.count:
                return columns


def _partition_records(
    tp: Any,
    records: Any,
    aborted_transactions: Any,
    fetch_offset: int,
    key_deserializer: Any,
    value_deserializer: Any,
    check_crcs: bool,
    isolation_level: int,
) -> Any:
    if isinstance(key_deserializer, BoundedRecords) and isinstance(records, RawMemoryRecords):
        records.bound(key_deserializer.max_record_batch_bytes, tp.topic)
        key_deserializer = None  # keys as they are, without a call per record
    if isinstance(key_deserializer, ColumnarDecoding) and isinstance(records, RawMemoryRecords):
        return ColumnarPartitionRecords(
            tp,
            records,
            aborted_transactions,
            fetch_offset,
            check_crcs,
            isolation_level,
            key_deserializer,
        )
    return _original_partition_records(
        tp,
        records,
        aborted_transactions,
        fetch_offset,
        key_deserializer,
        value_deserializer,
        check_crcs,
        isolation_level,
    )


def install() -> None:
    """Let consumers created with ``key_deserializer=COLUMNAR`` fetch columns (idempotent)."""
    fetcher.MemoryRecords = RawMemoryRecords
    fetcher.PartitionRecords = _partition_records

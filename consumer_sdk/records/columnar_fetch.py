"""aiokafka's fetcher handing over Arrow columns instead of a ConsumerRecord per record.

An ``AIOKafkaConsumer`` created with ``key_deserializer=COLUMNAR`` (after :func:`install`)
returns from ``getmany`` one :class:`~.record_columns.RecordColumns` per partition and fetch
response, decoded by :mod:`.record_columns`. Everything else stays aiokafka's:
fetch requests, positions (each chunk moves the position to its ``next_offset``), pause,
seek, rebalancing. Other consumers in the process are untouched: the fetcher builds their
records as before.

How: the fetcher wraps each partition's bytes in ``MemoryRecords`` and iterates a
``PartitionRecords``; :func:`install` swaps both names in aiokafka's fetcher module for
versions that keep the raw bytes and, for a columnar consumer only, decode them in one go.
This reaches into aiokafka's internals, which is why the aiokafka minor version is pinned
(tests/test_aiokafka_pin.py).
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka.consumer import fetcher
from aiokafka.record.memory_records import MemoryRecords

from consumer_sdk import metrics
from consumer_sdk.records.inflate import DEFAULT_MAX_RECORD_BATCH_BYTES
from consumer_sdk.records.record_columns import CorruptRecords, RecordColumns, decode_records

_READ_COMMITTED = 1
log = logging.getLogger(__name__)


class ColumnarDecoding:
    """Passed as ``key_deserializer``: never called, only recognised by the fetcher, which
    then decodes columns with these settings (``COLUMNAR``: the defaults)."""

    def __init__(self, max_record_batch_bytes: int = DEFAULT_MAX_RECORD_BATCH_BYTES) -> None:
        self.max_record_batch_bytes = max_record_batch_bytes

    def __call__(self, key: bytes | None) -> bytes | None:
        raise TypeError("COLUMNAR is a marker, not a deserializer")

    def __repr__(self) -> str:
        return f"COLUMNAR(max_record_batch_bytes={self.max_record_batch_bytes})"


COLUMNAR = ColumnarDecoding()


_original_partition_records: Any = fetcher.PartitionRecords


class RawMemoryRecords:
    """aiokafka's MemoryRecords that also keeps the bytes it was made from."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._records = MemoryRecords(data)

    def has_next(self) -> bool:
        """Whether a complete batch remains."""
        return bool(self._records.has_next())

    def next_batch(self) -> Any:
        """The next batch, as aiokafka reads it."""
        return self._records.next_batch()

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
        self.next_fetch_offset = fetch_offset

    def __iter__(self) -> ColumnarPartitionRecords:
        return self

    @property
    def held_bytes(self) -> int:
        """Bytes fetched and not yet decoded (none once handed over)."""
        return 0 if self._data is None else len(self._data)

    def __next__(self) -> RecordColumns:
        if self._data is None:
            raise StopIteration
        data, self._data = self._data, None
        topic, partition = self._tp.topic, self._tp.partition
        try:
            columns = decode_records(
                topic,
                partition,
                data,
                self.next_fetch_offset,
                check_crcs=self._check_crcs,
                aborted_transactions=self._aborted,
                read_committed=self._read_committed,
                max_record_batch_bytes=self._decoding.max_record_batch_bytes,
            )
        except CorruptRecords as exc:
            # Batches that cannot be told apart (a broken broker): nothing of this response
            # is handed over and the position stays, so it is fetched again. Raising would
            # lose the records aiokafka already handed over of other partitions in this poll.
            metrics.CORRUPT_FETCHES.labels(topic).inc()
            log.error("%s:%d at offset %d: %s", topic, partition, self.next_fetch_offset, exc)
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
        if columns.count == 0:
            raise StopIteration
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

"""aiokafka's fetcher handing over Arrow columns instead of a ConsumerRecord per record.

An ``AIOKafkaConsumer`` created with ``key_deserializer=COLUMNAR`` (after :func:`install`)
returns from ``getmany`` one :class:`~consumer_sdk.record_columns.RecordColumns` per partition
and fetch response, decoded by consumer_sdk.record_columns. Everything else stays aiokafka's:
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

from typing import Any

from aiokafka.consumer import fetcher
from aiokafka.record.memory_records import MemoryRecords

from consumer_sdk.record_columns import RecordColumns, decode_records

_READ_COMMITTED = 1


class _ColumnarMarker:
    """Passed as ``key_deserializer``: never called, only recognised by the fetcher."""

    def __call__(self, key: bytes | None) -> bytes | None:
        raise TypeError("COLUMNAR is a marker, not a deserializer")

    def __repr__(self) -> str:
        return "COLUMNAR"


COLUMNAR = _ColumnarMarker()

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
    ) -> None:
        self._tp = tp
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
        columns = decode_records(
            self._tp.topic,
            self._tp.partition,
            data,
            self.next_fetch_offset,
            check_crcs=self._check_crcs,
            aborted_transactions=self._aborted,
            read_committed=self._read_committed,
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
    if key_deserializer is COLUMNAR and isinstance(records, RawMemoryRecords):
        return ColumnarPartitionRecords(
            tp, records, aborted_transactions, fetch_offset, check_crcs, isolation_level
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

"""Records fetched and not yet handed to the sink, cut into batches of at most N bytes.

Pure (no client, no sink): the consumer adds what each poll returned and takes batches out.
Bytes (key + value, what ``batch_bytes`` counts) are summed per partition when records are
added; a batch knows its bytes per partition without walking its records again (only the
partition a batch ends in is walked, to cut it).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from consumer_sdk.sink import Record

Partition = TypeVar("Partition", bound=Hashable)


class Message(Protocol):
    """What a Kafka client hands over per record (aiokafka's ConsumerRecord has these)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]] | None: ...


@dataclass
class Batch(Generic[Partition]):
    """Records taken out together: per partition a run of consecutive fetched records, and
    their bytes."""

    records: dict[Partition, list[Record]] = field(default_factory=dict)
    sizes: dict[Partition, int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.records)

    @property
    def bytes(self) -> int:
        """Key and value bytes of every record."""
        return sum(self.sizes.values())

    def next_offsets(self) -> dict[Partition, int]:
        """The offset to commit per partition once the batch is stored."""
        return {p: recs[-1].offset + 1 for p, recs in self.records.items()}


class PendingRecords(Generic[Partition]):
    """Fetched records per partition, in offset order, with their bytes."""

    def __init__(self) -> None:
        self._records: dict[Partition, list[Record]] = {}
        self._bytes: dict[Partition, int] = {}
        self.bytes = 0

    def add(self, partition: Partition, messages: Sequence[Message]) -> None:
        """Append a poll's ``messages`` of ``partition``. Offsets already held come back
        after a repositioning (a rebalance that handed the partition back, a resume seek):
        they are kept once."""
        held = self._records.get(partition)
        last = held[-1].offset if held else -1
        start = 0
        while start < len(messages) and messages[start].offset <= last:
            start += 1
        if start == len(messages):
            return
        fresh = [
            Record(
                m.topic,
                m.partition,
                m.offset,
                m.timestamp,
                m.key,
                m.value,
                tuple(m.headers) if m.headers else (),
            )
            for m in (messages[start:] if start else messages)
        ]
        size = sum(len(r.key or b"") + len(r.value or b"") for r in fresh)
        self._records.setdefault(partition, []).extend(fresh)
        self._bytes[partition] = self._bytes.get(partition, 0) + size
        self.bytes += size

    def take(
        self, partitions: Collection[Partition] | None = None, limit: int | None = None
    ) -> Batch[Partition]:
        """Take the records of ``partitions`` (all if None) out: at most ``limit`` bytes of
        them if given (a record larger than that goes alone), a prefix of each partition's
        records, the rest staying for the next batch."""
        batch: Batch[Partition] = Batch()
        taken = 0
        for partition in list(self._records):
            if partitions is not None and partition not in partitions:
                continue
            records = self._records.pop(partition)
            size = self._bytes.pop(partition)
            if limit is not None and taken + size > limit:
                cut, cut_size = _prefix_within(records, limit - taken, alone=taken == 0)
                if cut < len(records):
                    self._records[partition] = records[cut:]
                    self._bytes[partition] = size - cut_size
                    records, size = records[:cut], cut_size
            if records:
                batch.records[partition] = records
                batch.sizes[partition] = size
                taken += size
            if partition in self._records or (limit is not None and taken >= limit):
                break  # the batch is full
        self.bytes -= taken
        return batch

    def drop(self, partition: Partition) -> None:
        """Forget the records of ``partition`` (it was revoked before they were written)."""
        self._records.pop(partition, None)
        self.bytes -= self._bytes.pop(partition, 0)


def _prefix_within(records: Sequence[Record], budget: int, alone: bool) -> tuple[int, int]:
    """How many leading ``records`` fit in ``budget`` bytes, and their bytes; with ``alone``
    at least one (a record bigger than a batch is a batch of its own)."""
    count = total = 0
    for record in records:
        size = record.size
        if total + size > budget and not (alone and count == 0):
            break
        count += 1
        total += size
    return count, total

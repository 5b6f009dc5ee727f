"""Records fetched and not yet handed to the sink, cut into batches of at most N bytes.

Pure (no client, no sink): the consumer adds what each poll returned and takes batches out.
Bytes (what ``batch_bytes`` counts: :attr:`consumer_sdk.sink.Record.size`, a record as it
sits in a batch's columns) are summed per partition when records are added; a batch knows
its bytes per partition without walking its records again (only the partition a batch ends
in is walked, to cut it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from consumer_sdk.sink import Record

Partition = TypeVar("Partition", bound=Hashable)
Rows = TypeVar("Rows")


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
    def headers(self) -> Sequence[tuple[str, bytes | None]] | None: ...


@dataclass
class Taken(Generic[Partition, Rows]):
    """What a pending buffer hands out: per partition its rows and their bytes."""

    records: dict[Partition, Rows] = field(default_factory=dict)
    sizes: dict[Partition, int] = field(default_factory=dict)
    # Records waiting in Kafka behind the batch when it was cut (set by the consumer; the
    # drain meter counts a batch with at least its own size behind it as saturated).
    behind: int = 0

    def __bool__(self) -> bool:
        return bool(self.records)

    @property
    def bytes(self) -> int:
        """Bytes of every record, as ``batch_bytes`` counts them."""
        return sum(self.sizes.values())


@dataclass
class Batch(Taken[Partition, list[Record]]):
    """Records taken out together: per partition a run of consecutive fetched records, and
    their bytes."""

    def next_offsets(self) -> dict[Partition, int]:
        """The offset to commit per partition once the batch is stored."""
        return {p: recs[-1].offset + 1 for p, recs in self.records.items()}


Holding = TypeVar("Holding")


def take_prefixes(
    held: dict[Partition, Holding],
    partitions: Collection[Partition] | None,
    limit: int | None,
    size_of: Callable[[Holding], int],
    split: Callable[[Holding, int, bool], tuple[Holding | None, Holding | None]],
) -> list[tuple[Partition, Holding]]:
    """The cut both pending buffers share: take the holdings of ``partitions`` (all if
    None) out of ``held`` in order; when one would pass ``limit`` bytes, ``split`` it into
    the prefix that fits (taken; with ``alone`` at least one record) and the rest (put back),
    and stop once the batch is full."""
    out: list[tuple[Partition, Holding]] = []
    taken = 0
    for partition in list(held):
        if partitions is not None and partition not in partitions:
            continue
        holding: Holding | None = held.pop(partition)
        assert holding is not None
        if limit is not None and taken + size_of(holding) > limit:
            holding, rest = split(holding, limit - taken, taken == 0)
            if rest is not None:
                held[partition] = rest
        if holding is not None:
            out.append((partition, holding))
            taken += size_of(holding)
        if partition in held or (limit is not None and taken >= limit):
            break  # the batch is full
    return out


class PendingRecords(Generic[Partition]):
    """Fetched records per partition, in offset order, with their bytes."""

    def __init__(self) -> None:
        self._held: dict[Partition, tuple[list[Record], int]] = {}  # records, their bytes
        self.bytes = 0

    def add(self, partition: Partition, messages: Sequence[Message]) -> None:
        """Append a poll's ``messages`` of ``partition``. Offsets already held come back
        after a repositioning (a rebalance that handed the partition back, a resume seek):
        they are kept once."""
        records, size = self._held.get(partition, ([], 0))
        last = records[-1].offset if records else -1
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
        added = sum(r.size for r in fresh)
        records.extend(fresh)
        self._held[partition] = (records, size + added)
        self.bytes += added

    def take(
        self, partitions: Collection[Partition] | None = None, limit: int | None = None
    ) -> Batch[Partition]:
        """Take the records of ``partitions`` (all if None) out: at most ``limit`` bytes of
        them if given (a record larger than that goes alone), a prefix of each partition's
        records, the rest staying for the next batch."""
        batch: Batch[Partition] = Batch()
        for partition, (records, size) in take_prefixes(
            self._held, partitions, limit, _held_bytes, _split_records
        ):
            batch.records[partition] = records
            batch.sizes[partition] = size
        self.bytes -= batch.bytes
        return batch

    def drop(self, partition: Partition) -> None:
        """Forget the records of ``partition`` (it was revoked before they were written)."""
        _, size = self._held.pop(partition, ([], 0))
        self.bytes -= size

    def first_offsets(self, partitions: Collection[Partition]) -> dict[Partition, int]:
        """The offset of the oldest record held per partition of ``partitions`` that holds
        any: where reading must resume if they are dropped."""
        return {p: self._held[p][0][0].offset for p in partitions if p in self._held}


def _held_bytes(holding: tuple[list[Record], int]) -> int:
    return holding[1]


def _split_records(
    holding: tuple[list[Record], int], budget: int, alone: bool
) -> tuple[tuple[list[Record], int] | None, tuple[list[Record], int] | None]:
    records, size = holding
    cut, cut_size = _prefix_within(records, budget, alone)
    prefix = (records[:cut], cut_size) if cut else None
    rest = (records[cut:], size - cut_size) if cut < len(records) else None
    return prefix, rest


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

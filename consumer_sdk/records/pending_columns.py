"""Fetched columns not yet handed to the sink, cut into batches of at most N bytes.

The columnar twin of consumer_sdk.records.pending: the same contract (add what a poll returned, take
batches by bytes, drop a revoked partition), with each partition's records held as the Arrow
chunks the columnar fetch decoded (consumer_sdk.records.record_columns.RecordColumns). Nothing here
touches a record: chunks are kept whole, copied in two where a batch ends, and measured from
their offsets. Pure (no client, no sink).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np
import pyarrow as pa

from consumer_sdk.records.pending import Taken, take_prefixes
from consumer_sdk.records.record_columns import RecordColumns, chunk_bytes, record_sizes

Partition = TypeVar("Partition", bound=Hashable)


@dataclass
class _Held:
    """A partition's chunks, oldest first, and their bytes; ``next_offset`` is the offset
    after the last chunk (past control batches the fetch skipped)."""

    chunks: list[pa.RecordBatch]
    sizes: list[int]
    next_offset: int

    @property
    def bytes(self) -> int:
        return sum(self.sizes)

    @property
    def last_offset(self) -> int:
        return int(self.chunks[-1].column(0)[-1].as_py())


@dataclass
class ColumnBatch(Taken[Partition, pa.Table]):
    """Records taken out together: per partition a table of consecutive fetched records,
    its bytes, and the offset to commit once it is stored."""

    commit_offsets: dict[Partition, int] = field(default_factory=dict)

    def next_offsets(self) -> dict[Partition, int]:
        """The offset to commit per partition once the batch is stored."""
        return dict(self.commit_offsets)


class PendingColumns(Generic[Partition]):
    """Fetched chunks per partition, in offset order, with their bytes."""

    def __init__(self) -> None:
        self._held: dict[Partition, _Held] = {}
        self.bytes = 0

    def add(self, partition: Partition, fetched: Sequence[RecordColumns]) -> None:
        """Append a poll's chunks of ``partition``. Offsets already held come back after a
        repositioning (a rebalance that handed the partition back, a resume seek): they are
        kept once."""
        for columns in fetched:
            chunk = columns.batch
            held = self._held.get(partition)
            if held is not None and chunk.num_rows:
                offsets = np.asarray(chunk.column(0))
                start = int(np.searchsorted(offsets, held.last_offset, side="right"))
                chunk = chunk.slice(start)
            if chunk.num_rows == 0:
                if held is not None:
                    held.next_offset = max(held.next_offset, columns.next_offset)
                continue
            size = chunk_bytes(chunk)
            if held is None:
                self._held[partition] = _Held([chunk], [size], columns.next_offset)
            else:
                held.chunks.append(chunk)
                held.sizes.append(size)
                held.next_offset = max(held.next_offset, columns.next_offset)
            self.bytes += size

    def take(
        self, partitions: Collection[Partition] | None = None, limit: int | None = None
    ) -> ColumnBatch[Partition]:
        """Take the records of ``partitions`` (all if None) out: at most ``limit`` bytes of
        them if given (a record larger than that goes alone), a prefix of each partition's
        records, the rest staying for the next batch."""
        batch: ColumnBatch[Partition] = ColumnBatch()
        for partition, held in take_prefixes(
            self._held, partitions, limit, _held_bytes, _split_held
        ):
            batch.records[partition] = pa.Table.from_batches(held.chunks)
            batch.sizes[partition] = held.bytes
            batch.commit_offsets[partition] = held.next_offset
        self.bytes -= batch.bytes
        return batch

    def drop(self, partition: Partition) -> None:
        """Forget the records of ``partition`` (it was revoked before they were written)."""
        held = self._held.pop(partition, None)
        if held is not None:
            self.bytes -= held.bytes

    def first_offsets(self, partitions: Collection[Partition]) -> dict[Partition, int]:
        """The offset of the oldest record held per partition of ``partitions`` that holds
        any (refused records are rows too): where reading must resume if they are dropped."""
        return {
            p: int(self._held[p].chunks[0].column(0)[0].as_py())
            for p in partitions
            if p in self._held
        }


def _held_bytes(held: _Held) -> int:
    return held.bytes


def _split_held(held: _Held, budget: int, alone: bool) -> tuple[_Held | None, _Held | None]:
    """The prefix of ``held`` that fits ``budget`` bytes (with ``alone`` at least one
    record: a record bigger than a batch is a batch of its own), and the rest."""
    prefix: list[pa.RecordBatch] = []
    prefix_sizes: list[int] = []
    used = 0
    for index, (chunk, size) in enumerate(zip(held.chunks, held.sizes, strict=True)):
        if used + size <= budget:
            prefix.append(chunk)
            prefix_sizes.append(size)
            used += size
            continue
        cumulative = np.cumsum(record_sizes(chunk))
        count = int(np.searchsorted(cumulative, budget - used, side="right"))
        if count == 0 and alone and not prefix:
            count = 1
        rest_chunks = held.chunks[index + 1 :]
        rest_sizes = held.sizes[index + 1 :]
        head_size = int(cumulative[count - 1]) if count else 0
        if count:
            prefix.append(_compact(chunk.slice(0, count)) if count < chunk.num_rows else chunk)
            prefix_sizes.append(head_size)
        if count < chunk.num_rows:
            rest_chunks = [_compact(chunk.slice(count)), *rest_chunks]
            rest_sizes = [size - head_size, *rest_sizes]
        taken = _Held(prefix, prefix_sizes, 0) if prefix else None
        if taken is not None:
            taken.next_offset = taken.last_offset + 1  # the rest is still to be written
        rest = _Held(rest_chunks, rest_sizes, held.next_offset) if rest_chunks else None
        return taken, rest
    return held, None


def _compact(part: pa.RecordBatch) -> pa.RecordBatch:
    """A copy of a slice in buffers of its own. Both parts of a cut chunk are copied: a
    slice keeps its whole chunk alive, so the batch in the sink would hold the records left
    for the next batch, and they the batch's, beyond what batch_bytes counts for either.
    The copy comes from the system allocator, as the decoded chunks do (numpy): measured,
    Arrow's default pool (mimalloc) kept 6-9 MiB resident for the 1-3 MiB of copies."""
    pool = pa.system_memory_pool()
    return pa.RecordBatch.from_arrays(
        [pa.concat_arrays([column], memory_pool=pool) for column in part.columns],
        schema=part.schema,
    )

"""Write stage: each batch into the sink, a write per topic, concurrently; then its commit.

Batches are written while the next one fills. With a :class:`~consumer_sdk.sink.StagingSink`
up to ``depth`` batches are in the sink at once: a batch stages while the one before it is
still being written, and publishes (then commits) only after it. A write that fails is
retried with backoff, whole, and never committed past; at shutdown it is given up
(:class:`WriteAbandoned`) and nothing after it is written or committed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from consumer_sdk import metrics
from consumer_sdk.pipeline.commit import OffsetCommits
from consumer_sdk.pipeline.retry import RetryPolicy
from consumer_sdk.records.pending import Batch
from consumer_sdk.records.pending_columns import ColumnBatch
from consumer_sdk.sink import PartitionsFenced, Record, Sink, StagingSink, records_table
from contract.stopping import sleep_unless_stopped

log = logging.getLogger(__name__)

AnyBatch = Batch[KafkaTopicPartition] | ColumnBatch[KafkaTopicPartition]


@dataclass(frozen=True)
class WrittenBatch:
    """What the accounting needs of a batch once it is written: per partition its records,
    bytes, and the offset committed; its rows are gone by then."""

    records: Mapping[KafkaTopicPartition, int]
    sizes: Mapping[KafkaTopicPartition, int]
    next_offsets: Mapping[KafkaTopicPartition, int]
    behind: int = 0
    # Monotonic times the sink started and finished the batch (staging to publication).
    sink_started: float = 0.0
    sink_done: float = 0.0

    @property
    def saturated(self) -> bool:
        """At least as many records waited in Kafka behind the batch as it held when cut."""
        total = sum(self.records.values())
        return total > 0 and self.behind >= total

    @classmethod
    def of(cls, batch: AnyBatch) -> WrittenBatch:
        """The summary of ``batch`` (taken before its rows are handed to the sink)."""
        return cls(
            {tp: len(rows) for tp, rows in batch.records.items()},
            dict(batch.sizes),
            batch.next_offsets(),
            batch.behind,
        )


NOTHING_FENCED = PartitionsFenced(frozenset())
# How long the sink took to make a batch visible (staging to publication), over the last
# this many batches: what a batch due by the freshness bound is cut that much earlier for.
WRITE_TIMES_KEPT = 32


class WriteAbandoned(RuntimeError):
    """A sink write kept failing until shutdown; its records were not committed."""


class BatchWriter:
    """Writes batches into a sink in order and hands their offsets to the commit stage."""

    def __init__(
        self,
        sink: Sink,
        commits: OffsetCommits,
        *,
        group: str,
        writes_in_flight: int,
        retry: RetryPolicy,
        stopping: asyncio.Event,
        on_written: Callable[[WrittenBatch], None],
        on_taken: Callable[[set[KafkaTopicPartition]], None] = lambda taken: None,
        on_slot_free: Callable[[], None] = lambda: None,
    ) -> None:
        self.sink = sink
        self._commits = commits
        self._group = group
        self._stager: StagingSink | None = sink if isinstance(sink, StagingSink) else None
        self.depth = writes_in_flight if self._stager is not None else 1
        self._retry = retry
        self._stopping = stopping
        self._on_written = on_written
        self._on_taken = on_taken
        self._on_slot_free = on_slot_free
        # Batches handed to the sink, oldest first; each publishes after the one before it.
        self._writes: deque[asyncio.Task[None]] = deque()
        # The partitions each write in flight holds records of (see :meth:`drain`).
        self._holding: dict[asyncio.Task[None], frozenset[KafkaTopicPartition]] = {}
        # A write was given up at shutdown: nothing may be written or committed after it.
        self.abandoned = False
        self._write_times: deque[float] = deque(maxlen=WRITE_TIMES_KEPT)
        self._recent_write_s = 0.0

    def recent_write_s(self) -> float:
        """How long the sink takes to make a batch visible lately: the 90th percentile of
        the last batches' times from staging to publication (0 before the first)."""
        return self._recent_write_s

    def busy(self) -> bool:
        """True while ``depth`` batches are being written: a new one would wait."""
        return self.free_slots() == 0

    def holding(self) -> frozenset[KafkaTopicPartition]:
        """The partitions the writes in flight hold records of."""
        return frozenset().union(*self._holding.values())

    def free_slots(self) -> int:
        """How many more batches could be written at once now."""
        return max(0, self.depth - sum(not task.done() for task in self._writes))

    def submit(self, batch: AnyBatch) -> None:
        """Start writing ``batch``; it publishes after every batch submitted before it."""
        previous = self._writes[-1] if self._writes else None
        holding = frozenset(batch.records)
        task = asyncio.create_task(self.write(batch, previous))
        self._writes.append(task)
        self._holding[task] = holding
        task.add_done_callback(self._holding.pop)
        task.add_done_callback(lambda _: self._on_slot_free())

    async def drain(self, partitions: Collection[KafkaTopicPartition]) -> None:
        """Wait until no write in flight holds records of ``partitions`` (whatever their
        outcome). A fencing sink takes the claim a batch was read under when it stages the
        batch: a write staged after this member claimed its partitions anew would carry the
        new claim, and land rows read under the old one past a batch of them that was
        fenced (a gap). So a claim waits for those writes first."""
        wanted = frozenset(partitions)
        holding = [task for task, held in self._holding.items() if held & wanted]
        if holding:
            log.info(
                "claiming %d partition(s) after the %d write(s) in flight holding records of them",
                len(wanted),
                len(holding),
            )
            await asyncio.wait(holding)

    async def settle(self, keep: int = 0) -> None:
        """Wait, oldest first, until at most ``keep`` batches are being written; then raise
        the first error a write raised. Shielded: a cancelled waiter leaves the write
        running and still owned, so no later batch of the same partitions starts before it
        ends."""
        failure: Exception | None = None
        while len(self._writes) > keep:
            task = self._writes[0]
            try:
                await asyncio.shield(task)
            except Exception as exc:  # the later writes are still waited for
                failure = failure or exc
            finally:
                if task.done() and self._writes and self._writes[0] is task:
                    self._writes.popleft()
        if failure is not None:
            raise failure

    async def write(self, batch: AnyBatch, previous: asyncio.Task[None] | None = None) -> None:
        """Write one batch (a write per topic, concurrently), then commit its offsets. With
        a staging sink the batch stages at once and publishes after ``previous`` (the batch
        before it) succeeded; if that one was abandoned, this one is too."""
        written = WrittenBatch.of(batch)
        if self.abandoned:
            raise WriteAbandoned(
                f"a batch of {len(written.records)} partition(s) was not written: an earlier "
                "batch was given up at shutdown, and nothing is committed past it"
            )
        by_topic = self._by_topic(batch)
        oldest = {topic: oldest_timestamp_ms(table) for topic, table in by_topic.items()}
        # The sink's tables are copies (one chunk per column): the fetched chunks go now, so
        # a batch in the sink is held once, not twice.
        batch.records.clear()
        del batch
        started = time.monotonic()
        staged = await asyncio.gather(*(self._stage(t, recs) for t, recs in by_topic.items()))
        if previous is not None:
            await asyncio.wait({previous})
            if previous.cancelled() or previous.exception() is not None:
                await asyncio.gather(*(self._discard(s) for s in staged))
                self.abandoned = True
                raise WriteAbandoned(
                    f"a batch of {len(written.records)} partition(s) was not written: the "
                    "batch before it was not, and batches publish in order"
                )
        refusals = await asyncio.gather(
            *(
                self._write(topic, recs, first)
                for (topic, recs), first in zip(by_topic.items(), staged, strict=True)
            )
        )
        written = dataclasses.replace(written, sink_started=started, sink_done=time.monotonic())
        self._write_times.append(written.sink_done - started)
        # Kept per write rather than per call: the filler asks on every poll.
        ordered = sorted(self._write_times)
        self._recent_write_s = ordered[int(0.9 * (len(ordered) - 1))]
        self._observe_staleness(oldest)
        # Every write succeeded: commit. The commit runs while the next batch fills (it is
        # off the critical path); commits stay in order because each waits for the last.
        offsets = dict(written.next_offsets)
        fenced = PartitionsFenced(
            frozenset().union(*(r.partitions for r in refusals)),
            frozenset().union(*(r.taken for r in refusals)),
        )
        self._forget_fenced(offsets, fenced)
        await self._commits.submit(offsets)
        self._on_written(written)

    def _observe_staleness(self, oldest: dict[str, int | None]) -> None:
        """How stale each topic's table was when this batch's write returned: now minus its
        oldest record's Kafka timestamp (producers' clocks: never below 0)."""
        now_ms = wall_clock() * 1000
        for topic, timestamp in oldest.items():
            if timestamp is not None and timestamp >= 0:
                staleness = max(0.0, now_ms - timestamp) / 1000
                metrics.TABLE_STALENESS.labels(self._group, topic).observe(staleness)

    def _by_topic(self, batch: AnyBatch) -> dict[str, pa.Table]:
        """Each topic's part of ``batch`` as one table (:data:`~consumer_sdk.sink.SINK_SCHEMA`),
        a chunk per fetched chunk: nothing is copied (a sink that wants fewer chunks, as
        Spark wants fewer tasks, arranges that itself)."""
        if isinstance(batch, Batch):
            lists: dict[str, list[Record]] = {}
            for recs in batch.records.values():
                lists.setdefault(recs[0].topic, []).extend(recs)
            return {topic: records_table(recs) for topic, recs in lists.items()}
        tables: dict[str, list[pa.Table]] = {}
        for tp, table in batch.records.items():
            partition = pa.array(np.full(len(table), tp.partition, np.int32))
            tables.setdefault(tp.topic, []).append(table.append_column("partition", partition))
        return {topic: pa.concat_tables(parts) for topic, parts in tables.items()}

    def _forget_fenced(
        self, offsets: dict[KafkaTopicPartition, int], fenced: PartitionsFenced
    ) -> None:
        """Partitions whose rows the sink refused (another member claimed them): nothing of
        them is committed, now or later (a commit past rows the table lacks would make their
        next owner skip them); their new owner resumes from where the sink is. Those taken
        from this member's latest claim go to ``on_taken``."""
        gone = [KafkaTopicPartition(tp.topic, tp.partition) for tp in fenced.partitions]
        for ktp in gone:
            offsets.pop(ktp, None)
        self._commits.forget(gone)
        if fenced.partitions:
            metrics.PARTITIONS_FENCED.labels(self._group).inc(len(fenced.partitions))
            log.warning("%s", fenced)
        if fenced.taken:
            self._on_taken({KafkaTopicPartition(tp.topic, tp.partition) for tp in fenced.taken})

    async def _stage(self, topic: str, table: pa.Table) -> object | None:
        """Stage ``table`` if the sink stages; None if it does not, or if staging failed
        (then :meth:`_write` writes it whole, with retries)."""
        if self._stager is None:
            return None
        try:
            return await self._stager.stage(topic, table)
        except Exception as exc:
            metrics.WRITE_RETRIES.labels(self._group, topic).inc()
            log.warning("staging %d records of %s failed (%r)", table.num_rows, topic, exc)
            return None

    async def _discard(self, staged: object | None) -> None:
        """Drop a staged batch; a failure only leaves files the sink cleans up later."""
        if staged is None or self._stager is None:
            return
        try:
            await self._stager.discard(staged)
        except Exception as exc:
            log.warning("discarding a staged batch failed (%r)", exc)

    async def _write(self, topic: str, table: pa.Table, staged: object | None) -> PartitionsFenced:
        """Publish ``staged`` (or write ``table`` if nothing is staged); on failure write
        it again, with backoff, until they are in or a stop is requested. Returns what the
        sink refused as claimed by another member (not retried; none: NOTHING_FENCED)."""
        delays = iter(self._retry.delays())
        while True:
            try:
                if staged is not None and self._stager is not None:
                    await self._stager.publish(staged)
                else:
                    await self.sink.write(topic, table)
                return NOTHING_FENCED
            except PartitionsFenced as fenced:
                return fenced
            except Exception as exc:
                await self._discard(staged)
                staged = None  # retries write the records whole
                if self._stopping.is_set():
                    self.abandoned = True
                    raise WriteAbandoned(
                        f"write of {table.num_rows} records of {topic} failed at shutdown: {exc!r}"
                    ) from exc
                delay = next(delays)
                metrics.WRITE_RETRIES.labels(self._group, topic).inc()
                log.warning(
                    "sink write of %d records of %s failed (%r); retry in %.1f s",
                    table.num_rows,
                    topic,
                    exc,
                    delay,
                )
                await sleep_unless_stopped(self._stopping, delay)


def wall_clock() -> float:
    """Seconds since the epoch, as Kafka timestamps count (a seam for tests)."""
    return time.time()


def oldest_timestamp_ms(table: pa.Table) -> int | None:
    """The smallest Kafka timestamp (ms) of a batch's table; None when it has no rows."""
    if table.num_rows == 0:
        return None
    found = pc.min(table.column("timestamp")).as_py()
    return None if found is None else int(found)

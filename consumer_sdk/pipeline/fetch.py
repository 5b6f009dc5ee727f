"""Fetch stage: the client's records into the pending buffer until a batch is full.

A batch is full at ``batch_bytes`` or after ``wait_time_secs``, whichever comes first, or
when the member stops reading. With a freshness bound (``max_staleness_secs``) it is due
sooner: once its first record has waited the bound less the sink's recent write time, so
that record is in the table about the bound after it was read. While every write slot of
the sink is taken past the batch's due time it goes on filling (up to ``batch_bytes``): it
could not be written sooner, and a batch cut at the wait alone carries ``wait_time_secs`` of
records per write however long a write takes, so a sink slower than that fell behind for
good. Records of partitions being revoked are not taken: a cooperative member keeps
fetching while its listener flushes them. The first offset not taken is kept (``skipped``):
the client's position is past it, and a release that resumed from the position would lose
those records.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from consumer_sdk import metrics
from consumer_sdk.records.pending import PendingRecords
from consumer_sdk.records.pending_columns import PendingColumns
from consumer_sdk.records.record_columns import RecordColumns

log = logging.getLogger(__name__)
POLL_SLICE_MS = 200
# While a leaving member hands its partitions over, it polls in short slices: it leaves the
# group as soon as it owns nothing, and the hand-over round waits for that.
LEAVING_POLL_SLICE_MS = 20
# getmany returns buffered records without yielding to the event loop; in slices of this
# many, with a yield after each, the loop starts the previous batch's write (and answers
# heartbeats) while a batch fills, instead of after it.
POLL_MAX_RECORDS = 500
# On the columnar path one "record" is a piece of a partition's fetch (up to a few MiB),
# decoded as it is taken: one per poll, so that a batch inflating to many pieces is decoded
# only as fast as the pending buffer empties, never all at once.
POLL_MAX_PIECES = 1
# Past the wait, while the sink has no free write slot: polls this short, so the batch goes
# to the sink soon after a slot frees.
BUSY_POLL_SLICE_MS = 50
# A batch due by the freshness bound fills for at least this share of the bound, however
# slow the sink has been: a sink slower than the bound gets fewer, larger writes, not a
# write per poll.
MIN_FILL_SHARE = 0.2
# After a failed poll: aiokafka retries the group by itself, polling again is the retry.
POLL_ERROR_PAUSE_S = 0.5

AnyPending = PendingRecords[KafkaTopicPartition] | PendingColumns[KafkaTopicPartition]


def first_offset(fetched: Sequence[Any]) -> int | None:
    """The offset of the first record of a poll's records (or Arrow pieces) of one partition;
    None when it holds none."""
    for item in fetched:
        if isinstance(item, RecordColumns):
            if item.count:
                return int(item.batch.column(0)[0].as_py())
            continue
        return int(item.offset)
    return None


def next_offset(fetched: Sequence[Any]) -> int | None:
    """The offset after a poll's records (or Arrow pieces) of one partition; None when it
    holds none."""
    for item in reversed(fetched):
        if isinstance(item, RecordColumns):
            return item.next_offset
        return int(item.offset) + 1
    return None


class FetchClient(Protocol):
    """What the stage needs of the Kafka client (aiokafka's consumer has it)."""

    async def getmany(
        self, *partitions: KafkaTopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> Mapping[KafkaTopicPartition, Sequence[Any]]:
        """Records fetched since the last call, per partition."""


class BatchFiller:
    """Polls the client into ``pending`` until a batch is due."""

    def __init__(
        self,
        pending: AnyPending,
        *,
        group: str,
        batch_bytes: int,
        wait_time_secs: float,
        staleness_bound_s: float | None = None,
        rewound: Callable[[KafkaTopicPartition, int], bool] | None = None,
    ) -> None:
        self.pending = pending
        # Told of a partition whose records start below where its records taken so far
        # ended (a reset after OffsetOutOfRange, or a seek back of ours), with their first
        # offset; it says whether to take them (false: it has moved the partition).
        self._rewound = rewound
        self._read_to: dict[KafkaTopicPartition, int] = {}
        self._group = group
        self._batch_bytes = batch_bytes
        self._wait_time_s = wait_time_secs
        self._staleness_bound_s = staleness_bound_s
        self._max_records = (
            POLL_MAX_PIECES if isinstance(pending, PendingColumns) else POLL_MAX_RECORDS
        )
        # Partitions being revoked: what is fetched of them meanwhile is not taken, and the
        # first offset not taken is kept until the revocation ends (:meth:`revoking_ended`).
        self.revoking: set[KafkaTopicPartition] = set()
        self.skipped: dict[KafkaTopicPartition, int] = {}

    async def fill(
        self,
        client: Callable[[], FetchClient | None],
        keep_reading: Callable[[], bool],
        leaving: asyncio.Event,
        sink_busy: Callable[[], bool] = lambda: False,
        write_time_s: Callable[[], float] = lambda: 0.0,
    ) -> None:
        """Fetch until ``batch_bytes``, ``keep_reading()`` is false, or the batch is due
        (``wait_time_secs`` passed, or its first record waited the freshness bound less
        ``write_time_s()``) and ``sink_busy()`` is false (a write slot is free)."""
        started = time.monotonic()
        # Records left from the last batch (it was cut at batch_bytes) count from now.
        first_taken = started if self.pending.bytes else None
        while keep_reading() and self.pending.bytes < self._batch_bytes:
            if first_taken is None and self.pending.bytes:
                first_taken = time.monotonic()
            deadline = self.due_at(started, first_taken, write_time_s)
            slice_ms = LEAVING_POLL_SLICE_MS if leaving.is_set() else POLL_SLICE_MS
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                if not sink_busy():
                    return
                remaining_ms = BUSY_POLL_SLICE_MS
            consumer = client()
            if consumer is None:
                return
            try:
                fetched = await consumer.getmany(
                    timeout_ms=min(slice_ms, remaining_ms), max_records=self._max_records
                )
            except KafkaError as exc:
                # aiokafka hands group errors (e.g. a failed SyncGroup) to the caller once and
                # keeps its coordination loop running: polling again is the rejoin retry.
                metrics.POLL_ERRORS.labels(self._group, type(exc).__name__).inc()
                log.warning("poll failed, retrying (group rejoins by itself): %r", exc)
                await asyncio.sleep(POLL_ERROR_PAUSE_S)
                continue
            for ktp, messages in fetched.items():
                first = first_offset(messages)
                if ktp in self.revoking:
                    if first is not None:
                        self.skipped.setdefault(ktp, first)
                    continue
                if self._went_back(ktp, first):
                    continue
                self.pending.add(ktp, messages)
                if (end := next_offset(messages)) is not None:
                    self._read_to[ktp] = end
            await asyncio.sleep(0)

    def _went_back(self, ktp: KafkaTopicPartition, first: int | None) -> bool:
        """Whether records of ``ktp`` starting at ``first`` are not to be taken: they start
        below where it was read to, and the ``rewound`` hook has moved it."""
        if first is None or self._rewound is None or first >= self._read_to.get(ktp, first):
            return False
        return not self._rewound(ktp, first)

    def read_from(self, partitions: Iterable[KafkaTopicPartition]) -> None:
        """``partitions`` are read from wherever they are now (a jump back checked, or a
        new assignment): their next records are taken whatever their offsets."""
        for ktp in partitions:
            self._read_to.pop(ktp, None)

    def due_at(
        self, started: float, first_taken: float | None, write_time_s: Callable[[], float]
    ) -> float:
        """When the batch begun at ``started`` is due (monotonic): ``wait_time_secs`` after
        its start, or sooner by the freshness bound once it holds a record (taken at
        ``first_taken``)."""
        due = started + self._wait_time_s
        bound = self._staleness_bound_s
        if bound is None or first_taken is None:
            return due
        fill_s = max(bound - write_time_s(), bound * MIN_FILL_SHARE)
        return min(due, first_taken + fill_s)

    def revoking_ended(self, partitions: set[KafkaTopicPartition]) -> None:
        """``partitions`` are no longer being revoked: what was skipped of them is settled
        (their release or flush is done)."""
        self.revoking -= partitions
        for tp in partitions:
            self.skipped.pop(tp, None)
            self._read_to.pop(tp, None)

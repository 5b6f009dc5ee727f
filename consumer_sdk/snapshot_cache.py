"""Keeps the latest speed snapshot in memory for the assignor (a background reader).

Reads the speeds topic without joining a group (every partition assigned, starting at its
last record), keeps the newest valid snapshot of this group, and counts what it ignored.
The assignor asks :meth:`SnapshotCache.view` during a rebalance: fresh speeds, or None.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from assignor.group_plan import SpeedView
from consumer_sdk import metrics
from contract.kafka_client.metadata import seek_to_tail, topic_partitions
from contract.snapshot import Snapshot, SnapshotError, decode

log = logging.getLogger(__name__)
TAIL_RECORDS = 10
# A snapshot stamped further ahead of this clock is refused: one such record would otherwise
# stay "latest" and make every real one look out of order.
MAX_CLOCK_SKEW_S = 30.0
RETRY_BACKOFF_S = (1.0, 30.0)  # first and longest wait before the reader reconnects


@dataclass
class SnapshotCounters:
    """What the cache saw."""

    accepted: int = 0
    malformed: int = 0
    other_group: int = 0
    out_of_order: int = 0
    from_future: int = 0
    stale_views: int = 0
    reader_failures: int = 0


class SnapshotCache:
    """Background reader of ``topic``; :meth:`view` returns fresh speeds or None."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        group: str,
        max_age_s: float,
        *,
        client_options: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.topic = topic
        self.group = group
        self.max_age_s = max_age_s
        self.counters = SnapshotCounters()
        self.latest: Snapshot | None = None
        self._clock = clock
        self._bootstrap = bootstrap_servers
        self._options = client_options or {}
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._caught_up = asyncio.Event()

    def offer(self, value: bytes | None) -> None:
        """Consider one record value (public for tests and for in-process publishers)."""
        try:
            snapshot = decode(value or b"")
        except Exception as exc:  # SnapshotError, or anything a hostile record provokes
            self.counters.malformed += 1
            metrics.SNAPSHOTS_IGNORED.labels(self.group, "malformed").inc()
            reason = exc if isinstance(exc, SnapshotError) else repr(exc)[:200]
            log.warning("ignoring malformed speed snapshot on %s: %s", self.topic, reason)
            return
        if snapshot.group != self.group:
            self.counters.other_group += 1
            metrics.SNAPSHOTS_IGNORED.labels(self.group, "other_group").inc()
            return
        ahead = snapshot.timestamp - self._clock()
        if ahead > MAX_CLOCK_SKEW_S:
            self.counters.from_future += 1
            metrics.SNAPSHOTS_IGNORED.labels(self.group, "from_future").inc()
            log.warning(
                "ignoring speed snapshot stamped %.0f s in the future (clock skew bound %.0f s)",
                ahead,
                MAX_CLOCK_SKEW_S,
            )
            return
        if not snapshot.newer_than(self.latest):
            self.counters.out_of_order += 1
            metrics.SNAPSHOTS_IGNORED.labels(self.group, "out_of_order").inc()
            return
        self.latest = snapshot
        self.counters.accepted += 1

    def view(self) -> SpeedView | None:
        """Speeds of the latest snapshot if it is fresh, else None (counted)."""
        snapshot = self.latest
        if snapshot is None:
            return None
        if not snapshot.is_fresh(self._clock(), self.max_age_s):
            self.counters.stale_views += 1
            metrics.SNAPSHOTS_IGNORED.labels(self.group, "stale").inc()
            log.warning(
                "latest speed snapshot is %.0f s old (max %.0f s): not used",
                snapshot.age(self._clock()),
                self.max_age_s,
            )
            return None
        return SpeedView(snapshot.speeds, snapshot.lags, snapshot.drain, snapshot.capacity)

    async def start(self, catch_up_timeout_s: float = 5.0) -> None:
        """Start reading; wait (bounded) until the topic's current end has been read."""
        self._task = asyncio.create_task(self._run(), name=f"snapshot-cache-{self.topic}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._caught_up.wait(), catch_up_timeout_s)

    async def stop(self) -> None:
        """Stop the reader."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _run(self) -> None:
        """Read for ever: whatever stops a reading (an unreachable broker, a deleted topic, a
        bug) is logged in one line, counted, and followed by a new reader after a back-off."""
        backoff = RETRY_BACKOFF_S[0]
        while True:
            try:
                await self._read()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.counters.reader_failures += 1
                metrics.SNAPSHOT_READER_FAILURES.labels(self.group).inc()
                log.warning(
                    "speed snapshot reader of %s stopped (%r); retrying in %.0f s",
                    self.topic,
                    exc,
                    backoff,
                )
                self._caught_up.set()  # nobody waits for a reader that cannot read
                await asyncio.sleep(backoff)
                backoff = min(RETRY_BACKOFF_S[1], backoff * 2)

    async def _read(self) -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self._bootstrap,
            enable_auto_commit=False,
            fetch_max_wait_ms=200,
            **self._options,
        )
        try:
            await consumer.start()
            partitions = await self._wait_for_topic(consumer)
            # A few records back: a malformed newest record must not hide a good one.
            ends = await seek_to_tail(consumer, partitions, TAIL_RECORDS)
            if all(end == 0 for end in ends.values()):
                self._caught_up.set()
            while True:
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    for record in records:
                        self.offer(record.value)
                if not self._caught_up.is_set():
                    positions = {tp: await consumer.position(tp) for tp in partitions}
                    if all(positions[tp] >= ends[tp] for tp in partitions):
                        self._caught_up.set()
        finally:
            await consumer.stop()

    async def _wait_for_topic(self, consumer: AIOKafkaConsumer) -> list[KafkaTopicPartition]:
        """The topic's partitions, waiting for it to exist (no sidecar yet: keep waiting)."""
        warned = False
        while True:
            partitions = (await topic_partitions(consumer, [self.topic])).get(self.topic)
            if partitions:
                return [KafkaTopicPartition(self.topic, p) for p in sorted(partitions)]
            if not warned:
                log.info(
                    "speeds topic %s does not exist yet; assignor uses sticky meanwhile", self.topic
                )
                warned = True
            self._caught_up.set()  # nothing to catch up with
            await asyncio.sleep(2.0)

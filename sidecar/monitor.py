"""The monitor: end offsets (ListOffsets) and the group's committed offsets (OffsetFetch)
of every partition of the group's topics, turned into speeds and lags.

One :meth:`Monitor.poll` per ``--interval``. Whatever cannot be read this round (a broker
down, a topic deleted, a leader moving) is reported in :attr:`Reading.problems` and the
monitor keeps going with what it has.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from assignor import TopicPartition
from consumer_sdk.snapshot import PartitionStat, Snapshot
from sidecar.speed import SpeedTracker

log = logging.getLogger(__name__)


@dataclass
class Reading:
    """One round of measurements."""

    at: float
    end_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def lags(self) -> dict[TopicPartition, float]:
        """End offset minus committed offset (the whole log if nothing was committed)."""
        return {
            tp: float(max(0, end - self.committed.get(tp, 0)))
            for tp, end in self.end_offsets.items()
        }


class Monitor:
    """Reads offsets of ``topics`` for ``group``; keeps speed windows."""

    def __init__(
        self,
        bootstrap_servers: str,
        group: str,
        topics: Sequence[str],
        *,
        window_s: float = 30.0,
        min_span_s: float = 3.0,
        client_options: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not topics:
            raise ValueError("topics must name at least one topic")
        self.group = group
        self.topics = tuple(topics)
        self.tracker = SpeedTracker(window_s, min_span_s)
        self.clock = clock
        self.sequence = 0
        self._bootstrap = bootstrap_servers
        self._options = client_options or {}
        self._consumer: AIOKafkaConsumer | None = None
        self._admin: AIOKafkaAdminClient | None = None

    async def start(self) -> None:
        """Connect (no group membership: the monitor only reads offsets)."""
        self._consumer = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, **self._options)
        await self._consumer.start()
        self._admin = AIOKafkaAdminClient(bootstrap_servers=self._bootstrap, **self._options)
        await self._admin.start()

    async def stop(self) -> None:
        """Disconnect."""
        if self._consumer is not None:
            await self._consumer.stop()
        if self._admin is not None:
            await self._admin.close()
        self._consumer = self._admin = None

    async def poll(self) -> Reading:
        """Read end and committed offsets once and update the speed windows."""
        assert self._consumer is not None and self._admin is not None, "call start() first"
        reading = Reading(at=self.clock())
        partitions = await self._partitions(reading)
        if partitions:
            try:
                ends = await self._consumer.end_offsets(partitions)
                reading.end_offsets = {
                    TopicPartition(tp.topic, tp.partition): int(o) for tp, o in ends.items()
                }
            except KafkaError as exc:
                reading.problems.append(f"end offsets unavailable: {exc!r}")
            try:
                committed = await self._admin.list_consumer_group_offsets(
                    self.group, partitions=partitions
                )
                reading.committed = {
                    TopicPartition(tp.topic, tp.partition): int(meta.offset)
                    for tp, meta in committed.items()
                    if meta.offset >= 0
                }
            except KafkaError as exc:
                reading.problems.append(f"committed offsets unavailable: {exc!r}")
        self.tracker.observe(reading.at, reading.end_offsets)
        self.tracker.forget(TopicPartition(tp.topic, tp.partition) for tp in partitions)
        for problem in reading.problems:
            log.warning("monitor: %s", problem)
        return reading

    async def _partitions(self, reading: Reading) -> list[KafkaTopicPartition]:
        assert self._consumer is not None
        try:
            existing = await self._consumer.topics()
            await self._consumer._client.force_metadata_update()  # see snapshot_cache
        except KafkaError as exc:
            reading.problems.append(f"metadata unavailable: {exc!r}")
            return [KafkaTopicPartition(tp.topic, tp.partition) for tp in self.tracker.windows]
        found: list[KafkaTopicPartition] = []
        for topic in self.topics:
            ids = self._consumer.partitions_for_topic(topic) if topic in existing else None
            if not ids:
                reading.problems.append(f"topic {topic} not found")
                continue
            found.extend(KafkaTopicPartition(topic, p) for p in sorted(ids))
        return found

    def snapshot(
        self,
        reading: Reading,
        unit: str = "records/s",
        wall_time: float | None = None,
    ) -> Snapshot:
        """The speed snapshot for the SDK's assignor (partitions with a speed only)."""
        self.sequence += 1
        lags = reading.lags()
        stats = {
            tp: PartitionStat(speed, lags.get(tp, 0.0), reading.end_offsets.get(tp, 0))
            for tp, speed in self.tracker.speeds().items()
        }
        return Snapshot(
            self.group, self.sequence, time.time() if wall_time is None else wall_time, unit, stats
        )

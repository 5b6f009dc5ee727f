"""Publishes speed snapshots to the speeds topic, where the SDK's assignor reads them, and
reads back the last one a previous incarnation published."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError
from aiokafka.structs import TopicPartition as KafkaTopicPartition

from contract.kafka_client.metadata import seek_to_tail, topic_partitions
from contract.snapshot import Snapshot, decode, newest_of_group

log = logging.getLogger(__name__)

# Records read back from the end of the speeds topic: other groups' snapshots may share it.
TAIL_RECORDS = 50
# The speeds topic holds one small record per snapshot, keyed by group: compaction keeps the
# latest per group, and anything older than a day goes whatever its key (a group that is gone).
SPEEDS_TOPIC_CONFIG = {
    "cleanup.policy": "compact,delete",
    "retention.ms": str(24 * 3600 * 1000),
    "segment.ms": str(3600 * 1000),
    "min.insync.replicas": "1",
}


async def ensure_speeds_topic(
    bootstrap_servers: str,
    topic: str,
    client_options: dict[str, Any] | None = None,
    *,
    what: str = "speeds topic",
) -> bool:
    """Create the speeds topic (or another of the sidecar's topics, named ``what`` in the
    log: one partition, replication min(3, brokers), compacted with a day's retention)
    unless it exists. Returns whether it was created. A cluster without the CreateTopics API
    (the embedded broker) is told about it in a log line, not an error."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, **(client_options or {}))
    await admin.start()
    try:
        if topic in await admin.list_topics():
            return False
        cluster = await admin.describe_cluster()
        replication = max(1, min(3, len(cluster.get("brokers", []))))
        response = await admin.create_topics(
            [NewTopic(topic, 1, replication, topic_configs=SPEEDS_TOPIC_CONFIG)]
        )
        for name, code, *_ in response.topic_errors:
            if code == TopicAlreadyExistsError.errno:
                return False
            if code != 0:
                log.warning("could not create the %s %s: error code %d", what, name, code)
                return False
        log.info("created the %s %s (replication %d)", what, topic, replication)
        return True
    except KafkaError as exc:
        log.warning("could not create the %s %s: %r", what, topic, exc)
        return False
    finally:
        await admin.close()


class SnapshotPublisher:
    """One record per snapshot, keyed by group (so a compacted topic keeps the latest)."""

    def __init__(
        self, bootstrap_servers: str, topic: str, client_options: dict[str, Any] | None = None
    ) -> None:
        self.topic = topic
        self._bootstrap = bootstrap_servers
        self._options = client_options or {}
        self._producer: AIOKafkaProducer | None = None

    def use_options(self, client_options: dict[str, Any]) -> None:
        """The client options the next :meth:`start` connects with."""
        self._options = client_options

    async def start(self) -> None:
        """Create the topic if missing and connect (aiokafka clients must be created inside
        the running loop)."""
        await ensure_speeds_topic(self._bootstrap, self.topic, self._options)
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self._bootstrap, acks="all", **self._options
        )
        await self._producer.start()

    async def stop(self) -> None:
        """Flush and disconnect."""
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def publish(self, snapshot: Snapshot) -> None:
        """Validate (the same schema check readers apply) and send; wait for the ack."""
        value = snapshot.encode()
        decode(value)  # never publish what readers would reject
        assert self._producer is not None, "call start() first"
        await self._producer.send_and_wait(self.topic, value=value, key=snapshot.group.encode())

    async def last_published(self, group: str, timeout_s: float = 5.0) -> Snapshot | None:
        """The newest valid snapshot of ``group`` among the topic's last records (a previous
        incarnation's); None when there is none, or it could not be read in ``timeout_s``
        (one log line: starting without it is only slower to size right)."""
        try:
            return await asyncio.wait_for(self._read_last(group), timeout_s)
        except (KafkaError, TimeoutError) as exc:
            log.warning("the last speed snapshot on %s was not read back: %r", self.topic, exc)
            return None

    async def _read_last(self, group: str) -> Snapshot | None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self._bootstrap, enable_auto_commit=False, **self._options
        )
        try:
            await consumer.start()
            numbers = (await topic_partitions(consumer, [self.topic])).get(self.topic, set())
            partitions = [KafkaTopicPartition(self.topic, p) for p in sorted(numbers)]
            if not partitions:
                return None
            ends = await seek_to_tail(consumer, partitions, TAIL_RECORDS)
            values: list[bytes | None] = []
            behind = [tp for tp, end in ends.items() if end > 0]
            while behind:
                batch = await consumer.getmany(timeout_ms=500)
                values += [record.value for records in batch.values() for record in records]
                behind = [tp for tp in behind if await consumer.position(tp) < ends[tp]]
            return newest_of_group(values, group)
        finally:
            await consumer.stop()

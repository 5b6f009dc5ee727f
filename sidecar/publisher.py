"""Publishes speed snapshots to the speeds topic, where the SDK's assignor reads them."""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaProducer

from consumer_sdk.snapshot import Snapshot, decode


class SnapshotPublisher:
    """One record per snapshot, keyed by group (so a compacted topic keeps the latest)."""

    def __init__(
        self, bootstrap_servers: str, topic: str, client_options: dict[str, Any] | None = None
    ) -> None:
        self.topic = topic
        self._bootstrap = bootstrap_servers
        self._options = client_options or {}
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        """Connect (aiokafka clients must be created inside the running loop)."""
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

"""Partitions of topics, from one metadata refresh of an aiokafka client."""

from __future__ import annotations

from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError


async def topic_partitions(
    consumer: AIOKafkaConsumer, topics: Iterable[str]
) -> dict[str, set[int]]:
    """Partitions of each of ``topics`` that exists now (missing topics are left out).

    One Metadata request for all topics: ``force_metadata_update`` is an aiokafka internal
    (stable across the pinned 0.14 series; tests/test_aiokafka_pin.py checks it), needed
    because a consumer without a subscription never refreshes metadata on its own.
    """
    if not await consumer._client.force_metadata_update():
        raise KafkaError("cluster metadata unavailable from every known broker")
    found = {}
    for topic in topics:
        partitions = consumer.partitions_for_topic(topic)
        if partitions:
            found[topic] = set(partitions)
    return found

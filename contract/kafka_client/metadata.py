"""Partitions of topics, from one metadata refresh of an aiokafka client; reading a topic's
last records."""

from __future__ import annotations

from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from contract.kafka_client.requests import client_of


async def topic_partitions(
    consumer: AIOKafkaConsumer, topics: Iterable[str]
) -> dict[str, set[int]]:
    """Partitions of each of ``topics`` that exists now (missing topics are left out).

    One Metadata request for all topics: ``force_metadata_update`` is an aiokafka internal
    (stable across the pinned 0.14 series; tests/test_aiokafka_pin.py checks it), needed
    because a consumer without a subscription never refreshes metadata on its own.
    """
    if not await client_of(consumer).force_metadata_update():
        raise KafkaError("cluster metadata unavailable from every known broker")
    found = {}
    for topic in topics:
        partitions = consumer.partitions_for_topic(topic)
        if partitions:
            found[topic] = set(partitions)
    return found


async def seek_to_tail(
    consumer: AIOKafkaConsumer, partitions: list[TopicPartition], records: int
) -> dict[TopicPartition, int]:
    """Assign ``partitions`` and place each ``records`` before its end (or at its start);
    returns their end offsets, to tell when the tail has been read."""
    consumer.assign(partitions)
    ends: dict[TopicPartition, int] = await consumer.end_offsets(partitions)
    for tp, end in ends.items():
        consumer.seek(tp, max(0, end - records))
    return ends

"""Topic ids from a Metadata v12 response: what the brokers answer, and bytes that are not."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaClient

from contract.kafka_client.kafka_uuid import ZERO_UUID
from contract.kafka_client.topic_ids import (
    MetadataResponse_v12,
    TopicIdsError,
    fetch_topic_ids,
    topic_ids_in,
)


def test_each_known_topic_has_its_id_and_others_are_left_out() -> None:
    response = MetadataResponse_v12(
        0,
        [(1, "localhost", 9092, None, {})],
        "c",
        1,
        [
            (0, "t", "AAECAwQFBgcICQoLDA0ODw", False, [], 0, {}),
            (3, "gone", ZERO_UUID, False, [], 0, {}),  # UNKNOWN_TOPIC_OR_PARTITION
            (0, "no-id", ZERO_UUID, False, [], 0, {}),
        ],
        {},
    )
    decoded = MetadataResponse_v12.decode(io.BytesIO(response.encode()))
    assert topic_ids_in(decoded) == {"t": "AAECAwQFBgcICQoLDA0ODw"}


@pytest.mark.parametrize(
    "shape", [SimpleNamespace(), SimpleNamespace(topics=7), SimpleNamespace(topics=[(0,)])]
)
def test_a_malformed_response_is_refused_with_its_own_error(shape: object) -> None:
    with pytest.raises(TopicIdsError):
        topic_ids_in(shape)


def test_the_brokers_answer_each_existing_topic_with_its_id(
    kafka: str, topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(2)

    async def ask() -> dict[str, str]:
        client = AIOKafkaClient(bootstrap_servers=kafka)
        await client.bootstrap()
        try:
            return await fetch_topic_ids(client, [topic, f"{topic}-absent"])
        finally:
            await client.close()

    first = asyncio.run(ask())
    assert set(first) == {topic}
    assert first == asyncio.run(ask())  # the same topic, the same id

"""Each topic's id, from a Metadata request of version 12 (Kafka 3.1; aiokafka's stop at 5).

A topic deleted and created again under its name gets a new id; offsets a table recorded
under the old id are another topic's. The response is bytes from the network:
:func:`topic_ids_in` takes any decoded shape and returns ids or raises
:class:`TopicIdsError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiokafka.errors import IncompatibleBrokerVersion
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

from contract.kafka_client.kafka_uuid import ZERO_UUID, Uuid
from contract.kafka_client.requests import client_of

_TEXT = CompactString("utf-8")
_REQUEST = Schema(
    ("topics", CompactArray(("topic_id", Uuid), ("name", _TEXT), ("tags", TaggedFields))),
    ("allow_auto_topic_creation", Boolean),
    ("include_topic_authorized_operations", Boolean),
    ("tags", TaggedFields),
)
_RESPONSE = Schema(
    ("throttle_time_ms", Int32),
    (
        "brokers",
        CompactArray(
            ("node_id", Int32),
            ("host", _TEXT),
            ("port", Int32),
            ("rack", _TEXT),
            ("tags", TaggedFields),
        ),
    ),
    ("cluster_id", _TEXT),
    ("controller_id", Int32),
    (
        "topics",
        CompactArray(
            ("error_code", Int16),
            ("name", _TEXT),
            ("topic_id", Uuid),
            ("is_internal", Boolean),
            (
                "partitions",
                CompactArray(
                    ("error_code", Int16),
                    ("partition_index", Int32),
                    ("leader_id", Int32),
                    ("leader_epoch", Int32),
                    ("replica_nodes", CompactArray(Int32)),
                    ("isr_nodes", CompactArray(Int32)),
                    ("offline_replicas", CompactArray(Int32)),
                    ("tags", TaggedFields),
                ),
            ),
            ("topic_authorized_operations", Int32),
            ("tags", TaggedFields),
        ),
    ),
    ("tags", TaggedFields),
)


class MetadataResponse_v12(Response):
    API_KEY = 3
    API_VERSION = 12
    SCHEMA = _RESPONSE


class MetadataRequest_v12(RequestStruct):
    FLEXIBLE_VERSION = True
    API_KEY = 3
    API_VERSION = 12
    RESPONSE_TYPE = MetadataResponse_v12
    SCHEMA = _REQUEST


class TopicIdsRequest(Request[MetadataRequest_v12]):
    """Metadata of ``topics`` by name, with their ids (never creates a topic)."""

    API_KEY = 3

    def __init__(self, topics: Iterable[str]) -> None:
        self._topics: list[tuple[str, str, dict[int, bytes]]] = [
            (ZERO_UUID, name, {}) for name in sorted(set(topics))
        ]

    def build(self, request_struct_class: type[MetadataRequest_v12]) -> MetadataRequest_v12:
        return request_struct_class(self._topics, False, False, {})


class TopicIdsError(Exception):
    """A Metadata response the topic ids could not be read from."""


def topic_ids_in(response: Any) -> dict[str, str]:
    """Each named topic's id in a Metadata response; topics the broker does not know (or
    answered with an error for) are left out."""
    ids: dict[str, str] = {}
    try:
        for error, name, topic_id, *_ in response.topics:
            if error or not isinstance(name, str) or not isinstance(topic_id, str):
                continue
            if topic_id != ZERO_UUID:
                ids[name] = topic_id
    except (TypeError, ValueError, AttributeError) as exc:
        raise TopicIdsError(f"Metadata response is malformed: {exc}") from None
    return ids


async def fetch_topic_ids(client: Any, topics: Iterable[str]) -> dict[str, str]:
    """Each of ``topics``' id, asked of any broker through aiokafka's ``client`` (an
    ``AIOKafkaClient``); empty where the brokers predate Metadata v12 (before Kafka 3.1).
    A broker out of reach raises aiokafka's errors."""
    node = client.get_random_node()
    if node is None:
        raise TopicIdsError("no broker known yet")
    try:
        response = await client.send(node, TopicIdsRequest(topics))
    except (IncompatibleBrokerVersion, NotImplementedError):
        return {}
    return topic_ids_in(response)


async def consumer_topic_ids(consumer: Any, topics: Iterable[str]) -> dict[str, str]:
    """:func:`fetch_topic_ids` through an ``AIOKafkaConsumer``'s own client."""
    return await fetch_topic_ids(client_of(consumer), topics)

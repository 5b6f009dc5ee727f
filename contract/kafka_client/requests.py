"""Requests sent to one broker through the connections an aiokafka consumer or admin client
already holds (their ``send`` is not public API), and the cluster metadata they keep."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiokafka.protocol.commit import OffsetFetchRequest


async def send(owner: object, node_id: int, request: Any) -> Any:
    """``request``'s response from broker ``node_id``, through ``owner``'s (an
    ``AIOKafkaConsumer``'s or ``AIOKafkaAdminClient``'s) client; raises aiokafka's errors
    (``IncompatibleBrokerVersion`` where the broker lacks every version of the request)."""
    return await client_of(owner).send(node_id, request)


def cluster(owner: object) -> Any:
    """The cluster metadata ``owner``'s client keeps (brokers, partitions' leaders and
    replicas), as of its last refresh."""
    return client_of(owner).cluster


def broker_ids(owner: object) -> list[int]:
    """The node ids of the brokers ``owner``'s client knows, ascending."""
    return sorted(broker.nodeId for broker in cluster(owner).brokers())


def offset_fetch_request(group: str, partitions: Iterable[tuple[str, list[int]]]) -> Any:
    """An OffsetFetch request of ``group``'s committed offsets of ``partitions``
    ((topic, [partition, ...]) each): aiokafka's, sent with :func:`send` to the group's
    coordinator."""
    return OffsetFetchRequest(group, list(partitions))


def client_of(owner: object) -> Any:
    """The ``AIOKafkaClient`` an aiokafka consumer or admin client sends its requests with."""
    return owner._client  # type: ignore[attr-defined]

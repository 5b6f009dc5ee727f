"""Shared fixtures: the Kafka cluster every Kafka test runs against, and a topic factory.

``kafka`` yields a bootstrap string: ``KAFKA_BOOTSTRAP_SERVERS`` if set, else a testcontainers
broker when a Docker engine answers, else the embedded broker (librdkafka's mock cluster in a
child process). Tests needing an API the cluster lacks are skipped with that reason only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from consumer_sdk.clusters import Capability, KafkaCluster, kafka_cluster

_MARKER_CAPABILITY = {
    "needs_create_topics": Capability.CREATE_TOPICS,
    "needs_describe_log_dirs": Capability.DESCRIBE_LOG_DIRS,
}


@pytest.fixture(scope="session")
def kafka_cluster_handle() -> Iterator[KafkaCluster]:
    """The session's cluster, started once."""
    with kafka_cluster() as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def _skip_missing_capability(request: pytest.FixtureRequest) -> None:
    for marker, capability in _MARKER_CAPABILITY.items():
        if request.node.get_closest_marker(marker) is None:
            continue
        cluster: KafkaCluster = request.getfixturevalue("kafka_cluster_handle")
        if not cluster.supports(capability):
            pytest.skip(f"{cluster.kind.value} cluster lacks the {capability.value} API")


@pytest.fixture(scope="session")
def kafka(kafka_cluster_handle: KafkaCluster) -> str:
    """Bootstrap string of the session's Kafka cluster."""
    return kafka_cluster_handle.bootstrap_servers


@pytest.fixture(scope="session")
def topic_factory(kafka_cluster_handle: KafkaCluster) -> Callable[..., str]:
    """``topic_factory(partitions, prefix="t", replication=1)`` creates a unique topic."""
    return kafka_cluster_handle.create_topic

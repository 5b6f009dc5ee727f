"""The cluster fixture's capability markers and cluster selection."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from local_kafka.clusters import BOOTSTRAP_ENV, Capability, ClusterKind, KafkaCluster
from tests.kafka_helpers import consume_keys, produce_numbered


@pytest.mark.needs_create_topics
def test_create_topics_api(kafka: str) -> None:
    """Runs on real clusters only: the embedded broker has no CreateTopics."""
    name = f"admin-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka})  # kept: its futures die with it
    futures = admin.create_topics([NewTopic(name, 2, 1)])
    futures[name].result(timeout=30)
    produced = produce_numbered(kafka, name, 20, 2)
    assert sorted(consume_keys(kafka, [name], 20, f"g-{name}")) == sorted(produced)


def test_embedded_cluster_reports_what_it_lacks(
    kafka_cluster_handle: KafkaCluster, topic_factory: Callable[..., str]
) -> None:
    cluster = kafka_cluster_handle
    if cluster.kind is ClusterKind.EMBEDDED:
        assert not cluster.supports(Capability.CREATE_TOPICS)
        assert not cluster.supports(Capability.DESCRIBE_LOG_DIRS)
        assert cluster.embedded is not None
    else:
        assert cluster.supports(Capability.CREATE_TOPICS)
    first, second = topic_factory(1), topic_factory(1, prefix="other")
    assert first != second and second.startswith("other-")
    with pytest.raises(ValueError, match="partitions must be an integer >= 1"):
        topic_factory(0)


def test_external_bootstrap_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    from local_kafka.clusters import kafka_cluster

    monkeypatch.setenv(BOOTSTRAP_ENV, "broker-a:9092,broker-b:9092")
    with kafka_cluster() as cluster:
        assert cluster.kind is ClusterKind.EXTERNAL
        assert cluster.bootstrap_servers == "broker-a:9092,broker-b:9092"
        assert cluster.supports(Capability.DESCRIBE_LOG_DIRS)

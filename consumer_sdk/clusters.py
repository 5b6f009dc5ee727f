"""Pick the Kafka cluster tests, benchmarks and the demo run against.

Order: ``KAFKA_BOOTSTRAP_SERVERS`` if set; else a real broker from testcontainers when a
Docker engine answers; else the embedded broker in a child process. All three offer the
same small surface: a bootstrap string, topic creation, and what the cluster can do.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from consumer_sdk.embedded_process import EmbeddedKafkaProcess

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"


class ClusterKind(StrEnum):
    """Where the cluster comes from."""

    EXTERNAL = "external"
    TESTCONTAINERS = "testcontainers"
    EMBEDDED = "embedded"


class Capability(StrEnum):
    """Kafka APIs that some clusters lack (the embedded broker lacks both)."""

    CREATE_TOPICS = "CreateTopics"
    DESCRIBE_LOG_DIRS = "DescribeLogDirs"


class _TopicCreator(Protocol):
    def __call__(self, name: str, partitions: int, replication: int) -> None: ...


@dataclass
class KafkaCluster:
    """A running cluster: its bootstrap string, kind, capabilities and a topic factory."""

    bootstrap_servers: str
    kind: ClusterKind
    capabilities: frozenset[Capability]
    _create: _TopicCreator
    embedded: EmbeddedKafkaProcess | None = None
    _created: list[str] = field(default_factory=list)

    def create_topic(self, partitions: int, *, prefix: str = "t", replication: int = 1) -> str:
        """Create a uniquely named topic and return its name."""
        if not isinstance(partitions, int) or partitions < 1:
            raise ValueError(f"partitions must be an integer >= 1, got {partitions!r}")
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self._create(name, partitions, replication)
        self._created.append(name)
        return name

    def supports(self, capability: Capability) -> bool:
        """Whether the cluster implements ``capability``."""
        return capability in self.capabilities


def _admin_topic_creator(bootstrap: str) -> _TopicCreator:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})

    def create(name: str, partitions: int, replication: int) -> None:
        futures = admin.create_topics([NewTopic(name, partitions, replication)])
        futures[name].result(timeout=30)

    return create


def docker_engine_answers() -> bool:
    """Whether a Docker engine answers (not just a client binary on PATH)."""
    try:
        import docker

        client: Any = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:
        return False


@contextlib.contextmanager
def kafka_cluster() -> Iterator[KafkaCluster]:
    """Yield the cluster to use, chosen as the module docstring says, and clean it up."""
    real = frozenset({Capability.CREATE_TOPICS, Capability.DESCRIBE_LOG_DIRS})
    external = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if external:
        yield KafkaCluster(external, ClusterKind.EXTERNAL, real, _admin_topic_creator(external))
        return
    if docker_engine_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as container:
            bootstrap = container.get_bootstrap_server()
            yield KafkaCluster(
                bootstrap, ClusterKind.TESTCONTAINERS, real, _admin_topic_creator(bootstrap)
            )
        return
    with EmbeddedKafkaProcess(brokers=3) as broker:
        yield KafkaCluster(
            broker.bootstrap_servers,
            ClusterKind.EMBEDDED,
            frozenset(),
            broker.create_topic,
            embedded=broker,
        )

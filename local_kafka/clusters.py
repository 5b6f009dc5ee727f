"""Pick the Kafka cluster tests, benchmarks and the demo run against.

Kinds: a user's own cluster (``KAFKA_BOOTSTRAP_SERVERS``), a testcontainers broker (needs a
Docker engine), the embedded broker (librdkafka's mock cluster in a child process) and Apache
Kafka started here from its jars (:mod:`local_kafka.apache_kafka`). All offer the same small
surface: a bootstrap string, topic creation, what the cluster can do, and (for the two this
project starts) taking a broker down and up.

The test suite runs every Kafka test once per kind in :func:`suite_cluster_kinds`: the
embedded broker and Apache Kafka by default, only the user's cluster when
``KAFKA_BOOTSTRAP_SERVERS`` is set, or the kinds listed in ``KAFKA_AUTOSCALER_TEST_CLUSTERS``.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from local_kafka.apache_kafka import ApacheKafka
from local_kafka.embedded import BrokerHandle
from local_kafka.embedded_process import EmbeddedKafkaProcess
from local_kafka.secured import SecuredListeners

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
SUITE_KINDS_ENV = "KAFKA_AUTOSCALER_TEST_CLUSTERS"
REQUIRED_KINDS_ENV = "KAFKA_AUTOSCALER_REQUIRE_CLUSTERS"
# Legs the same variable may require that are not Kafka clusters.
NON_KAFKA_LEGS = frozenset({"kube-apiserver", "keda", "kube-node", "images", "promtool"})


class ClusterKind(StrEnum):
    """Where the cluster comes from."""

    EXTERNAL = "external"
    TESTCONTAINERS = "testcontainers"
    EMBEDDED = "embedded"
    APACHE = "apache"


class Capability(StrEnum):
    """Kafka APIs that some clusters lack (the embedded broker lacks them all; Apache Kafka
    has them all)."""

    CREATE_TOPICS = "CreateTopics"
    DESCRIBE_LOG_DIRS = "DescribeLogDirs"
    DESCRIBE_GROUPS = "DescribeGroups"
    # Read committed: the aborted-transaction index in fetch responses and the last stable
    # offset (librdkafka's mock cluster keeps neither, and its markers fail their CRC).
    TRANSACTIONS = "transactions read committed"


class _TopicCreator(Protocol):
    def __call__(self, name: str, partitions: int, replication: int) -> None: ...


@dataclass
class KafkaCluster:
    """A running cluster: its bootstrap string, kind, capabilities and a topic factory; for
    the clusters started here, the handle that can take brokers down and up."""

    bootstrap_servers: str
    kind: ClusterKind
    capabilities: frozenset[Capability]
    _create: _TopicCreator
    handle: EmbeddedKafkaProcess | ApacheKafka | None = None
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

    @property
    def embedded(self) -> EmbeddedKafkaProcess | None:
        """The embedded broker's handle (error injection, RTT), or None on other kinds."""
        return self.handle if isinstance(self.handle, EmbeddedKafkaProcess) else None

    @property
    def broker_count(self) -> int:
        """Brokers in a cluster started here (0 for a cluster this project did not start)."""
        return self.handle.brokers if self.handle is not None else 0

    def broker_handle(self) -> BrokerHandle:
        """The handle of a cluster started here; raises on a user's or testcontainers one."""
        if self.handle is None:
            raise RuntimeError(f"a {self.kind.value} cluster cannot take brokers down from here")
        return self.handle

    def broker_down(self, broker_id: int) -> None:
        """Take one broker down abruptly (embedded: connections refused; Apache: kill -9)."""
        self.broker_handle().broker_down(broker_id)

    def broker_up(self, broker_id: int) -> None:
        """Bring a broker taken down by :meth:`broker_down` back."""
        self.broker_handle().broker_up(broker_id)


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


def _kinds_from(value: str, variable: str) -> list[ClusterKind]:
    kinds: list[ClusterKind] = []
    for word in (w.strip() for w in value.split(",")):
        if not word:
            continue
        try:
            kinds.append(ClusterKind(word))
        except ValueError:
            accepted = ", ".join([*(k.value for k in ClusterKind), *sorted(NON_KAFKA_LEGS)])
            raise ValueError(f"{variable}: {word!r} is not a cluster kind ({accepted})") from None
    return kinds


def suite_cluster_kinds() -> list[ClusterKind]:
    """The kinds the test suite runs its Kafka tests on (see the module docstring)."""
    listed = os.environ.get(SUITE_KINDS_ENV, "").strip()
    if listed:
        return _kinds_from(listed, SUITE_KINDS_ENV)
    if os.environ.get(BOOTSTRAP_ENV, "").strip():
        return [ClusterKind.EXTERNAL]
    return [ClusterKind.EMBEDDED, ClusterKind.APACHE]


def required_legs() -> set[str]:
    """Every leg named in ``KAFKA_AUTOSCALER_REQUIRE_CLUSTERS``: Kafka cluster kinds and the
    other real services the suite starts (``kube-apiserver``)."""
    words = (w.strip() for w in os.environ.get(REQUIRED_KINDS_ENV, "").split(","))
    return {word for word in words if word}


def required_cluster_kinds() -> set[ClusterKind]:
    """Kinds that must not be skipped (CI lists them in ``KAFKA_AUTOSCALER_REQUIRE_CLUSTERS``)."""
    kafka = ",".join(sorted(required_legs() - NON_KAFKA_LEGS))
    return set(_kinds_from(kafka, REQUIRED_KINDS_ENV))


def default_cluster_kind() -> ClusterKind:
    """``KAFKA_BOOTSTRAP_SERVERS`` if set; else testcontainers when a Docker engine answers;
    else the embedded broker."""
    if os.environ.get(BOOTSTRAP_ENV, "").strip():
        return ClusterKind.EXTERNAL
    if docker_engine_answers():
        return ClusterKind.TESTCONTAINERS
    return ClusterKind.EMBEDDED


_REAL = frozenset(Capability)


@contextlib.contextmanager
def kafka_cluster(
    kind: ClusterKind | None = None,
    *,
    brokers: int | None = None,
    apache_settings: Mapping[str, str] | None = None,
    apache_heap_mb: int = 512,
    apache_heap_committed: bool = False,
    apache_native_memory_tracking: bool = False,
    apache_secured: SecuredListeners | None = None,
    apache_broker_assignor: bool = False,
) -> Iterator[KafkaCluster]:
    """Yield a running cluster of ``kind`` (default :func:`default_cluster_kind`) and clean
    it up. ``brokers`` sizes the clusters started here (embedded 3, Apache Kafka 1 by
    default); ``apache_settings`` are node properties for Apache Kafka, ``apache_heap_mb``
    each node's heap (``apache_heap_committed``: committed and touched at start;
    ``apache_native_memory_tracking``: the JVM's native memory tracking on),
    ``apache_secured`` its secured listeners (local_kafka.secured), ``apache_broker_assignor``
    loads our KIP-848 assignor (local_kafka.broker_assignor). Raises
    :class:`local_kafka.apache_kafka.ApacheKafkaUnavailable` when Apache Kafka cannot start
    here (no Java, jars not fetchable)."""
    kind = kind if kind is not None else default_cluster_kind()
    if kind is ClusterKind.EXTERNAL:
        external = os.environ.get(BOOTSTRAP_ENV, "").strip()
        if not external:
            raise ValueError(f"an external cluster needs {BOOTSTRAP_ENV}")
        yield KafkaCluster(external, kind, _REAL, _admin_topic_creator(external))
    elif kind is ClusterKind.TESTCONTAINERS:
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as container:
            bootstrap = container.get_bootstrap_server()
            yield KafkaCluster(bootstrap, kind, _REAL, _admin_topic_creator(bootstrap))
    elif kind is ClusterKind.APACHE:
        with ApacheKafka(
            brokers=brokers or 1,
            heap_mb=apache_heap_mb,
            heap_committed=apache_heap_committed,
            native_memory_tracking=apache_native_memory_tracking,
            settings=apache_settings,
            secured=apache_secured,
            broker_assignor=apache_broker_assignor,
        ) as apache:
            yield KafkaCluster(
                apache.bootstrap_servers, kind, _REAL, apache.create_topic, handle=apache
            )
    else:
        with EmbeddedKafkaProcess(brokers=brokers or 3) as broker:
            yield KafkaCluster(
                broker.bootstrap_servers, kind, frozenset(), broker.create_topic, handle=broker
            )
